// The double-precision reference (reference::dsv4_decode) and the public
// host-memory backend (sparse_decode::dsv4_decode with MemorySpace::kHost)
// against closed forms and against the test's own literal softmax
// (support/dsv4_checks.h), over random problems. Every case draws fresh random data from a printed seed.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <ostream>
#include <random>
#include <vector>

#include "support/dsv4_checks.h"
#include "reference/dsv4_reference.h"
#include "reference/formats.h"
#include "testing/dsv4_problem.h"

namespace sparse_decode {
namespace {

using test::kInf;
using testing::Dsv4Problem;
using testing::Dsv4ProblemConfig;

// ---------------------------------------------------------------------------
// Random problems over dtypes, head counts, widths, sinks, lens and holes.

struct RandomCase {
  DType dtype;
  int heads, width;
  int64_t tokens;
  bool sinks, lens;
  double holes;
};

// GoogleTest prints a parameter in ctest's test names and on failure: its
// fields, not its bytes (the padding bytes differ from run to run).
void PrintTo(const RandomCase& rc, std::ostream* os) {
  *os << test::dtype_name(rc.dtype) << ", H " << rc.heads << ", W " << rc.width << ", T " << rc.tokens
      << (rc.sinks ? ", sinks" : "") << (rc.lens ? ", lens" : "") << ", holes " << rc.holes;
}

class Dsv4RandomReference : public ::testing::TestWithParam<RandomCase> {};

TEST_P(Dsv4RandomReference, MatchesBruteForceAndHostBackend) {
  const RandomCase& rc = GetParam();
  const uint64_t seed = test::fresh_seed();
  SCOPED_TRACE(test::seed_message(seed));
  Dsv4ProblemConfig config = test::small_config(seed, rc.dtype, rc.heads, rc.width, rc.tokens);
  config.sinks = rc.sinks;
  config.lens = rc.lens;
  config.hole_fraction = rc.holes;
  const Dsv4Problem p = testing::make_dsv4_problem(config);
  const test::Expected brute = test::check_problem(p.host_args(nullptr, nullptr));
  // The generator names NaN rows from masked columns; make sure this case
  // really has some, so that "no NaN leaks" is tested.
  if (rc.lens) EXPECT_GT(brute.masked_in_range, 0);
}

INSTANTIATE_TEST_SUITE_P(Shapes, Dsv4RandomReference,
                         ::testing::Values(RandomCase{DType::kFloat8E4M3, 16, 640, 6, true, true, 0.0},
                                           RandomCase{DType::kFloat8E4M3, 8, 128, 5, false, true, 0.0},
                                           RandomCase{DType::kFloat8E4M3, 32, 256, 4, true, false, 0.3},
                                           RandomCase{DType::kFloat8E4M3, 64, 384, 3, true, true, 0.2},
                                           RandomCase{DType::kFloat8E4M3, 128, 256, 2, false, true, 0.0},
                                           RandomCase{DType::kBFloat16, 16, 640, 4, true, true, 0.1},
                                           RandomCase{DType::kBFloat16, 128, 192, 2, true, true, 0.0},
                                           RandomCase{DType::kBFloat16, 8, 1024, 3, false, true, 0.5}));

// ---------------------------------------------------------------------------
// Closed forms.

class Dsv4ReferenceClosedForm : public ::testing::TestWithParam<std::tuple<DType, bool>> {
 protected:
  DType dtype() const { return std::get<0>(GetParam()); }
  bool sinks() const { return std::get<1>(GetParam()); }
};

// One active column: out = bmm2 * row / (1 + exp(sink - s)), lse = s.
TEST_P(Dsv4ReferenceClosedForm, OneActiveColumn) {
  const uint64_t seed = test::fresh_seed();
  SCOPED_TRACE(test::seed_message(seed));
  std::mt19937_64 rng(seed);
  Dsv4ProblemConfig config = test::small_config(seed, dtype());
  config.lens = false;  // every column of the generator is live
  config.sinks = sinks();
  Dsv4Problem p = testing::make_dsv4_problem(config);
  const int64_t T = config.tokens;
  const int H = config.heads, W = config.width;
  std::vector<int32_t> kept(T);
  for (int64_t t = 0; t < T; ++t) {
    kept[t] = static_cast<int32_t>(rng() % W);
    for (int c = 0; c < W; ++c) {
      if (c != kept[t]) p.indices[t * W + c] = -1;
    }
  }
  const Dsv4DecodeArgs args = p.host_args(nullptr, nullptr);
  std::vector<double> out(static_cast<size_t>(T) * H * kHeadDim), lse(static_cast<size_t>(T) * H);
  for (int64_t t = 0; t < T; ++t) {
    const std::vector<double> row = test::kv_row(args, kept[t] >= kSwaColumns, p.indices[t * W + kept[t]]);
    for (int h = 0; h < H; ++h) {
      const double s = double{p.bmm1_scale} * test::dot(test::q_row(args, t, h), row);
      const double sink = sinks() ? p.sinks[h] : -kInf;
      for (int d = 0; d < kHeadDim; ++d) {
        out[(t * H + h) * kHeadDim + d] = p.bmm2_scale * row[d] / (1.0 + std::exp(sink - s));
      }
      lse[t * H + h] = s;
    }
  }
  const reference::Dsv4Result ref = reference::dsv4_decode(args);
  test::expect_rows_close(ref.out, out, T, H, 1e-12, "reference vs closed form");
  test::expect_lse_close(ref.lse, lse, 1e-12, "reference lse vs closed form");
  const test::HostOutput host = test::run_host(args);
  test::expect_bf16_rounding_of(host.out_values(), out, "host vs closed form");
  test::expect_lse_close(host.lse, lse, 1e-6, "host lse vs closed form");
  if (!sinks()) {
    // bmm2 * row is exact in double, so its nearest-even BF16 is the only
    // right answer (compared as values: the sign of a zero may differ).
    for (size_t i = 0; i < out.size(); ++i) {
      ASSERT_EQ(reference::decode_bf16(host.out[i]), reference::decode_bf16(reference::encode_bf16(out[i])))
          << "element " << i;
    }
  }
}

// Every active column names the same row (duplicates, some holes): equal
// scores, out = bmm2 * row * n / (n + exp(sink - s)), lse = s + log(n).
TEST_P(Dsv4ReferenceClosedForm, DuplicateRowsGiveTheRow) {
  const uint64_t seed = test::fresh_seed();
  SCOPED_TRACE(test::seed_message(seed));
  std::mt19937_64 rng(seed);
  Dsv4ProblemConfig config = test::small_config(seed, dtype());
  config.lens = false;
  config.sinks = sinks();
  Dsv4Problem p = testing::make_dsv4_problem(config);
  const int64_t T = config.tokens;
  const int H = config.heads, W = config.width;
  std::vector<int> count(T, 0);
  for (int64_t t = 0; t < T; ++t) {
    const int32_t row = p.indices[t * W + kSwaColumns];  // a live compressed row
    for (int c = 0; c < W; ++c) {
      const bool keep = c >= kSwaColumns && (c == kSwaColumns || rng() % 4 != 0);
      p.indices[t * W + c] = keep ? row : -1;
      count[t] += keep;
    }
  }
  const Dsv4DecodeArgs args = p.host_args(nullptr, nullptr);
  std::vector<double> out(static_cast<size_t>(T) * H * kHeadDim), lse(static_cast<size_t>(T) * H);
  for (int64_t t = 0; t < T; ++t) {
    const double n = count[t];
    const std::vector<double> row = test::kv_row(args, true, p.indices[t * W + kSwaColumns]);
    for (int h = 0; h < H; ++h) {
      const double s = double{p.bmm1_scale} * test::dot(test::q_row(args, t, h), row);
      const double sink = sinks() ? p.sinks[h] : -kInf;
      for (int d = 0; d < kHeadDim; ++d)
        out[(t * H + h) * kHeadDim + d] = p.bmm2_scale * row[d] * n / (n + std::exp(sink - s));
      lse[t * H + h] = s + std::log(n);
    }
  }
  const reference::Dsv4Result ref = reference::dsv4_decode(args);
  test::expect_rows_close(ref.out, out, T, H, 1e-12, "reference vs closed form");
  test::expect_lse_close(ref.lse, lse, 1e-12, "reference lse vs closed form");
  const test::HostOutput host = test::run_host(args);
  test::expect_bf16_rounding_of(host.out_values(), out, "host vs closed form");
  test::expect_lse_close(host.lse, lse, 1e-6, "host lse vs closed form");
}

// Distinct rows with equal scores by construction: each is a permutation of
// one random row and q is a non-zero constant c over the dims, so every dot
// is c * sum(row). out = bmm2 * sum(rows) / (n + exp(sink - s)), i.e. the
// mean without a sink.
TEST_P(Dsv4ReferenceClosedForm, EqualScoresGiveTheMean) {
  const uint64_t seed = test::fresh_seed();
  SCOPED_TRACE(test::seed_message(seed));
  std::mt19937_64 rng(seed);
  std::normal_distribution<double> normal(0.0, 1.0);
  Dsv4ProblemConfig config = test::small_config(seed, dtype(), 16, 256, 3);
  config.lens = false;
  config.sinks = sinks();
  Dsv4Problem p = testing::make_dsv4_problem(config);
  const int64_t T = config.tokens, bytes = p.element_bytes();
  const int H = config.heads, W = config.width, n = W - kSwaColumns;
  const Dsv4DecodeArgs args = p.host_args(nullptr, nullptr);
  for (int64_t t = 0; t < T; ++t) {
    for (int h = 0; h < H; ++h) {
      std::vector<uint8_t> constant(bytes);
      do testing::encode_element(config.dtype, 2.0 * normal(rng), constant.data());
      while (test::load(config.dtype, constant.data(), 0) == 0.0);
      for (int d = 0; d < kHeadDim; ++d) {
        std::copy(constant.begin(), constant.end(), &p.q[((t * H + h) * kHeadDim + d) * bytes]);
      }
    }
    std::vector<uint8_t> base(kHeadDim * bytes);
    for (int d = 0; d < kHeadDim; ++d) testing::encode_element(config.dtype, normal(rng), &base[d * bytes]);
    std::vector<int> order(kHeadDim);
    for (int c = 0; c < W; ++c) p.indices[t * W + c] = -1;
    for (int k = 0; k < n; ++k) {
      const int32_t row = static_cast<int32_t>(t * n + k);  // disjoint live rows per token
      p.indices[t * W + kSwaColumns + k] = row;
      for (int d = 0; d < kHeadDim; ++d) order[d] = d;
      std::shuffle(order.begin(), order.end(), rng);
      uint8_t* dst = &p.compressed_kv[test::row_offset(args.compressed_kv, row) * bytes];
      for (int d = 0; d < kHeadDim; ++d) std::copy_n(&base[order[d] * bytes], bytes, dst + d * bytes);
    }
  }
  std::vector<double> out(static_cast<size_t>(T) * H * kHeadDim, 0.0), lse(static_cast<size_t>(T) * H);
  for (int64_t t = 0; t < T; ++t) {
    std::vector<double> sum(kHeadDim, 0.0);
    for (int k = 0; k < n; ++k) {
      const std::vector<double> row = test::kv_row(args, true, t * n + k);
      for (int d = 0; d < kHeadDim; ++d) sum[d] += row[d];
    }
    ASSERT_NE(test::kv_row(args, true, t * n), test::kv_row(args, true, t * n + 1)) << "rows must differ";
    for (int h = 0; h < H; ++h) {
      const double s = double{p.bmm1_scale} * test::dot(test::q_row(args, t, h), test::kv_row(args, true, t * n));
      const double sink = sinks() ? p.sinks[h] : -kInf;
      for (int d = 0; d < kHeadDim; ++d)
        out[(t * H + h) * kHeadDim + d] = p.bmm2_scale * sum[d] / (n + std::exp(sink - s));
      lse[t * H + h] = s + std::log(static_cast<double>(n));
    }
  }
  const reference::Dsv4Result ref = reference::dsv4_decode(args);
  test::expect_rows_close(ref.out, out, T, H, 1e-12, "reference vs mean");
  test::expect_lse_close(ref.lse, lse, 1e-12, "reference lse vs closed form");
  const test::HostOutput host = test::run_host(args);
  test::expect_bf16_rounding_of(host.out_values(), out, "host vs mean");
}

INSTANTIATE_TEST_SUITE_P(DtypeAndSinks, Dsv4ReferenceClosedForm,
                         ::testing::Combine(::testing::Values(DType::kFloat8E4M3, DType::kBFloat16), ::testing::Bool()),
                         [](const auto& info) {
                           return std::string(test::dtype_name(std::get<0>(info.param))) +
                                  (std::get<1>(info.param) ? "_sinks" : "_no_sinks");
                         });

}  // namespace
}  // namespace sparse_decode
