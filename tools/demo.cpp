#include "demo.h"

#include <cuda_runtime_api.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <stdexcept>
#include <string>
#include <vector>

#include "bench/accuracy.h"
#include "bench/cuda_check.h"
#include "cuda_device.h"
#include "progress.h"
#include "reference/dsv4_reference.h"
#include "testing/device_buffer.h"
#include "testing/dsv4_problem.h"

namespace sparse_decode::cli {
namespace {

constexpr int kDemoQueryLen = 6;  // query tokens per request
constexpr int kWarmupLaunches = 10;
constexpr double kMiB = 1024.0 * 1024.0;
constexpr double kAnnouncedInputMiB = 64;  // larger synthetic inputs take seconds to generate: say so first

struct DemoRun {
  std::vector<uint16_t> out;  // [T, H, 512] BF16 bits
  std::vector<float> lse;     // [T, H]
  bool on_gpu = false;        // else the CPU backend
  std::string timing;         // how long it took and how that was measured
};

testing::Dsv4ProblemConfig demo_config(const DemoOptions& o) {
  testing::Dsv4ProblemConfig config;
  config.tokens = o.tokens;
  config.heads = 16;
  config.width = o.width;
  config.dtype = DType::kFloat8E4M3;
  config.q_len = kDemoQueryLen;
  config.lens = o.ragged;
  config.sinks = true;
  config.seed = o.seed;
  return config;
}

void print_shapes(const testing::Dsv4Problem& p) {
  const auto& c = p.config;
  const long long T = c.tokens;
  std::printf("DeepSeek-V4 sparse MLA decode, one step: %lld query token(s) = %lld request(s) of up to %d\n", T,
              (T + c.q_len - 1) / c.q_len, c.q_len);
  std::printf("  q        [%lld, %d, 512] FP8 E4M3\n", T, c.heads);
  std::printf("  indices  [%lld, %d] int32: %d SWA + %d top-k columns, %s\n", T, c.width, kSwaColumns,
              c.width - kSwaColumns, c.lens ? "ragged lens in [W/2, W]" : "all active");
  std::printf("  swa_kv   %lld rows, compressed_kv %lld rows: FP8 512-byte rows, pages of %lld\n",
              static_cast<long long>(c.swa_rows), static_cast<long long>(c.compressed_rows),
              static_cast<long long>(c.page_size));
  std::printf("  sinks    [%d] float32; bmm1_scale %.4f, bmm2_scale %.4f\n", c.heads, p.bmm1_scale, p.bmm2_scale);
  std::printf("  out      [%lld, %d, 512] BF16, lse [%lld, %d] float32\n", T, c.heads, T, c.heads);
}

// Tokens [begin, end) of `args` as a call of their own (per-token lens, no
// requests: the demo's problems have none). Tokens are independent, so the
// slices of a problem give the bits of one call over all of it.
Dsv4DecodeArgs token_slice(Dsv4DecodeArgs args, int64_t begin, int64_t end) {
  if (args.seq_lens || args.cum_seq_lens_q) throw std::logic_error("token_slice: requests are not sliced");
  const int64_t q_bytes = args.dtype == DType::kFloat8E4M3 ? 1 : 2;
  args.num_tokens = end - begin;
  args.q = static_cast<const uint8_t*>(args.q) + begin * args.q_token_stride * q_bytes;
  args.indices += begin * args.indices_stride;
  if (args.lens) args.lens += begin;
  if (args.out) args.out = static_cast<uint16_t*>(args.out) + begin * args.out_token_stride;
  if (args.lse) args.lse += begin * args.lse_token_stride;
  return args;
}

// The CPU backend, a request (6 tokens) a call, so that a large demo shows
// its progress.
DemoRun run_on_cpu(const testing::Dsv4Problem& problem) {
  const auto& c = problem.config;
  DemoRun run;
  run.out.resize(static_cast<size_t>(c.tokens * c.heads * kHeadDim));
  run.lse.resize(static_cast<size_t>(c.tokens * c.heads));
  const Dsv4DecodeArgs args = problem.host_args(run.out.data(), run.lse.data());
  const auto start = std::chrono::steady_clock::now();
  run_token_slices("the CPU backend", c.tokens, kDemoQueryLen, [&](int64_t begin, int64_t end) {
    if (Status status = dsv4_decode(token_slice(args, begin, end), nullptr, 0, nullptr); !status.ok()) {
      throw std::runtime_error("dsv4_decode (CPU backend): " + status.message());
    }
  });
  const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
  const long long calls = (c.tokens + kDemoQueryLen - 1) / kDemoQueryLen;
  char text[96];
  if (calls == 1) {
    std::snprintf(text, sizeof(text), "%.1f ms wall time, one call", ms);
  } else {
    std::snprintf(text, sizeof(text), "%.1f ms wall time, %lld calls of up to %d tokens", ms, calls, kDemoQueryLen);
  }
  run.timing = text;
  return run;
}

// Median of `launches` event-timed launches, all queued before the host waits.
double median_launch_us(const testing::Dsv4DeviceProblem& device, int launches) {
  auto launch = [&] {
    if (Status status = dsv4_decode(device.args, nullptr, 0, nullptr); !status.ok()) {
      throw std::runtime_error("dsv4_decode: " + status.message());
    }
  };
  for (int i = 0; i < kWarmupLaunches; ++i) launch();
  std::vector<cudaEvent_t> events(static_cast<size_t>(2 * launches));
  for (cudaEvent_t& event : events) SPARSE_DECODE_CUDA_CHECK(cudaEventCreate(&event));
  for (int i = 0; i < launches; ++i) {
    SPARSE_DECODE_CUDA_CHECK(cudaEventRecord(events[2 * i], nullptr));
    launch();
    SPARSE_DECODE_CUDA_CHECK(cudaEventRecord(events[2 * i + 1], nullptr));
  }
  SPARSE_DECODE_CUDA_CHECK(cudaDeviceSynchronize());
  std::vector<double> us;
  for (int i = 0; i < launches; ++i) {
    float ms = 0.0f;
    SPARSE_DECODE_CUDA_CHECK(cudaEventElapsedTime(&ms, events[2 * i], events[2 * i + 1]));
    us.push_back(1000.0 * ms);
  }
  for (cudaEvent_t event : events) SPARSE_DECODE_CUDA_CHECK(cudaEventDestroy(event));
  return bench::median(us);
}

DemoRun run_on_gpu(const testing::Dsv4DeviceProblem& device, int launches) {
  DemoRun run;
  run.on_gpu = true;
  if (Status status = dsv4_decode(device.args, nullptr, 0, nullptr); !status.ok()) {
    throw std::runtime_error("dsv4_decode: " + status.message());
  }
  SPARSE_DECODE_CUDA_CHECK(cudaDeviceSynchronize());
  run.out = device.out.download<uint16_t>();  // the first launch's output: later ones write the same
  run.lse = device.lse.download<float>();
  const double us = median_launch_us(device, launches);
  char text[200];
  std::snprintf(text, sizeof(text),
                "%.2f us, median of %d CUDA-event-timed launches (L2 warm, no graph: `sparse-decode bench` measures "
                "the DESIGN.md way)",
                us, launches);
  run.timing = text;
  return run;
}

void print_path(const std::string& path) {
  std::printf("path:     %s\n", path.c_str());
  std::fflush(stdout);  // before what the run prints on stderr
}

// The GPU run when a device serves the call, else the CPU run; says which
// and why before it starts.
DemoRun run_decode(const testing::Dsv4Problem& problem, const DemoOptions& o) {
  std::string why = "--cpu was given";
  if (!o.force_cpu && find_cuda_device(&why)) {
    const testing::Dsv4DeviceProblem device(problem);
    const Status status = supports(device.args);
    if (status.ok()) {
      print_path("GPU kernel (MemorySpace::kDevice): supports() accepted the call");
      return run_on_gpu(device, o.launches);
    }
    why = "the GPU does not serve this call: " + status.message();
  }
  print_path(why + "; running the CPU backend\n          (MemorySpace::kHost: the fp64 reference, rounded to BF16)");
  return run_on_cpu(problem);
}

// Largest |lse - reference| over heads with a finite reference; infinity when
// a finite/infinite mismatch exists.
double lse_max_error(const float* lse, const std::vector<double>& reference) {
  double worst = 0.0;
  for (size_t i = 0; i < reference.size(); ++i) {
    if (std::isfinite(reference[i])) {
      worst = std::max(worst, std::fabs(lse[i] - reference[i]));
    } else if (lse[i] != reference[i]) {
      worst = INFINITY;
    }
  }
  return worst;
}

struct ReferenceCheck {
  bench::OutputComparison out;
  double lse_error = 0.0;
};

// The GPU's output against the fp64 reference, a request at a time (the
// reference of a large demo takes minutes and would not fit in memory whole).
ReferenceCheck check_against_reference(const testing::Dsv4Problem& problem, const DemoRun& run) {
  const auto& c = problem.config;
  const int64_t token_values = int64_t{c.heads} * kHeadDim;
  const Dsv4DecodeArgs args = problem.host_args(nullptr, nullptr);
  ReferenceCheck check;
  double error_sq = 0.0, reference_sq = 0.0;
  run_token_slices("the fp64 reference check", c.tokens, kDemoQueryLen, [&](int64_t begin, int64_t end) {
    const reference::Dsv4Result reference = reference::dsv4_decode(token_slice(args, begin, end));
    const bench::OutputComparison part = bench::compare_bf16(run.out.data() + begin * token_values, reference.out);
    const double error = part.reference_norm > 0.0 ? part.relative_l2 * part.reference_norm : part.relative_l2;
    error_sq += error * error;
    reference_sq += part.reference_norm * part.reference_norm;
    check.out.values += part.values;
    check.out.nonfinite += part.nonfinite;
    check.lse_error = std::max(check.lse_error, lse_max_error(run.lse.data() + begin * c.heads, reference.lse));
  });
  check.out.reference_norm = std::sqrt(reference_sq);
  check.out.relative_l2 = reference_sq > 0.0 ? std::sqrt(error_sq) / check.out.reference_norm : std::sqrt(error_sq);
  return check;
}

}  // namespace

int run_demo(const DemoOptions& options) {
  const testing::Dsv4ProblemConfig config = demo_config(options);
  const double input_mib = static_cast<double>(config.tokens) * (config.heads * kHeadDim + 4.0 * config.width) / kMiB;
  if (input_mib >= kAnnouncedInputMiB) {
    std::fprintf(stderr, "demo: generating %.0f MiB of random q and indices for %lld tokens first\n", input_mib,
                 static_cast<long long>(config.tokens));
  }
  const testing::Dsv4Problem problem = testing::make_dsv4_problem(config);
  print_shapes(problem);
  const DemoRun run = run_decode(problem, options);
  if (!run.on_gpu) {
    // The CPU backend is the reference itself: comparing the two would prove nothing.
    const bench::OutputHealth health = bench::inspect_bf16(run.out.data(), static_cast<int64_t>(run.out.size()));
    std::printf("accuracy: not checked: the CPU backend is the fp64 reference that the GPU kernels are checked\n"
                "          against, so without a GPU there is nothing independent to compare with\n");
    std::printf("output:   %zu BF16 values, %lld non-finite\n", run.out.size(),
                static_cast<long long>(health.nonfinite));
    std::printf("time:     %s\n", run.timing.c_str());
    std::printf("result:   %s\n", health.nonfinite == 0 ? "ran the fp64 reference (no accuracy check without a GPU)"
                                                        : "FAIL: non-finite output");
    return health.nonfinite == 0 ? 0 : 1;
  }
  const ReferenceCheck check = check_against_reference(problem, run);
  std::printf("accuracy: out vs fp64 reference: %s\n", check.out.summary().c_str());
  std::printf("          lse max abs error %.3e (information only)\n", check.lse_error);
  std::printf("time:     %s\n", run.timing.c_str());
  std::printf("result:   %s\n", check.out.passes() ? "PASS" : "FAIL");
  return check.out.passes() ? 0 : 1;
}

}  // namespace sparse_decode::cli
