// Masked columns in the fp64 reference and the host backend of dsv4_decode:
// extreme sinks, fully masked tokens, out-of-range indices (masked and
// counted), short lens; against the literal softmax of support/dsv4_checks.h.
// Every case draws fresh random data from a printed seed.
#include <gtest/gtest.h>

#include <algorithm>
#include <climits>
#include <cmath>
#include <random>
#include <vector>

#include "reference/dsv4_reference.h"
#include "reference/formats.h"
#include "support/dsv4_checks.h"
#include "testing/dsv4_problem.h"

namespace sparse_decode {
namespace {

using testing::Dsv4Problem;
using testing::Dsv4ProblemConfig;

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

}  // namespace
}  // namespace sparse_decode
