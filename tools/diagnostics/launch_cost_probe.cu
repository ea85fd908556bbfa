// What a kernel that returns at once costs a layer inside a CUDA graph, by
// launch configuration: threads, registers, dynamic shared memory, parameter
// bytes, PDL, and a second kernel a layer (the split path's pair). Timed as
// the bench times a layer: 8 layers a graph, L2 flushed (512 MiB memset)
// before each replay outside the events, median of 30 replays. Then the
// same harness over dsv4_decode calls (T = 6, widths 640 and 128, kAuto):
// run it with SPARSE_DECODE_SKIP_STAGES=8 to time the library's kernels
// returning at once in this harness instead of the bench's.
//   launch-cost-probe
// See docs/kernels/split.md, "Fifteenth session".
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <vector>

#include "common/device_support.h"
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

// Through the library's own launch helper, so that the probe's launches are
// made exactly as the library's are.
void launch(const void* kernel, void* params, int ctas, int threads, size_t smem, bool pdl, cudaStream_t stream) {
  const sparse_decode::Status status =
      sparse_decode::launch_kernel(kernel, ctas, threads, smem, pdl, stream, params, "launching a probe kernel");
  if (!status.ok()) {
    std::fprintf(stderr, "%s\n", status.message().c_str());
    std::exit(1);
  }
}

// Median µs a layer of a graph of kLayers calls of `layer`.
double time_layers(const std::function<void(cudaStream_t)>& layer, cudaStream_t stream, void* flush,
                   size_t flush_bytes) {
  constexpr int kLayers = 8, kReplays = 30;
  cudaGraph_t graph;
  PROBE_CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
  for (int l = 0; l < kLayers; ++l) layer(stream);
  PROBE_CHECK(cudaStreamEndCapture(stream, &graph));
  cudaGraphExec_t exec;
  PROBE_CHECK(cudaGraphInstantiate(&exec, graph, 0));
  std::vector<float> us;
  cudaEvent_t start, stop;
  PROBE_CHECK(cudaEventCreate(&start));
  PROBE_CHECK(cudaEventCreate(&stop));
  for (int r = -3; r < kReplays; ++r) {
    PROBE_CHECK(cudaMemsetAsync(flush, r & 1 ? 0x5A : 0xA5, flush_bytes, stream));
    PROBE_CHECK(cudaEventRecord(start, stream));
    PROBE_CHECK(cudaGraphLaunch(exec, stream));
    PROBE_CHECK(cudaEventRecord(stop, stream));
    PROBE_CHECK(cudaEventSynchronize(stop));
    float ms = 0;
    PROBE_CHECK(cudaEventElapsedTime(&ms, start, stop));
    if (r >= 0) us.push_back(1000.0f * ms / kLayers);
  }
  std::sort(us.begin(), us.end());
  PROBE_CHECK(cudaGraphExecDestroy(exec));
  PROBE_CHECK(cudaGraphDestroy(graph));
  PROBE_CHECK(cudaEventDestroy(start));
  PROBE_CHECK(cudaEventDestroy(stop));
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

// dsv4_decode (kAuto, 16 heads, FP8) at T tokens and width W, in the same harness.
double time_dsv4(int64_t tokens, int32_t width, bool pdl, cudaStream_t stream, void* flush, size_t flush_bytes) {
  using namespace sparse_decode;
  testing::Dsv4ProblemConfig config;
  config.tokens = tokens;
  config.width = width;
  const testing::Dsv4Problem problem = testing::make_dsv4_problem(config);
  testing::Dsv4DeviceProblem device(problem);
  device.args.enable_pdl = pdl;
  const size_t bytes = workspace_size(device.args);
  testing::DeviceBuffer workspace(bytes > 0 ? bytes : 16);
  return time_layers(
      [&](cudaStream_t s) {
        const Status status = dsv4_decode(device.args, workspace.get(), workspace.bytes(), s);
        if (!status.ok()) {
          std::fprintf(stderr, "dsv4_decode: %s\n", status.message().c_str());
          std::exit(1);
        }
      },
      stream, flush, flush_bytes);
}

template <class Kernel>
const void* prepared(Kernel kernel, size_t smem) {
  PROBE_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem)));
  cudaFuncAttributes attributes{};
  PROBE_CHECK(cudaFuncGetAttributes(&attributes, kernel));
  std::printf("  kernel: %d registers\n", attributes.numRegs);
  return reinterpret_cast<const void*>(kernel);
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
  for (int round = 0; round < 2; ++round) {
    for (const Config& c : configs) {
      std::printf("%-45s %6.2f us a layer\n", c.name, time_config(c, stream, flush, flush_bytes));
    }
    for (int32_t width : {640, 128}) {
      for (bool pdl : {false, true}) {
        std::printf("dsv4_decode T 6 W %d%s (skip stages %s) %6.2f us a layer\n", width, pdl ? " PDL" : "",
                    skip ? skip : "none", time_dsv4(6, width, pdl, stream, flush, flush_bytes));
      }
    }
  }
  PROBE_CHECK(cudaFree(flush));
  return 0;
}
