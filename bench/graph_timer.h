// Timing of L launches captured into one CUDA graph, the method of DESIGN.md
// "How performance is measured": the L2 is flushed before every replay,
// outside the timed region, and each replay is timed with CUDA events.
#pragma once

#include <cstddef>
#include <functional>
#include <vector>

#include "testing/device_buffer.h"

struct CUstream_st;

namespace sparse_decode::bench {

class GraphTimer {
 public:
  // `stream` must not be the legacy default stream (it is captured).
  GraphTimer(CUstream_st* stream, size_t flush_bytes);

  // Captures `enqueue(stream)` into one graph, replays it `warmup` times, then
  // `replays` times each after a write of the whole flush buffer. Returns the
  // time of each timed replay in microseconds. Throws on any CUDA error.
  std::vector<double> time_replays(const std::function<void(CUstream_st*)>& enqueue, int replays, int warmup);

  // The same for several graphs compared with each other, their replays
  // interleaved (replay i of every graph, then replay i + 1): the clocks a
  // GPU settles at over a run then weigh on each alike. Returns the times of
  // graph k at [k].
  std::vector<std::vector<double>> time_interleaved(const std::vector<std::function<void(CUstream_st*)>>& enqueues,
                                                    int replays, int warmup);

  size_t flush_bytes() const { return flush_.bytes(); }

 private:
  void flush_l2(int flush);

  CUstream_st* stream_;
  testing::DeviceBuffer flush_;  // larger than the L2 (60 MB on H200): writing it evicts every row
};

}  // namespace sparse_decode::bench
