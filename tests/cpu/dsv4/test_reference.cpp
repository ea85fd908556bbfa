// The double-precision reference (reference::dsv4_decode) and the public
// host-memory backend (sparse_decode::dsv4_decode with MemorySpace::kHost)
// against closed forms and against the test's own literal softmax
// (dsv4_checks.h). Every case draws fresh random data from a printed seed.
#include <gtest/gtest.h>

#include <algorithm>
#include <climits>
#include <cmath>
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
  test::expect_rows_close(host.out_values(), out, T, H, 3e-3, "host vs closed form");
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
  test::expect_rows_close(host.out_values(), out, T, H, 3e-3, "host vs closed form");
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
  test::expect_rows_close(host.out_values(), out, T, H, 3e-3, "host vs mean");
}

INSTANTIATE_TEST_SUITE_P(DtypeAndSinks, Dsv4ReferenceClosedForm,
                         ::testing::Combine(::testing::Values(DType::kFloat8E4M3, DType::kBFloat16), ::testing::Bool()),
                         [](const auto& info) {
                           return std::string(test::dtype_name(std::get<0>(info.param))) +
                                  (std::get<1>(info.param) ? "_sinks" : "_no_sinks");
                         });

// Per head: sink 1e4 and +inf give zeros with the sink-free lse (finite);
// -inf is the same as no sink; finite sinks follow the formula.
TEST(Dsv4Reference, ExtremeSinks) {
  const uint64_t seed = test::fresh_seed();
  SCOPED_TRACE(test::seed_message(seed));
  Dsv4ProblemConfig config = test::small_config(seed);
  Dsv4Problem p = testing::make_dsv4_problem(config);
  const int H = config.heads;
  const int64_t T = config.tokens;
  for (int h = 0; h < H; ++h) {
    if (h % 4 == 0) p.sinks[h] = 1e4f;
    if (h % 4 == 1) p.sinks[h] = INFINITY;
    if (h % 4 == 2) p.sinks[h] = -INFINITY;
  }
  Dsv4DecodeArgs args = p.host_args(nullptr, nullptr);
  const test::HostOutput host = test::run_host(args);
  const reference::Dsv4Result ref = reference::dsv4_decode(args);
  Dsv4DecodeArgs no_sink_args = args;
  no_sink_args.sinks = nullptr;
  const test::HostOutput no_sink = test::run_host(no_sink_args);
  const reference::Dsv4Result ref_no_sink = reference::dsv4_decode(no_sink_args);

  // The literal formula cannot take +inf (inf - inf); the limit of a huge sink is the same.
  std::vector<float> finite_sinks = p.sinks;
  for (float& s : finite_sinks) s = std::isinf(s) && s > 0 ? 1e4f : s;
  Dsv4DecodeArgs finite_args = args;
  finite_args.sinks = finite_sinks.data();
  const test::Expected brute = test::brute_force(finite_args);
  test::expect_rows_close(ref.out, brute.out, T, H, 1e-12, "reference vs brute force");

  for (int64_t t = 0; t < T; ++t) {
    for (int h = 0; h < H; ++h) {
      SCOPED_TRACE(::testing::Message() << "token " << t << " head " << h << " sink " << p.sinks[h]);
      const size_t row = (static_cast<size_t>(t) * H + h) * kHeadDim, i = static_cast<size_t>(t) * H + h;
      ASSERT_TRUE(std::isfinite(ref.lse[i]));
      EXPECT_EQ(ref.lse[i], ref_no_sink.lse[i]) << "the sink must not enter lse";
      EXPECT_EQ(host.lse[i], no_sink.lse[i]);
      for (int d = 0; d < kHeadDim; ++d) {
        if (h % 4 <= 1) {
          ASSERT_EQ(ref.out[row + d], 0.0);
          ASSERT_EQ(reference::decode_bf16(host.out[row + d]), 0.0);
        } else if (h % 4 == 2) {
          ASSERT_EQ(ref.out[row + d], ref_no_sink.out[row + d]);
          ASSERT_EQ(host.out[row + d], no_sink.out[row + d]);
        } else {
          ASSERT_NE(ref.out[row + d], ref_no_sink.out[row + d]);  // a finite sink does change out
        }
      }
    }
  }
}

// Tokens whose every column is masked, in each way: zeros and lse = -inf,
// with or without sinks, next to an ordinary token.
TEST(Dsv4Reference, FullyMaskedTokens) {
  for (bool sinks : {false, true}) {
    const uint64_t seed = test::fresh_seed();
    SCOPED_TRACE(test::seed_message(seed) + (sinks ? " with sinks" : " without sinks"));
    std::mt19937_64 rng(seed);
    Dsv4ProblemConfig config = test::small_config(seed, DType::kFloat8E4M3, 16, 384, 5);
    config.sinks = sinks;
    Dsv4Problem p = testing::make_dsv4_problem(config);
    const int W = config.width, H = config.heads;
    int32_t* idx = p.indices.data();
    p.lens[0] = 0;                                    // lens = 0
    p.lens[1] = W, std::fill_n(idx + W, W, -1);       // all -1
    p.lens[2] = 1 + static_cast<int32_t>(rng() % W);  // all out of range (counted up to lens)
    std::fill_n(idx + 2 * W, kSwaColumns, static_cast<int32_t>(config.swa_rows));
    std::fill_n(idx + 2 * W + kSwaColumns, W - kSwaColumns, INT32_MAX);
    p.lens[4] = W, std::fill_n(idx + 4 * W, W, -1);  // one column, out of range
    idx[4 * W + kSwaColumns + rng() % (W - kSwaColumns)] = static_cast<int32_t>(config.compressed_rows);
    const Dsv4DecodeArgs args = p.host_args(nullptr, nullptr);
    const test::Expected brute = test::check_problem(args);
    EXPECT_EQ(brute.out_of_range, p.lens[2] + 1);
    const test::HostOutput host = test::run_host(args);
    for (int64_t t : {0, 1, 2, 4}) {
      for (int h = 0; h < H; ++h) {
        EXPECT_EQ(host.lse[t * H + h], -INFINITY) << "token " << t;
        for (int d = 0; d < kHeadDim; ++d) ASSERT_EQ(reference::decode_bf16(host.out[(t * H + h) * kHeadDim + d]), 0.0);
      }
    }
    EXPECT_TRUE(std::isfinite(host.lse[3 * H]));  // the ordinary token
  }
}

// Out-of-range indices are masked exactly like -1, and counted only where
// the column is otherwise active (c < lens).
TEST(Dsv4Reference, OutOfRangeIndicesAreMaskedAndCounted) {
  for (DType dtype : {DType::kFloat8E4M3, DType::kBFloat16}) {
    const uint64_t seed = test::fresh_seed();
    SCOPED_TRACE(test::seed_message(seed) + " " + test::dtype_name(dtype));
    std::mt19937_64 rng(seed);
    Dsv4Problem p = testing::make_dsv4_problem(test::small_config(seed, dtype, 16, 384, 6));
    const int64_t counted = test::inject_out_of_range(p, rng);
    ASSERT_GT(counted, 0);
    const Dsv4DecodeArgs args = p.host_args(nullptr, nullptr);
    const test::Expected brute = test::check_problem(args);
    EXPECT_EQ(brute.out_of_range, counted);
    EXPECT_EQ(reference::dsv4_decode(args).out_of_range, counted);

    Dsv4Problem holes = p;  // the same with -1 in place of the bad indices
    for (int64_t t = 0; t < p.config.tokens; ++t) {
      for (int c = 0; c < p.config.width; ++c) {
        int32_t& index = holes.indices[t * p.config.width + c];
        if (index >= (c < kSwaColumns ? p.config.swa_rows : p.config.compressed_rows)) index = -1;
      }
    }
    const test::HostOutput a = test::run_host(args), b = test::run_host(holes.host_args(nullptr, nullptr));
    EXPECT_TRUE(a.out == b.out);
    EXPECT_EQ(a.lse, b.lse);
    EXPECT_EQ(a.count, test::kCountStart + counted);
    EXPECT_EQ(b.count, test::kCountStart);
  }
}

// lens cut anywhere, also inside the SWA columns and to zero.
TEST(Dsv4Reference, ShortLens) {
  const uint64_t seed = test::fresh_seed();
  SCOPED_TRACE(test::seed_message(seed));
  std::mt19937_64 rng(seed);
  Dsv4Problem p = testing::make_dsv4_problem(test::small_config(seed, DType::kFloat8E4M3, 16, 384, 8));
  for (int32_t& len : p.lens) len = static_cast<int32_t>(rng() % (len + 1));  // only shorter: stays on live rows
  p.lens[0] = 0;
  p.lens[1] = std::min(p.lens[1], 100);
  test::check_problem(p.host_args(nullptr, nullptr));
}

// Uniform q_len: token i of request b sits at p = seq_lens[b] - q_len + i.
TEST(Dsv4Reference, SeqLensUniformQueryLength) {
  const uint64_t seed = test::fresh_seed();
  SCOPED_TRACE(test::seed_message(seed));
  std::mt19937_64 rng(seed);
  const int32_t q_len = 4, requests = 3;
  Dsv4ProblemConfig config = test::small_config(seed, DType::kFloat8E4M3, 16, 256, q_len * requests);
  config.q_len = q_len;
  Dsv4Problem p = testing::make_dsv4_problem(config);
  test::inject_out_of_range(p, rng);
  // A short sequence, one whose window straddles 128, a long one.
  std::vector<int32_t> seq_lens = {q_len + static_cast<int32_t>(rng() % 8), 100 + static_cast<int32_t>(rng() % 40),
                                   500 + static_cast<int32_t>(rng() % 1000)};
  std::shuffle(seq_lens.begin(), seq_lens.end(), rng);
  Dsv4DecodeArgs args = p.host_args(nullptr, nullptr);
  args.seq_lens = seq_lens.data();
  args.num_requests = requests;
  args.q_len = q_len;
  EXPECT_GT(test::masked_by_seq_lens(args), 0);
  test::check_problem(args);
}

// Varlen: cum_seq_lens_q gives each request its own query length (1..16).
TEST(Dsv4Reference, SeqLensVarlen) {
  for (DType dtype : {DType::kFloat8E4M3, DType::kBFloat16}) {
    const uint64_t seed = test::fresh_seed();
    SCOPED_TRACE(test::seed_message(seed) + " " + test::dtype_name(dtype));
    std::mt19937_64 rng(seed);
    std::vector<int32_t> q_lens = {1, kMaxQueryLen, 1 + static_cast<int32_t>(rng() % 16),
                                   1 + static_cast<int32_t>(rng() % 16), 1 + static_cast<int32_t>(rng() % 16)};
    std::shuffle(q_lens.begin(), q_lens.end(), rng);
    const int32_t requests = static_cast<int32_t>(q_lens.size());
    std::vector<int32_t> cum = {0}, seq_lens;
    for (int32_t b = 0; b < requests; ++b) {
      cum.push_back(cum.back() + q_lens[b]);
      // Alternately short (under 128: the window is cut by p + 1) and long sequences.
      seq_lens.push_back(q_lens[b] + static_cast<int32_t>(b % 2 ? rng() % 100 : 128 + rng() % 4000));
    }
    Dsv4ProblemConfig config = test::small_config(seed, dtype, 16, 256, cum.back());
    config.q_len = 1;
    Dsv4Problem p = testing::make_dsv4_problem(config);
    test::inject_out_of_range(p, rng);
    Dsv4DecodeArgs args = p.host_args(nullptr, nullptr);
    args.seq_lens = seq_lens.data();
    args.num_requests = requests;
    args.cum_seq_lens_q = cum.data();
    args.max_q_len = kMaxQueryLen;
    EXPECT_GT(test::masked_by_seq_lens(args), 0);
    test::check_problem(args);
  }
}

// Padded q/out/lse/indices strides, padded pool rows and pages and another
// page size give bit for bit the result of the contiguous layout, and
// nothing is written into the padding.
TEST(Dsv4Reference, StridedLayoutsMatchContiguous) {
  for (DType dtype : {DType::kFloat8E4M3, DType::kBFloat16}) {
    const uint64_t seed = test::fresh_seed();
    SCOPED_TRACE(test::seed_message(seed) + " " + test::dtype_name(dtype));
    std::mt19937_64 rng(seed);
    const Dsv4Problem p = testing::make_dsv4_problem(test::small_config(seed, dtype, 16, 256, 3));
    const Dsv4DecodeArgs dense = p.host_args(nullptr, nullptr);
    const test::HostOutput expected = test::run_host(dense);
    const int64_t T = p.config.tokens, eb = p.element_bytes();
    const int H = p.config.heads, W = p.config.width;

    // Padding holds NaN (inputs) so that reading it would show.
    auto nan_buffer = [&](int64_t elements) {
      std::vector<uint8_t> buffer(elements * eb);
      for (int64_t i = 0; i < elements; ++i) testing::encode_element(dtype, NAN, &buffer[i * eb]);
      return buffer;
    };
    Dsv4DecodeArgs args = dense;
    args.q_head_stride = kHeadDim + 32;
    args.q_token_stride = H * args.q_head_stride + 48;
    std::vector<uint8_t> q = nan_buffer(T * args.q_token_stride);
    for (int64_t t = 0; t < T; ++t) {
      for (int h = 0; h < H; ++h) {
        std::copy_n(&p.q[(t * H + h) * kHeadDim * eb], kHeadDim * eb,
                    &q[(t * args.q_token_stride + h * args.q_head_stride) * eb]);
      }
    }
    args.q = q.data();
    std::vector<uint8_t> pools[2];
    for (int which = 0; which < 2; ++which) {
      const KvPool& from = which ? dense.compressed_kv : dense.swa_kv;
      KvPool to;
      to.page_size = 32;
      to.row_stride = kHeadDim + 64;
      to.page_stride = to.page_size * to.row_stride + 32;
      to.pages = from.rows() / to.page_size;
      pools[which] = nan_buffer(to.pages * to.page_stride);
      const auto& src = which ? p.compressed_kv : p.swa_kv;
      for (int64_t r = 0; r < from.rows(); ++r) {
        std::copy_n(&src[test::row_offset(from, r) * eb], kHeadDim * eb, &pools[which][test::row_offset(to, r) * eb]);
      }
      to.data = pools[which].data();
      (which ? args.compressed_kv : args.swa_kv) = to;
    }
    args.indices_stride = W + 4;
    std::vector<int32_t> indices(T * args.indices_stride);
    for (auto& index : indices) index = static_cast<int32_t>(rng());  // garbage padding
    for (int64_t t = 0; t < T; ++t) std::copy_n(&p.indices[t * W], W, &indices[t * args.indices_stride]);
    args.indices = indices.data();

    args.out_head_stride = kHeadDim + 8;
    args.out_token_stride = H * args.out_head_stride + 24;
    args.lse_token_stride = H + 5;
    std::vector<uint16_t> out(T * args.out_token_stride, test::kOutPoison);
    std::vector<float> lse(T * args.lse_token_stride, test::lse_poison());
    int32_t count = test::kCountStart;
    args.out = out.data();
    args.lse = lse.data();
    args.out_of_range_count = &count;
    const Status status = dsv4_decode(args, nullptr, 0, nullptr);
    ASSERT_TRUE(status.ok()) << status.message();

    test::expect_strided_outputs(expected, T, H, out, args.out_token_stride, args.out_head_stride, lse,
                                 args.lse_token_stride, count);
  }
}

// bmm scales given by pointer are read (and win over `value`).
TEST(Dsv4Reference, ScalesByPointer) {
  const uint64_t seed = test::fresh_seed();
  SCOPED_TRACE(test::seed_message(seed));
  const Dsv4Problem p = testing::make_dsv4_problem(test::small_config(seed));
  const Dsv4DecodeArgs by_value = p.host_args(nullptr, nullptr);
  Dsv4DecodeArgs by_pointer = by_value;
  const float bmm1 = p.bmm1_scale, bmm2 = p.bmm2_scale;
  by_pointer.bmm1_scale = {123.0f, &bmm1};
  by_pointer.bmm2_scale = {-7.0f, &bmm2};
  const test::HostOutput a = test::run_host(by_value), b = test::run_host(by_pointer);
  EXPECT_TRUE(a.out == b.out);
  EXPECT_EQ(a.lse, b.lse);
  test::check_problem(by_pointer);
}

// T = 0 is a valid call that reads and writes nothing, even with null pointers.
TEST(Dsv4Reference, ZeroTokensWritesNothing) {
  const uint64_t seed = test::fresh_seed();
  SCOPED_TRACE(test::seed_message(seed));
  const Dsv4Problem p = testing::make_dsv4_problem(test::small_config(seed));
  std::vector<uint16_t> out(16 * kHeadDim, test::kOutPoison);
  std::vector<float> lse(16, 1.5f);
  int32_t count = test::kCountStart;
  Dsv4DecodeArgs args = p.host_args(out.data(), lse.data());
  args.num_tokens = 0;
  args.out_of_range_count = &count;
  EXPECT_TRUE(dsv4_decode(args, nullptr, 0, nullptr).ok());
  Dsv4DecodeArgs bare;
  bare.memory = MemorySpace::kHost;
  bare.width = kSwaColumns;
  EXPECT_TRUE(dsv4_decode(bare, nullptr, 0, nullptr).ok());
  EXPECT_TRUE(std::all_of(out.begin(), out.end(), [](uint16_t v) { return v == test::kOutPoison; }));
  EXPECT_TRUE(std::all_of(lse.begin(), lse.end(), [](float v) { return v == 1.5f; }));
  EXPECT_EQ(count, test::kCountStart);
  EXPECT_TRUE(reference::dsv4_decode(args).out.empty());
}

}  // namespace
}  // namespace sparse_decode
