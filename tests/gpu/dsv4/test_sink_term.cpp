// The sink term of dsv4_decode on the GPU (types.h SinkTerm; docs/spec.md,
// sections 1 and 5), on every kernel and head group size: kInOutputAndLse
// keeps kInOutput's out bits and writes lse with the sink (the sink itself
// for a token without an active column), kNone gives the bits of the call
// without sinks, and partial calls over a split of each token's rows, the
// sink on one of them, merge (in double, on the host) into the single call.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "gpu/dsv4/checks.h"

namespace sparse_decode::gpu_test::dsv4 {
namespace {

constexpr Dsv4Kernel kEveryKernel[] = {Dsv4Kernel::kAuto, Dsv4Kernel::kCluster, Dsv4Kernel::kStream,
                                       Dsv4Kernel::kSplit};

const char* name_of(Dsv4Kernel kernel) { return kernel == Dsv4Kernel::kAuto ? "auto" : kernel_name(kernel); }

// A device run of `args`: out bits and lse (poisoned before).
DeviceResult run(Dsv4DeviceProblem& d, const Dsv4DecodeArgs& args) {
  gpu_test::poison_outputs(d.out, d.lse, d.out_of_range_count);
  const Status status = decode(args, nullptr);
  EXPECT_TRUE(status.ok()) << status.message();
  return gpu_test::download_outputs(d.out, d.lse, d.out_of_range_count);
}

void check_sink_terms(DType dtype, int heads, int64_t tokens, int32_t width) {
  Dsv4ProblemConfig config = config_for(tokens, width, dtype);
  config.heads = heads;
  SCOPED_TRACE(std::string(dtype_name(dtype)) + ", H " + std::to_string(heads) + ", T " + std::to_string(tokens) +
               ", W " + std::to_string(width) + ", " + test::seed_message(config.seed));
  Dsv4Problem p = testing::make_dsv4_problem(config);
  for (int64_t t = 1; t < tokens; t += 3) std::fill_n(&p.indices[t * width], width, -1);  // empty tokens
  Dsv4DeviceProblem d(p);
  Dsv4DecodeArgs host = p.host_args(nullptr, nullptr);
  host.sink_term = SinkTerm::kInOutputAndLse;
  const reference::Dsv4Result ref = reference::dsv4_decode(host);
  for (Dsv4Kernel kernel : kEveryKernel) {
    SCOPED_TRACE(name_of(kernel));
    Dsv4DecodeArgs a = d.args;
    a.kernel = kernel;
    const DeviceResult in_output = run(d, a);
    a.sink_term = SinkTerm::kInOutputAndLse;
    const DeviceResult with_lse = run(d, a);
    expect_matches(run_and_compare(a, host, ref, d.out, d.lse));
    EXPECT_EQ(with_lse.out, in_output.out) << "kInOutputAndLse changed out";
    for (int64_t t = 1; t < tokens; t += 3)
      for (int h = 0; h < heads; ++h) {
        const float want = p.sinks[h];
        EXPECT_NEAR(with_lse.lse[t * heads + h], want, 1e-6 * std::max(1.0f, std::fabs(want)))
            << "token " << t << " head " << h << ": an empty token's lse is its sink";
      }
    a.sink_term = SinkTerm::kNone;
    const DeviceResult none = run(d, a);
    a.sink_term = SinkTerm::kInOutput;
    a.sinks = nullptr;
    const DeviceResult without = run(d, a);
    EXPECT_EQ(none.out, without.out) << "kNone differs from the call without sinks";
    EXPECT_EQ(std::memcmp(none.lse.data(), without.lse.data(), none.lse.size() * 4), 0);
    EXPECT_NE(in_output.out, without.out) << "the sinks changed nothing: the test proves little";
  }
}

TEST_F(Dsv4Gpu, SinkTermEveryKernel) {
  for (DType dtype : {DType::kFloat8E4M3, DType::kBFloat16}) check_sink_terms(dtype, 16, 7, 640);
  check_sink_terms(DType::kFloat8E4M3, 64, 7, 640);   // 64-head tiles
  check_sink_terms(DType::kFloat8E4M3, 16, 7, 2176);  // groups of several chunks
}

// Batches where kAuto runs the deep, P V warp and dim-half stream kernels.
TEST_F(Dsv4Gpu, SinkTermLargeBatches) {
  for (int64_t tokens : {100, 600}) check_sink_terms(DType::kFloat8E4M3, 16, tokens, 640);
}

// Sinks whose log2 form overflows (sink > FLT_MAX / log2(e)) outweigh every
// score: zeros, and lse the sink as given, on every kernel, tokens with and
// without active columns.
TEST_F(Dsv4Gpu, SinkTermHugeSinks) {
  const int64_t tokens = 7;
  Dsv4ProblemConfig config = config_for(tokens, 640, DType::kFloat8E4M3);
  SCOPED_TRACE(test::seed_message(config.seed));
  Dsv4Problem p = testing::make_dsv4_problem(config);
  for (int h = 0; h < config.heads; ++h) p.sinks[h] = h % 2 ? 3.0e38f : 2.5e38f;
  for (int64_t t = 1; t < tokens; t += 3) std::fill_n(&p.indices[t * 640], 640, -1);
  Dsv4DeviceProblem d(p);
  for (Dsv4Kernel kernel : kEveryKernel) {
    SCOPED_TRACE(name_of(kernel));
    Dsv4DecodeArgs a = d.args;
    a.kernel = kernel;
    a.sink_term = SinkTerm::kInOutputAndLse;
    const DeviceResult r = run(d, a);
    for (int64_t t = 0; t < tokens; ++t)
      for (int h = 0; h < config.heads; ++h) {
        EXPECT_EQ(r.lse[t * config.heads + h], p.sinks[h]) << "token " << t << " head " << h;
        const size_t row = static_cast<size_t>(t * config.heads + h) * 512;
        for (size_t i = row; i < row + 512; ++i) ASSERT_EQ(r.out[i] & 0x7fff, 0) << "token " << t << " head " << h;
      }
  }
}

// Three partial calls, each token's columns dealt among them (token 0 all on
// rank 2, so the sink's rank has none), rank 0 adding the sink
// (kInOutputAndLse), the others none (kNone): their BF16 outputs and lse,
// merged in double, match the fp64 reference of the single call.
TEST_F(Dsv4Gpu, PartialsMergeIntoTheSingleCall) {
  for (Dsv4Kernel kernel : kEveryKernel) {
    SCOPED_TRACE(name_of(kernel));
    Dsv4ProblemConfig config = config_for(6, 640);
    config.q_len = 3;
    const Dsv4Problem p = testing::make_dsv4_problem(config);
    constexpr int kRanks = 3;
    std::mt19937 rng(static_cast<uint32_t>(config.seed));
    std::vector<int32_t> owner(p.indices.size());
    for (auto& o : owner) o = static_cast<int32_t>(rng() % kRanks);
    std::fill_n(owner.begin(), config.width, 2);
    Dsv4DeviceProblem d(p);
    std::vector<DeviceResult> partial;
    for (int r = 0; r < kRanks; ++r) {
      std::vector<int32_t> indices = p.indices;
      for (size_t i = 0; i < owner.size(); ++i) {
        if (owner[i] != r) indices[i] = -1;
      }
      DeviceBuffer indices_device(indices);
      Dsv4DecodeArgs a = d.args;
      a.kernel = kernel;
      a.indices = indices_device.as<int32_t>();
      a.sink_term = r == 0 ? SinkTerm::kInOutputAndLse : SinkTerm::kNone;
      partial.push_back(run(d, a));
    }
    Dsv4DecodeArgs host = p.host_args(nullptr, nullptr);
    host.sink_term = SinkTerm::kInOutputAndLse;
    const reference::Dsv4Result ref = reference::dsv4_decode(host);
    const double inf = std::numeric_limits<double>::infinity();
    double err2 = 0.0, ref2 = 0.0, lse_error = 0.0;
    for (size_t row = 0; row < ref.lse.size(); ++row) {
      double most = -inf;
      for (const DeviceResult& r : partial) most = std::max<double>(most, r.lse[row]);
      double sum = 0.0;
      for (const DeviceResult& r : partial) sum += most == -inf ? 0.0 : std::exp(r.lse[row] - most);
      const double L = most == -inf ? -inf : most + std::log(sum);
      for (int dim = 0; dim < kHeadDim; ++dim) {
        double merged = 0.0;
        for (const DeviceResult& r : partial) {
          if (L != -inf) merged += std::exp(r.lse[row] - L) * reference::decode_bf16(r.out[row * kHeadDim + dim]);
        }
        const double want = ref.out[row * kHeadDim + dim];
        err2 += (merged - want) * (merged - want), ref2 += want * want;
      }
      lse_error = std::max(lse_error, std::isinf(ref.lse[row]) ? (L == ref.lse[row] ? 0.0 : inf)
                                                               : std::fabs(L - ref.lse[row]) /
                                                                     std::max(1.0, std::fabs(ref.lse[row])));
    }
    EXPECT_LE(std::sqrt(err2 / ref2), kMaxRelativeError) << "merged out vs the single call's reference";
    EXPECT_LE(lse_error, 1e-3) << "merged lse vs the single call's";
  }
}

}  // namespace
}  // namespace sparse_decode::gpu_test::dsv4
