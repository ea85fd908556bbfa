#include "bench/graph_timer.h"

#include <cuda_runtime_api.h>

#include <memory>
#include <type_traits>

#include "bench/cuda_check.h"

namespace sparse_decode::bench {
namespace {

struct GraphDeleter {
  void operator()(cudaGraph_t graph) const { cudaGraphDestroy(graph); }
};
struct GraphExecDeleter {
  void operator()(cudaGraphExec_t exec) const { cudaGraphExecDestroy(exec); }
};
struct EventDeleter {
  void operator()(cudaEvent_t event) const { cudaEventDestroy(event); }
};
using Graph = std::unique_ptr<std::remove_pointer_t<cudaGraph_t>, GraphDeleter>;
using GraphExec = std::unique_ptr<std::remove_pointer_t<cudaGraphExec_t>, GraphExecDeleter>;
using Event = std::unique_ptr<std::remove_pointer_t<cudaEvent_t>, EventDeleter>;

Event make_event() {
  cudaEvent_t event = nullptr;
  SPARSE_DECODE_CUDA_CHECK(cudaEventCreate(&event));
  return Event(event);
}

// Records what `enqueue` launches on `stream`; ends the capture even when it throws.
Graph capture(cudaStream_t stream, const std::function<void(CUstream_st*)>& enqueue) {
  SPARSE_DECODE_CUDA_CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
  try {
    enqueue(stream);
  } catch (...) {
    cudaGraph_t broken = nullptr;
    cudaStreamEndCapture(stream, &broken);
    if (broken) cudaGraphDestroy(broken);
    cudaGetLastError();  // clear the (non-sticky) error that the broken capture left
    throw;
  }
  cudaGraph_t graph = nullptr;
  SPARSE_DECODE_CUDA_CHECK(cudaStreamEndCapture(stream, &graph));
  return Graph(graph);
}

GraphExec instantiate(cudaGraph_t graph, cudaStream_t stream) {
  cudaGraphExec_t exec = nullptr;
  SPARSE_DECODE_CUDA_CHECK(cudaGraphInstantiate(&exec, graph, 0));
  GraphExec owned(exec);
  SPARSE_DECODE_CUDA_CHECK(cudaGraphUpload(exec, stream));
  return owned;
}

}  // namespace

GraphTimer::GraphTimer(CUstream_st* stream, size_t flush_bytes) : stream_(stream), flush_(flush_bytes) {}

void GraphTimer::flush_l2(int flush) {
  // A different value each time, so that no write can be skipped as unchanged.
  const int value = flush % 2 ? 0x5A : 0xA5;
  SPARSE_DECODE_CUDA_CHECK(cudaMemsetAsync(flush_.get(), value, flush_.bytes(), stream_));
}

std::vector<double> GraphTimer::time_replays(const std::function<void(CUstream_st*)>& enqueue, int replays,
                                             int warmup) {
  return time_interleaved({enqueue}, replays, warmup)[0];
}

std::vector<std::vector<double>> GraphTimer::time_interleaved(
    const std::vector<std::function<void(CUstream_st*)>>& enqueues, int replays, int warmup) {
  std::vector<Graph> graphs;
  std::vector<GraphExec> execs;
  for (const auto& enqueue : enqueues) {
    graphs.push_back(capture(stream_, enqueue));
    execs.push_back(instantiate(graphs.back().get(), stream_));
  }

  int flushes = 0;
  for (int i = 0; i < warmup; ++i) {
    for (const GraphExec& exec : execs) {
      flush_l2(flushes++);
      SPARSE_DECODE_CUDA_CHECK(cudaGraphLaunch(exec.get(), stream_));
    }
  }
  // All replays are queued before the host waits, so host latency never
  // lands between a start event and its graph.
  std::vector<Event> starts, stops;
  for (int i = 0; i < replays; ++i) {
    for (const GraphExec& exec : execs) {
      starts.push_back(make_event());
      stops.push_back(make_event());
      flush_l2(flushes++);
      SPARSE_DECODE_CUDA_CHECK(cudaEventRecord(starts.back().get(), stream_));
      SPARSE_DECODE_CUDA_CHECK(cudaGraphLaunch(exec.get(), stream_));
      SPARSE_DECODE_CUDA_CHECK(cudaEventRecord(stops.back().get(), stream_));
    }
  }
  SPARSE_DECODE_CUDA_CHECK(cudaStreamSynchronize(stream_));

  std::vector<std::vector<double>> microseconds(execs.size());
  for (size_t k = 0; k < starts.size(); ++k) {
    float ms = 0.0f;
    SPARSE_DECODE_CUDA_CHECK(cudaEventElapsedTime(&ms, starts[k].get(), stops[k].get()));
    microseconds[k % execs.size()].push_back(1000.0 * ms);
  }
  return microseconds;
}

}  // namespace sparse_decode::bench
