// `sparse-decode demo`: one DeepSeek-V4-shaped decode step on synthetic FP8
// data, on the GPU when there is one that serves it (checked against the
// fp64 reference), else on the CPU backend (which is that reference: no
// check is possible, and the demo says so).
#pragma once

#include <cstdint>

namespace sparse_decode::cli {

struct DemoOptions {
  int64_t tokens = 6;      // T: query tokens (requests of 6)
  int32_t width = 640;     // W: 128 SWA + top-k columns
  uint64_t seed = 1;
  bool force_cpu = false;  // run the CPU backend even with a GPU
  bool ragged = false;     // per-token active lengths in [W/2, W] instead of all W columns
  int launches = 100;      // timed GPU launches (median reported)
};

// Returns the exit code: 0 when the output is finite (and, on the GPU, within
// the bound).
int run_demo(const DemoOptions& options);

}  // namespace sparse_decode::cli
