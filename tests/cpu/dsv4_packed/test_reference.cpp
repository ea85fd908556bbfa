// The packed-row reference (reference::dsv4_decode_packed) and the public
// host-memory backend (dsv4_decode_packed with MemorySpace::kHost) against
// the test's literal row decoding and softmax (support/dsv4_packed_checks.h)
// and against closed forms. Every case draws fresh random data from a
// printed seed.
#include <gtest/gtest.h>

#include <algorithm>
#include <climits>
#include <cmath>
#include <cstring>
#include <ostream>
#include <random>
#include <vector>

#include "support/dsv4_packed_checks.h"
#include "reference/dsv4_packed_reference.h"
#include "reference/formats.h"
#include "testing/dsv4_packed_problem.h"

namespace sparse_decode {
namespace {

using reference::PackedSegmentId;
using test::kInf;
using testing::Dsv4PackedProblem;
using testing::Dsv4PackedProblemConfig;

bool same_value(double a, double b) { return (std::isnan(a) && std::isnan(b)) || a == b; }

// ---------------------------------------------------------------------------
// Row decoding.

// Random bytes everywhere (every E4M3 code, NaN ones too, every scale byte
// 0..255), at every page size and with a gap: the reference decodes each row
// exactly as the literal reading of SPEC section 2 does.
TEST(Dsv4PackedRow, DecodesEveryByteAsTheSpecSays) {
  const uint64_t seed = test::fresh_seed();
  SCOPED_TRACE(test::seed_message(seed));
  std::mt19937_64 rng(seed);
  for (int64_t page_size : {1, 2, 61, 64, 256}) {
    for (int64_t gap : {0, 48}) {
      SCOPED_TRACE(::testing::Message() << "page_size " << page_size << " gap " << gap);
      PackedPool pool;
      pool.page_size = page_size;
      pool.page_stride = (page_size * kPackedRowBytes + 15) / 16 * 16 + gap;
      pool.pages = std::max<int64_t>(2, 600 / page_size);
      std::vector<uint8_t> bytes(pool.pages * pool.page_stride);
      for (auto& b : bytes) b = static_cast<uint8_t>(rng());
      pool.data = bytes.data();
      std::vector<double> got(kHeadDim);
      for (int64_t r = 0; r < pool.rows(); ++r) {
        reference::decode_packed_row(pool, r, got.data());
        const std::vector<double> want = test::literal_packed_row(pool, r);
        for (int d = 0; d < kHeadDim; ++d) {
          ASSERT_TRUE(same_value(got[d], want[d])) << "row " << r << " dim " << d << ": " << got[d] << " vs "
                                                   << want[d];
        }
      }
    }
  }
}

// Every E4M3 code under every finite scale byte, in one pool: tile k of row
// r has scale byte (r * 7 + k) % 255 and the codes cycle through 0..255.
TEST(Dsv4PackedRow, EveryCodeUnderEveryScaleByte) {
  PackedPool pool;
  pool.page_size = 64;
  pool.page_stride = 64 * kPackedRowBytes;
  pool.pages = 4;
  std::vector<uint8_t> bytes(pool.pages * pool.page_stride, 0xFF);
  pool.data = bytes.data();
  std::vector<int> seen(255 * 256, 0);
  for (int64_t r = 0; r < pool.rows(); ++r) {
    auto* data = const_cast<uint8_t*>(reference::packed_row_data(pool, r));
    auto* scales = const_cast<uint8_t*>(reference::packed_row_scales(pool, r));
    for (int k = 0; k < kPackedTiles; ++k) scales[k] = static_cast<uint8_t>((r * 7 + k) % 255);
    for (int d = 0; d < kPackedFp8Dims; ++d) data[d] = static_cast<uint8_t>(d + r * 37);
    std::vector<double> got(kHeadDim);
    reference::decode_packed_row(pool, r, got.data());
    const std::vector<double> want = test::literal_packed_row(pool, r);
    for (int d = 0; d < kPackedFp8Dims; ++d) {
      ASSERT_TRUE(same_value(got[d], want[d])) << "row " << r << " dim " << d;
      ++seen[scales[d / 64] * 256 + data[d]];
    }
  }
  // 256 rows * 448 bytes cover most (code, scale) pairs; each scale byte
  // meets codes from its whole range.
  for (int s = 0; s < 255; ++s) {
    int codes = 0;
    for (int code = 0; code < 256; ++code) codes += seen[s * 256 + code] > 0;
    EXPECT_GE(codes, 64) << "scale byte " << s;
  }
}

// A row reads its own 576 + 7 bytes and nothing else: the rest of the pool,
// its padding scale byte and the page gap are NaN.
TEST(Dsv4PackedRow, ReadsOnlyItsOwnBytes) {
  const uint64_t seed = test::fresh_seed();
  SCOPED_TRACE(test::seed_message(seed));
  std::mt19937_64 rng(seed);
  std::normal_distribution<double> normal(0.0, 1.0);
  for (int64_t page_size : {1, 2, 61, 64, 256}) {
    PackedPool pool;
    pool.page_size = page_size;
    pool.page_stride = (page_size * kPackedRowBytes + 15) / 16 * 16 + 32;
    pool.pages = 3;
    std::vector<uint8_t> bytes(pool.pages * pool.page_stride, 0xFF);  // NaN as E4M3, BF16 and UE8M0
    pool.data = bytes.data();
    const int64_t row = static_cast<int64_t>(rng() % pool.rows());
    std::vector<double> values(kHeadDim);
    for (auto& v : values) v = normal(rng);
    auto* scales = const_cast<uint8_t*>(reference::packed_row_scales(pool, row));
    testing::quantize_packed_row(values.data(), const_cast<uint8_t*>(reference::packed_row_data(pool, row)), scales);
    ASSERT_EQ(scales[7], 0xFF) << "the quantizer must leave the padding byte alone";
    std::vector<double> got(kHeadDim);
    reference::decode_packed_row(pool, row, got.data());
    for (int d = 0; d < kHeadDim; ++d) {
      ASSERT_TRUE(std::isfinite(got[d])) << "page_size " << page_size << " row " << row << " dim " << d;
    }
  }
}

// The generator's quantizer: the smallest power-of-two scale with
// amax / scale <= 448, and each value within half an E4M3 step of the input.
TEST(Dsv4PackedRow, QuantizerPicksTheSmallestScale) {
  const uint64_t seed = test::fresh_seed();
  SCOPED_TRACE(test::seed_message(seed));
  std::mt19937_64 rng(seed);
  std::normal_distribution<double> normal(0.0, 1.0);
  for (int trial = 0; trial < 200; ++trial) {
    std::vector<double> values(kHeadDim);
    const double sigma = std::ldexp(1.0, static_cast<int>(rng() % 60) - 30);
    for (auto& v : values) v = sigma * normal(rng);
    if (trial == 0) values[3] = 448.0 * std::ldexp(1.0, -5);  // amax exactly 448 * 2^-5 (if the largest)
    uint8_t data[kPackedDataBytes], scales[kPackedScaleBytes];
    testing::quantize_packed_row(values.data(), data, scales);
    for (int k = 0; k < kPackedTiles; ++k) {
      double amax = 0.0;
      for (int d = 0; d < 64; ++d) amax = std::max(amax, std::fabs(values[k * 64 + d]));
      const double scale = test::literal_ue8m0(scales[k]);
      ASSERT_LE(amax / scale, 448.0) << "tile " << k;
      ASSERT_GT(amax / scale, 224.0) << "tile " << k << ": a smaller scale would do";
      for (int d = 0; d < 64; ++d) {
        const double v = values[k * 64 + d], q = test::literal_e4m3(data[k * 64 + d]) * scale;
        // E4M3: 3 mantissa bits (half step 2^-4 relative) above 2^-6, subnormal step 2^-9 below.
        ASSERT_LE(std::fabs(q - v), std::max(std::fabs(v) * 0.0625, std::ldexp(scale, -10))) << "dim " << k * 64 + d;
      }
    }
  }
}

// ---------------------------------------------------------------------------
// Random problems over head counts, widths, page sizes, gaps, sinks, lens, holes.

struct PackedCase {
  int heads, swa_width, extra_width;
  int64_t page_size, page_gap, tokens;
  int q_len;
  bool sinks, swa_lens;
  double holes, short_fraction;
};

// GoogleTest prints a parameter on failure: its fields, not its bytes.
void PrintTo(const PackedCase& pc, std::ostream* os) {
  *os << "H " << pc.heads << ", W " << pc.swa_width << " + " << pc.extra_width << ", page_size " << pc.page_size
      << ", gap " << pc.page_gap << ", T " << pc.tokens << ", q_len " << pc.q_len << (pc.sinks ? ", sinks" : "")
      << (pc.swa_lens ? ", swa lens" : "") << ", holes " << pc.holes << ", short " << pc.short_fraction;
}

class Dsv4PackedRandom : public ::testing::TestWithParam<PackedCase> {};

TEST_P(Dsv4PackedRandom, MatchesBruteForceAndHostBackend) {
  const PackedCase& pc = GetParam();
  const uint64_t seed = test::fresh_seed();
  SCOPED_TRACE(test::seed_message(seed));
  Dsv4PackedProblemConfig c = test::packed_config(seed, pc.heads, pc.tokens, pc.extra_width, pc.page_size);
  c.swa_width = pc.swa_width;
  c.page_gap = pc.page_gap;
  c.q_len = pc.q_len;
  c.sinks = pc.sinks;
  c.swa_lens = pc.swa_lens;
  c.hole_fraction = pc.holes;
  c.short_fraction = pc.short_fraction;
  const Dsv4PackedProblem p = testing::make_dsv4_packed_problem(c);
  const test::Expected brute = test::check_packed_problem(p.host_args(nullptr, nullptr));
  // Masked columns name NaN rows whenever lens cut a segment: "no NaN leaks" is tested.
  if (pc.extra_width > 1) EXPECT_GT(brute.masked_in_range, 0);
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, Dsv4PackedRandom,
    ::testing::Values(PackedCase{16, 128, 512, 64, 0, 6, 6, true, true, 0.0, 0.25},   // DeepSeek-V4 shape
                      PackedCase{16, 128, 0, 64, 0, 6, 3, true, true, 0.0, 0.5},      // SWA only
                      PackedCase{8, 128, 384, 1, 0, 5, 5, false, true, 0.2, 0.25},    // page size 1
                      PackedCase{32, 128, 256, 2, 32, 4, 2, true, false, 0.0, 0.5},   // page size 2, gap, no SWA lens
                      PackedCase{64, 64, 128, 61, 16, 3, 3, true, true, 0.3, 0.25},   // odd page size
                      PackedCase{128, 128, 512, 256, 48, 2, 1, false, true, 0.0, 0.0},
                      PackedCase{16, 37, 101, 61, 0, 7, 4, true, true, 0.1, 1.0},     // odd widths, short requests
                      PackedCase{16, 1, 1, 2, 0, 5, 5, true, true, 0.0, 0.25}),      // one column each
    [](const auto& info) {
      const PackedCase& pc = info.param;
      return "H" + std::to_string(pc.heads) + "_W" + std::to_string(pc.swa_width) + "_" +
             std::to_string(pc.extra_width) + "_page" + std::to_string(pc.page_size) + "_gap" +
             std::to_string(pc.page_gap);
    });

// ---------------------------------------------------------------------------
// Closed forms.

class Dsv4PackedClosedForm : public ::testing::TestWithParam<bool> {
 protected:
  bool sinks() const { return GetParam(); }
};

// One active column (in either segment): out = row / (1 + exp(sink - s)), lse = s.
TEST_P(Dsv4PackedClosedForm, OneActiveColumnGivesItsRow) {
  const uint64_t seed = test::fresh_seed();
  SCOPED_TRACE(test::seed_message(seed));
  std::mt19937_64 rng(seed);
  Dsv4PackedProblemConfig c = test::packed_config(seed, 16, 6);
  c.sinks = sinks();
  c.short_fraction = 0.0;  // every SWA column is live
  Dsv4PackedProblem p = testing::make_dsv4_packed_problem(c);
  const int64_t T = c.tokens;
  const int H = c.heads;
  std::vector<std::pair<bool, int32_t>> kept(T);  // (extra?, row)
  for (int64_t t = 0; t < T; ++t) {
    const bool extra = t % 2 == 1;
    const int32_t width = extra ? c.extra_width : c.swa_width;
    const int32_t len = extra ? p.extra_lens[t] : p.swa_lens[t];
    int32_t* row = extra ? &p.extra_indices[t * p.extra_stride()] : &p.swa_indices[t * p.swa_stride()];
    int32_t column;
    do column = static_cast<int32_t>(rng() % len);
    while (row[column] < 0);
    kept[t] = {extra, row[column]};
    for (int32_t col = 0; col < width; ++col) row[col] = col == column ? row[col] : -1;
    int32_t* other = extra ? &p.swa_indices[t * p.swa_stride()] : &p.extra_indices[t * p.extra_stride()];
    std::fill_n(other, extra ? c.swa_width : c.extra_width, -1);
  }
  const Dsv4PackedDecodeArgs args = p.host_args(nullptr, nullptr);
  std::vector<double> out(static_cast<size_t>(T) * H * kHeadDim), lse(static_cast<size_t>(T) * H);
  for (int64_t t = 0; t < T; ++t) {
    const std::vector<double> row = test::literal_packed_row(kept[t].first ? args.extra.pool : args.swa.pool,
                                                             kept[t].second);
    for (int h = 0; h < H; ++h) {
      const double s = double{p.softmax_scale} * test::dot(test::packed_q_row(args, t, h), row);
      const double sink = sinks() ? p.sinks[h] : -kInf;
      for (int d = 0; d < kHeadDim; ++d) out[(t * H + h) * kHeadDim + d] = row[d] / (1.0 + std::exp(sink - s));
      lse[t * H + h] = s;
    }
  }
  const reference::Dsv4Result ref = reference::dsv4_decode_packed(args);
  test::expect_rows_close(ref.out, out, T, H, 1e-12, "reference vs closed form");
  test::expect_lse_close(ref.lse, lse, 1e-12, "reference lse vs closed form");
  const test::HostOutput host = test::run_packed_host(args);
  test::expect_bf16_rounding_of(host.out_values(), out, "host vs closed form");
  test::expect_lse_close(host.lse, lse, 1e-6, "host lse vs closed form");
  if (!sinks()) {
    // out = row exactly; every dequantized value has at most 4 significant
    // bits (or is BF16), so its BF16 is exact: compare values.
    for (size_t i = 0; i < out.size(); ++i) {
      ASSERT_EQ(reference::decode_bf16(host.out[i]), out[i]) << "element " << i;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Sinks, Dsv4PackedClosedForm, ::testing::Bool(),
                         [](const auto& info) { return std::string(info.param ? "sinks" : "no_sinks"); });

// Per head: sink 1e4 and +inf give zeros with the sink-free lse (finite);
// -inf is the same as no sink; finite sinks follow the formula.
TEST(Dsv4Packed, ExtremeSinks) {
  const uint64_t seed = test::fresh_seed();
  SCOPED_TRACE(test::seed_message(seed));
  Dsv4PackedProblem p = testing::make_dsv4_packed_problem(test::packed_config(seed));
  const int H = p.config.heads;
  const int64_t T = p.config.tokens;
  for (int h = 0; h < H; ++h) {
    if (h % 4 == 0) p.sinks[h] = 1e4f;
    if (h % 4 == 1) p.sinks[h] = INFINITY;
    if (h % 4 == 2) p.sinks[h] = -INFINITY;
  }
  const Dsv4PackedDecodeArgs args = p.host_args(nullptr, nullptr);
  Dsv4PackedDecodeArgs no_sink_args = args;
  no_sink_args.sinks = nullptr;
  const test::HostOutput host = test::run_packed_host(args), no_sink = test::run_packed_host(no_sink_args);
  const reference::Dsv4Result ref = reference::dsv4_decode_packed(args);
  const reference::Dsv4Result ref_no_sink = reference::dsv4_decode_packed(no_sink_args);
  std::vector<float> finite_sinks = p.sinks;  // the literal formula cannot take +inf (inf - inf)
  for (float& s : finite_sinks) s = std::isinf(s) && s > 0 ? 1e4f : s;
  Dsv4PackedDecodeArgs finite_args = args;
  finite_args.sinks = finite_sinks.data();
  test::expect_rows_close(ref.out, test::packed_brute_force(finite_args).out, T, H, 1e-12, "reference vs brute force");
  for (int64_t t = 0; t < T; ++t) {
    for (int h = 0; h < H; ++h) {
      SCOPED_TRACE(::testing::Message() << "token " << t << " head " << h << " sink " << p.sinks[h]);
      const size_t i = static_cast<size_t>(t) * H + h, row = i * kHeadDim;
      ASSERT_TRUE(std::isfinite(ref.lse[i]));
      EXPECT_EQ(ref.lse[i], ref_no_sink.lse[i]) << "the sink must not enter lse";
      EXPECT_EQ(host.lse[i], no_sink.lse[i]);
      for (int d = 0; d < kHeadDim; ++d) {
        if (h % 4 <= 1) {
          ASSERT_EQ(ref.out[row + d], 0.0);
          ASSERT_EQ(reference::decode_bf16(host.out[row + d]), 0.0);
        } else if (h % 4 == 2) {
          ASSERT_EQ(host.out[row + d], no_sink.out[row + d]);
        }
      }
    }
  }
}

// Tokens with no active column in either segment, in each way: zeros and
// lse = -inf, with or without sinks, next to ordinary tokens.
TEST(Dsv4Packed, NoActiveColumnGivesZerosAndMinusInfinity) {
  for (bool sinks : {false, true}) {
    const uint64_t seed = test::fresh_seed();
    SCOPED_TRACE(test::seed_message(seed) + (sinks ? " with sinks" : " without sinks"));
    Dsv4PackedProblemConfig c = test::packed_config(seed, 16, 6);
    c.sinks = sinks;
    Dsv4PackedProblem p = testing::make_dsv4_packed_problem(c);
    const int H = c.heads;
    auto swa = [&](int64_t t) { return &p.swa_indices[t * p.swa_stride()]; };
    auto extra = [&](int64_t t) { return &p.extra_indices[t * p.extra_stride()]; };
    p.swa_lens[0] = 0, p.extra_lens[0] = 0;  // lens 0 in both
    std::fill_n(swa(1), c.swa_width, -1), std::fill_n(extra(1), c.extra_width, -1);  // all -1
    // All out of range: counted up to lens, in both pools.
    std::fill_n(swa(2), c.swa_width, static_cast<int32_t>(p.swa_pages * c.page_size));
    std::fill_n(extra(2), c.extra_width, INT32_MAX);
    p.swa_lens[4] = 0, std::fill_n(extra(4), c.extra_width, -1);  // one mix of both ways
    const Dsv4PackedDecodeArgs args = p.host_args(nullptr, nullptr);
    const test::Expected brute = test::check_packed_problem(args);
    EXPECT_EQ(brute.out_of_range, p.swa_lens[2] + p.extra_lens[2]);
    const test::HostOutput host = test::run_packed_host(args);
    for (int64_t t = 0; t < c.tokens; ++t) {
      const bool empty = t == 0 || t == 1 || t == 2 || t == 4;
      for (int h = 0; h < H; ++h) {
        if (!empty) {
          EXPECT_TRUE(std::isfinite(host.lse[t * H + h])) << "token " << t;
          continue;
        }
        EXPECT_EQ(host.lse[t * H + h], -INFINITY) << "token " << t;
        for (int d = 0; d < kHeadDim; ++d) ASSERT_EQ(reference::decode_bf16(host.out[(t * H + h) * kHeadDim + d]), 0.0);
      }
    }
  }
}

// Out-of-range indices are masked exactly like -1 and counted only where the
// column is otherwise active (c < lens); an SWA index that is a row of the
// (larger) extra pool only is out of range too.
TEST(Dsv4Packed, OutOfRangeIndicesAreMaskedAndCounted) {
  const uint64_t seed = test::fresh_seed();
  SCOPED_TRACE(test::seed_message(seed));
  std::mt19937_64 rng(seed);
  Dsv4PackedProblemConfig c = test::packed_config(seed, 16, 6);
  c.extra_rows = 8192;
  Dsv4PackedProblem p = testing::make_dsv4_packed_problem(c);
  const int64_t swa_rows = p.swa_pages * c.page_size, extra_rows = p.extra_pages * c.page_size;
  ASSERT_GT(extra_rows, swa_rows);
  int64_t counted = 0;
  Dsv4PackedProblem holes = p;  // the same with -1 in place of the bad indices
  for (int64_t t = 0; t < c.tokens; ++t) {
    for (int k = 0; k < 6; ++k) {
      const bool extra = k % 2 == 1;
      const int64_t stride = extra ? p.extra_stride() : p.swa_stride();
      const int32_t column = static_cast<int32_t>(rng() % (extra ? c.extra_width : c.swa_width));
      int32_t& index = (extra ? p.extra_indices : p.swa_indices)[t * stride + column];
      const int64_t rows = extra ? extra_rows : swa_rows;
      if (index >= rows) continue;  // already bad
      switch (rng() % (extra ? 2 : 3)) {
        case 0:
          index = INT32_MAX;
          break;
        case 1:
          index = static_cast<int32_t>(rows + rng() % 100);
          break;
        default:  // a row of the extra pool, past the SWA pool
          index = static_cast<int32_t>(swa_rows + rng() % (extra_rows - swa_rows));
      }
      (extra ? holes.extra_indices : holes.swa_indices)[t * stride + column] = -1;
      counted += column < (extra ? p.extra_lens[t] : p.swa_lens[t]);
    }
  }
  ASSERT_GT(counted, 0);
  const Dsv4PackedDecodeArgs args = p.host_args(nullptr, nullptr);
  const test::Expected brute = test::check_packed_problem(args);
  EXPECT_EQ(brute.out_of_range, counted);
  const test::HostOutput a = test::run_packed_host(args), b = test::run_packed_host(holes.host_args(nullptr, nullptr));
  EXPECT_TRUE(a.out == b.out);
  EXPECT_EQ(a.lse, b.lse);
  EXPECT_EQ(a.count, test::kCountStart + counted);
  EXPECT_EQ(b.count, test::kCountStart);
}

// lens cut anywhere in both segments, to zero in one segment only.
TEST(Dsv4Packed, ShortLensInBothSegments) {
  const uint64_t seed = test::fresh_seed();
  SCOPED_TRACE(test::seed_message(seed));
  std::mt19937_64 rng(seed);
  Dsv4PackedProblem p = testing::make_dsv4_packed_problem(test::packed_config(seed, 16, 8));
  for (int32_t& len : p.swa_lens) len = static_cast<int32_t>(rng() % (len + 1));  // only shorter: stays on live rows
  for (int32_t& len : p.extra_lens) len = static_cast<int32_t>(rng() % (len + 1));
  p.swa_lens[0] = 0;    // extra only
  p.extra_lens[1] = 0;  // SWA only
  p.swa_lens[2] = std::min(p.swa_lens[2], 3);
  p.extra_lens[3] = -5;  // negative: no column
  const test::Expected brute = test::check_packed_problem(p.host_args(nullptr, nullptr));
  EXPECT_GT(brute.masked_in_range, 0);
}

}  // namespace
}  // namespace sparse_decode
