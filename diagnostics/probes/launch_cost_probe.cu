// What a kernel that returns at once costs a layer inside a CUDA graph, by
// launch configuration: threads, registers, dynamic shared memory, parameter
// bytes, PDL, and a second kernel a layer (the split path's pair). Timed as
// the bench times a layer: 8 layers a graph, L2 flushed (512 MiB memset)
// before each replay outside the events, replays queued, median of 30
// (PROBE_ALL_HARNESSES=1 also: replays synchronized, 1 and 32 layers). Then
// the same harness over dsv4_decode calls (T = 6, widths 640 and 128, kAuto;
// every layer the same problem or each its own), and the bench's own pools,
// layers and timer against the probe's (bisect_against_the_bench). With
// SPARSE_DECODE_SKIP_STAGES=8 the library's kernels return at once.
// PROBE_START (start_process) picks what the process does first.
//   launch-cost-probe
// See docs/kernels/split.md, "Sixteenth session".
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <iterator>
#include <memory>
#include <string>
#include <vector>

#include "bench/bench_layers.h"
#include "bench/graph_timer.h"
#include "common/launch.h"
#include "sparse_decode/dsv4_decode.h"
#include "testing/device_buffer.h"
#include "testing/dsv4_problem.h"

namespace {

#define PROBE_CHECK(call)                                                                 \
  do {                                                                                    \
    cudaError_t e_ = (call);                                                              \
    if (e_ != cudaSuccess) {                                                              \
      std::fprintf(stderr, "%s:%d %s\n", __FILE__, __LINE__, cudaGetErrorString(e_));     \
      std::exit(1);                                                                       \
    }                                                                                     \
  } while (0)

template <int kBytes>
struct Params {
  int run;  // 0: return at once (always, here)
  float* out;
  char pad[kBytes > 16 ? kBytes - 16 : 1];
};

// Work a real kernel would do, never reached (p.run is 0): kLive values kept
// live so that ptxas allocates registers as a real kernel would, the loop
// unrolled kUnroll times for code size; `middle` runs between loop and store.
template <int kLive, int kUnroll, int kBytes, class Middle>
__device__ __forceinline__ void unreached_work(const Params<kBytes>& p, Middle&& middle) {
  float v[kLive];
#pragma unroll
  for (int i = 0; i < kLive; ++i) v[i] = p.out[threadIdx.x * kLive + i];
#pragma unroll kUnroll
  for (int k = 0; k < p.run; ++k) {
#pragma unroll
    for (int i = 0; i < kLive; ++i) v[i] = v[i] * v[(i + 1) % kLive] + 1.0f;
  }
  middle(v);
#pragma unroll
  for (int i = 0; i < kLive; ++i) p.out[threadIdx.x * kLive + i] = v[i];
}

// Returns at once (after the dependency wait, a no-op unless launched with
// PDL, as in the library's kernels).
template <int kThreads, int kLive, int kBytes>
__global__ void __launch_bounds__(kThreads, 1) empty_kernel(const __grid_constant__ Params<kBytes> p) {
  asm volatile("griddepcontrol.wait;\n" ::: "memory");
  if (p.run == 0) return;
  unreached_work<kLive, 1>(p, [](float(&)[kLive]) {});
}

// As empty_kernel, with what the library's kernels have and it has not:
// ~4 k instructions of code, dynamic shared memory and named barriers used
// on the unreached path, and with kMbarrier an mbarrier (its ELF then lists
// EIATTR_NUM_MBARRIERS, as the library's do).
template <int kThreads, int kLive, int kBytes, bool kMbarrier>
__global__ void __launch_bounds__(kThreads, 1) big_kernel(const __grid_constant__ Params<kBytes> p) {
  extern __shared__ float smem[];
  asm volatile("griddepcontrol.wait;\n" ::: "memory");
  if (p.run == 0) return;
  if constexpr (kMbarrier) {
    __shared__ alignas(8) uint64_t barrier;
    const uint32_t address = static_cast<uint32_t>(__cvta_generic_to_shared(&barrier));
    if (threadIdx.x == 0) asm volatile("mbarrier.init.shared.b64 [%0], %1;\n" ::"r"(address), "r"(kThreads) : "memory");
    __syncthreads();
    asm volatile("mbarrier.arrive.shared.b64 _, [%0];\n" ::"r"(address) : "memory");
    asm volatile(
        "{\n .reg .pred done;\n wait:\n"
        " mbarrier.try_wait.parity.shared.b64 done, [%0], 0;\n @!done bra wait;\n}\n" ::"r"(address)
        : "memory");
  }
  unreached_work<kLive, 64>(p, [&](float(&v)[kLive]) {
    smem[threadIdx.x] = v[0];
    asm volatile("bar.sync 1, %0;\n" ::"r"(kThreads) : "memory");
    v[1] += smem[(threadIdx.x + 1) % kThreads];
    asm volatile("bar.sync 2, %0;\n" ::"r"(kThreads) : "memory");
  });
}

struct Config {
  const char* name;
  const void* first;
  void* first_params;
  int first_ctas, first_threads;
  size_t first_smem;
  bool first_pdl;
  const void* second;  // null: one kernel a layer
  void* second_params;
  int second_ctas;
  bool second_pdl;
};

// As the library's launch_kernel launches (the same LaunchConfig), through
// the probe's own runtime.
void launch(const void* kernel, void* params, int ctas, int threads, size_t smem, bool pdl, cudaStream_t stream) {
  sparse_decode::LaunchConfig config(ctas, threads, smem, pdl, stream);
  void* kernel_args[] = {params};
  PROBE_CHECK(cudaLaunchKernelExC(&config.config, kernel, kernel_args));
}

// How the replays are timed: `queued` as the bench times them (every replay
// queued before the host waits, the graph uploaded once), else the host
// waits for each replay before it queues the next; `layers` calls a graph.
struct Harness {
  bool queued = false;
  int layers = 8;
};
Harness harness;

// Median µs a layer of a graph of harness.layers calls of `layer`.
double time_layers(const std::function<void(cudaStream_t)>& layer, cudaStream_t stream, void* flush,
                   size_t flush_bytes) {
  constexpr int kReplays = 30, kWarmup = 3;
  cudaGraph_t graph;
  PROBE_CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
  for (int l = 0; l < harness.layers; ++l) layer(stream);
  PROBE_CHECK(cudaStreamEndCapture(stream, &graph));
  cudaGraphExec_t exec;
  PROBE_CHECK(cudaGraphInstantiate(&exec, graph, 0));
  if (harness.queued) PROBE_CHECK(cudaGraphUpload(exec, stream));
  std::vector<cudaEvent_t> starts(kWarmup + kReplays), stops(kWarmup + kReplays);
  for (int r = 0; r < kWarmup + kReplays; ++r) {
    PROBE_CHECK(cudaEventCreate(&starts[r]));
    PROBE_CHECK(cudaEventCreate(&stops[r]));
  }
  for (int r = 0; r < kWarmup + kReplays; ++r) {
    PROBE_CHECK(cudaMemsetAsync(flush, r & 1 ? 0x5A : 0xA5, flush_bytes, stream));
    PROBE_CHECK(cudaEventRecord(starts[r], stream));
    PROBE_CHECK(cudaGraphLaunch(exec, stream));
    PROBE_CHECK(cudaEventRecord(stops[r], stream));
    if (!harness.queued) PROBE_CHECK(cudaEventSynchronize(stops[r]));
  }
  PROBE_CHECK(cudaStreamSynchronize(stream));
  std::vector<float> us;
  for (int r = kWarmup; r < kWarmup + kReplays; ++r) {
    float ms = 0;
    PROBE_CHECK(cudaEventElapsedTime(&ms, starts[r], stops[r]));
    us.push_back(1000.0f * ms / harness.layers);
  }
  for (int r = 0; r < kWarmup + kReplays; ++r) {
    PROBE_CHECK(cudaEventDestroy(starts[r]));
    PROBE_CHECK(cudaEventDestroy(stops[r]));
  }
  std::sort(us.begin(), us.end());
  PROBE_CHECK(cudaGraphExecDestroy(exec));
  PROBE_CHECK(cudaGraphDestroy(graph));
  return us[us.size() / 2];
}

double time_config(const Config& c, cudaStream_t stream, void* flush, size_t flush_bytes) {
  return time_layers(
      [&](cudaStream_t s) {
        launch(c.first, c.first_params, c.first_ctas, c.first_threads, c.first_smem, c.first_pdl, s);
        if (c.second) launch(c.second, c.second_params, c.second_ctas, 256, 0, c.second_pdl, s);
      },
      stream, flush, flush_bytes);
}

// One dsv4_decode call; exits with its message on an error.
void decode(const sparse_decode::Dsv4DecodeArgs& args, const sparse_decode::testing::DeviceBuffer& workspace,
            cudaStream_t stream) {
  const sparse_decode::Status status = sparse_decode::dsv4_decode(args, workspace.get(), workspace.bytes(), stream);
  if (!status.ok()) {
    std::fprintf(stderr, "dsv4_decode: %s\n", status.message().c_str());
    std::exit(1);
  }
}

// `count` test problems (kAuto, 16 heads, FP8, per-token lens) of T tokens
// and width W, seeds 1..count.
using Problems = std::vector<std::unique_ptr<sparse_decode::testing::Dsv4DeviceProblem>>;
Problems make_problems(int count, int64_t tokens, int32_t width, bool pdl) {
  Problems problems;
  for (int l = 0; l < count; ++l) {
    sparse_decode::testing::Dsv4ProblemConfig config;
    config.tokens = tokens;
    config.width = width;
    config.seed = 1 + l;
    problems.push_back(std::make_unique<sparse_decode::testing::Dsv4DeviceProblem>(
        sparse_decode::testing::make_dsv4_problem(config)));
    problems.back()->args.enable_pdl = pdl;
  }
  return problems;
}

size_t workspace_bytes(const Problems& problems) {
  size_t bytes = 16;
  for (const auto& problem : problems) bytes = std::max(bytes, sparse_decode::workspace_size(problem->args));
  return bytes;
}

// dsv4_decode at T tokens and width W in the probe's harness: every layer
// the same problem, or (distinct) each its own (own rows, indices, q and
// out, as in the bench).
double time_dsv4(int64_t tokens, int32_t width, bool pdl, bool distinct, cudaStream_t stream, void* flush,
                 size_t flush_bytes) {
  const Problems problems = make_problems(distinct ? harness.layers : 1, tokens, width, pdl);
  const sparse_decode::testing::DeviceBuffer workspace(workspace_bytes(problems));
  int next = 0;
  return time_layers([&](cudaStream_t s) { decode(problems[next++ % problems.size()]->args, workspace, s); }, stream,
                     flush, flush_bytes);
}

// The bench's own pools, layers and timer against the probe's (which of
// them makes a layer cost more in the bench), T = 6, W = 640, 8 layers.
void bisect_against_the_bench(cudaStream_t stream, void* flush, size_t flush_bytes, const char* skip) {
  using namespace sparse_decode;
  harness = Harness{true, 8};
  const bench::KvPools pools(512u << 20, 1536u << 20, 8, DType::kFloat8E4M3, 1, stream);
  const bench::BenchLayers layers(pools, bench::BenchShape{}, 1, stream);
  size_t bytes = 16;
  for (int l = 0; l < 8; ++l) bytes = std::max(bytes, workspace_size(layers.layer(l).args));
  const testing::DeviceBuffer bench_workspace(bytes);
  const Problems problems = make_problems(8, 6, 640, false);
  const testing::DeviceBuffer probe_workspace(workspace_bytes(problems));
  auto bench_layer = [&](int l, cudaStream_t s) { decode(layers.layer(l).args, bench_workspace, s); };
  auto probe_layer = [&](int l, cudaStream_t s) { decode(problems[l]->args, probe_workspace, s); };
  auto probe_timer = [&](const std::function<void(int, cudaStream_t)>& layer) {
    int next = 0;
    return time_layers([&](cudaStream_t s) { layer(next++ % 8, s); }, stream, flush, flush_bytes);
  };
  bench::GraphTimer timer(stream, flush_bytes);
  auto bench_timer = [&](const std::function<void(int, cudaStream_t)>& layer) {
    std::vector<double> us = timer.time_replays(
        [&](cudaStream_t s) {
          for (int l = 0; l < 8; ++l) layer(l, s);
        },
        30, 3);
    std::sort(us.begin(), us.end());
    return us[us.size() / 2] / 8;
  };
  const char* stages = skip ? skip : "none";
  std::printf("bisect (skip stages %s): bench layers, probe timer    %6.2f us a layer\n", stages,
              probe_timer(bench_layer));
  std::printf("bisect (skip stages %s): bench layers, bench timer    %6.2f us a layer\n", stages,
              bench_timer(bench_layer));
  std::printf("bisect (skip stages %s): probe problems, bench timer  %6.2f us a layer\n", stages,
              bench_timer(probe_layer));
  std::printf("bisect (skip stages %s): probe problems, probe timer  %6.2f us a layer\n", stages,
              probe_timer(probe_layer));
}

template <class Kernel>
const void* prepared(Kernel kernel, size_t smem) {
  PROBE_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem)));
  cudaFuncAttributes attributes{};
  PROBE_CHECK(cudaFuncGetAttributes(&attributes, kernel));
  std::printf("  kernel: %d registers\n", attributes.numRegs);
  return reinterpret_cast<const void*>(kernel);
}

// What the process does before it times anything (PROBE_START): nothing;
// memset-legacy: eight synchronous 96 KiB cudaMemset calls (the legacy
// stream, as the bench's output poisoning did: every later launch of the
// process cost ~0.3 us more); memset-legacy-once: one of them (no effect);
// memset-stream: the eight as cudaMemsetAsync on the probe's stream (no
// effect); ballast: 2 GiB allocated and written, kept (no effect); bisect:
// see bisect_against_the_bench. What it allocates lives as long as the result.
struct ProcessStart {
  std::vector<sparse_decode::testing::DeviceBuffer> buffers;
};

ProcessStart start_process(const std::string& first, cudaStream_t stream) {
  const std::string known[] = {"nothing", "memset-legacy", "memset-legacy-once", "memset-stream", "ballast", "bisect"};
  if (std::find(std::begin(known), std::end(known), first) == std::end(known)) {
    std::fprintf(stderr, "PROBE_START=%s: not one of nothing, memset-legacy, memset-legacy-once, memset-stream, "
                 "ballast, bisect\n", first.c_str());
    std::exit(2);
  }
  ProcessStart kept;
  const int memsets = first == "memset-legacy" || first == "memset-stream" ? 8 : first == "memset-legacy-once" ? 1 : 0;
  for (int i = 0; i < memsets; ++i) {
    kept.buffers.emplace_back(size_t(96) << 10);
    if (first == "memset-stream") {
      PROBE_CHECK(cudaMemsetAsync(kept.buffers.back().get(), 0xFF, kept.buffers.back().bytes(), stream));
    } else {
      kept.buffers.back().fill_bytes(0xFF);  // cudaMemset + cudaDeviceSynchronize
    }
  }
  if (first == "ballast") {
    kept.buffers.emplace_back(size_t(2) << 30);
    kept.buffers.back().fill_bytes(1);
  }
  PROBE_CHECK(cudaDeviceSynchronize());
  return kept;
}

}  // namespace

int main() {
  cudaStream_t stream;
  PROBE_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  const size_t flush_bytes = size_t(512) << 20;
  void* flush = nullptr;
  PROBE_CHECK(cudaMalloc(&flush, flush_bytes));
  Params<16> small = {};
  Params<512> medium = {};
  Params<2048> large = {};
  constexpr size_t kBigSmem = 100 * 1024;
  const void* tiny = prepared(empty_kernel<256, 4, 16>, kBigSmem);
  const void* tiny_medium = prepared(empty_kernel<256, 4, 512>, kBigSmem);
  const void* tiny_large = prepared(empty_kernel<256, 4, 2048>, kBigSmem);
  const void* heavy = prepared(empty_kernel<384, 150, 16>, kBigSmem);
  const void* heavy_medium = prepared(empty_kernel<384, 150, 512>, kBigSmem);
  constexpr size_t kDeepSmem = 200 * 1024;
  const void* deep = prepared(empty_kernel<384, 150, 256>, kDeepSmem);
  Params<256> deep_params = {};
  const void* big = prepared(big_kernel<384, 150, 512, false>, kBigSmem);
  const void* big_mbarrier = prepared(big_kernel<384, 150, 512, true>, kBigSmem);
  const Config configs[] = {
      {"256 thr, few regs, no smem, 24 B params", tiny, &small, 60, 256, 0, false, nullptr, nullptr, 0, false},
      {"same, 512 B params", tiny_medium, &medium, 60, 256, 0, false, nullptr, nullptr, 0, false},
      {"same, 2 KiB params", tiny_large, &large, 60, 256, 0, false, nullptr, nullptr, 0, false},
      {"same, 100 KiB smem", tiny, &small, 60, 256, kBigSmem, false, nullptr, nullptr, 0, false},
      {"384 thr, ~168 regs", heavy, &small, 60, 384, 0, false, nullptr, nullptr, 0, false},
      {"384 thr, ~168 regs, 100 KiB smem, 512 B", heavy_medium, &medium, 60, 384, kBigSmem, false, nullptr, nullptr, 0,
       false},
      {"  the same, PDL", heavy_medium, &medium, 60, 384, kBigSmem, true, nullptr, nullptr, 0, false},
      {"  the same, 6 CTAs", heavy_medium, &medium, 6, 384, kBigSmem, false, nullptr, nullptr, 0, false},
      {"  the same, 132 CTAs", heavy_medium, &medium, 132, 384, kBigSmem, false, nullptr, nullptr, 0, false},
      {"  the same, 200 KiB smem, 12 CTAs", deep, &deep_params, 12, 384, kDeepSmem, false, nullptr, nullptr, 0, false},
      {"big code, smem, named barriers, 60 CTAs", big, &medium, 60, 384, kBigSmem, false, nullptr, nullptr, 0, false},
      {"  the same, 12 CTAs", big, &medium, 12, 384, kBigSmem, false, nullptr, nullptr, 0, false},
      {"  the same with an mbarrier, 60 CTAs", big_mbarrier, &medium, 60, 384, kBigSmem, false, nullptr, nullptr, 0,
       false},
      {"pair: big 60 + tiny 48 (PDL)", big, &medium, 60, 384, kBigSmem, false, tiny_medium, &medium, 48, true},
      {"pair: heavy 60 + tiny 48 (PDL)", heavy_medium, &medium, 60, 384, kBigSmem, false, tiny_medium, &medium, 48,
       true},
      {"pair, both PDL", heavy_medium, &medium, 60, 384, kBigSmem, true, tiny_medium, &medium, 48, true},
      {"pair, neither PDL", heavy_medium, &medium, 60, 384, kBigSmem, false, tiny_medium, &medium, 48, false},
      {"pair of tiny kernels (PDL)", tiny, &small, 60, 256, 0, false, tiny, &small, 48, true},
  };
  const char* skip = std::getenv("SPARSE_DECODE_SKIP_STAGES");
  const char* start = std::getenv("PROBE_START");
  const std::string first = start ? start : "nothing";
  const ProcessStart kept = start_process(first, stream);
  if (first == "bisect") bisect_against_the_bench(stream, flush, flush_bytes, skip);
  std::printf("-- start: %s\n", first.c_str());
  std::vector<Harness> harnesses = {{true, 8}};
  const char* all_harnesses = std::getenv("PROBE_ALL_HARNESSES");
  if (all_harnesses && std::string(all_harnesses) == "1") {
    harnesses = {{true, 8}, {false, 8}, {true, 1}, {true, 32}, {false, 1}, {false, 32}};
  }
  for (const Harness& h : harnesses) {
    harness = h;
    std::printf("-- replays %s, %d layers a graph\n", h.queued ? "queued (as the bench)" : "synchronized", h.layers);
    const bool all = h.layers == 8;
    for (const Config& c : configs) {
      if (!all && c.second == nullptr && c.first != tiny) continue;
      std::printf("%-45s %6.2f us a layer\n", c.name, time_config(c, stream, flush, flush_bytes));
    }
    for (int32_t width : {640, 128}) {
      for (bool pdl : {false, true}) {
        for (bool distinct : {false, true}) {
          std::printf("dsv4_decode T 6 W %d%s%s (skip stages %s) %6.2f us a layer\n", width, pdl ? " PDL" : "",
                      distinct ? " distinct layers" : "", skip ? skip : "none",
                      time_dsv4(6, width, pdl, distinct, stream, flush, flush_bytes));
        }
      }
    }
  }
  bisect_against_the_bench(stream, flush, flush_bytes, skip);
  PROBE_CHECK(cudaFree(flush));
  return 0;
}
