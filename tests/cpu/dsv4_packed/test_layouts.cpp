// dsv4_decode_packed on the host: page sizes, page gaps and padded strides
// give bit for bit the result of the plain layout; an absent extra segment
// is the same as one with no active column; scale bytes far outside the
// usual range; T = 0.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "support/dsv4_packed_checks.h"
#include "reference/dsv4_packed_reference.h"
#include "testing/dsv4_packed_problem.h"

namespace sparse_decode {
namespace {

using testing::Dsv4PackedProblem;
using testing::Dsv4PackedProblemConfig;

// Copies every row (576 data bytes and 8 scale bytes) of `from` to the same
// row number of a new pool with another page size and stride, NaN elsewhere.
std::vector<uint8_t> relayout(const PackedPool& from, int64_t page_size, int64_t page_stride, PackedPool* to) {
  to->page_size = page_size;
  to->page_stride = page_stride;
  to->pages = (from.rows() + page_size - 1) / page_size;
  std::vector<uint8_t> bytes(to->pages * page_stride, 0xFF);
  to->data = bytes.data();
  for (int64_t r = 0; r < from.rows(); ++r) {
    std::memcpy(const_cast<uint8_t*>(reference::packed_row_data(*to, r)), reference::packed_row_data(from, r),
                kPackedDataBytes);
    std::memcpy(const_cast<uint8_t*>(reference::packed_row_scales(*to, r)), reference::packed_row_scales(from, r),
                kPackedScaleBytes);
  }
  return bytes;
}

// The same rows under page sizes 1, 2, 61, 64, 256 (a different one for
// each segment) with and without a gap, with padded q, out, lse and indices
// strides: bit for bit the same output, and nothing written into the padding
// of out and lse.
TEST(Dsv4PackedLayouts, PageSizesGapsAndStridesMatchThePlainLayout) {
  const uint64_t seed = test::fresh_seed();
  SCOPED_TRACE(test::seed_message(seed));
  std::mt19937_64 rng(seed);
  const Dsv4PackedProblem p = testing::make_dsv4_packed_problem(test::packed_config(seed, 16, 3, 256, 64));
  const Dsv4PackedDecodeArgs plain = p.host_args(nullptr, nullptr);
  const test::HostOutput expected = test::run_packed_host(plain);
  const int64_t T = p.config.tokens;
  const int H = p.config.heads;

  const int64_t page_sizes[] = {1, 2, 61, 64, 256};
  for (int i = 0; i < 5; ++i) {
    for (int64_t gap : {0, 16, 80}) {
      // The extra pool gets another page size: each segment has its own.
      const int64_t swa_page = page_sizes[i], extra_page = page_sizes[(i + 2) % 5];
      SCOPED_TRACE(::testing::Message() << "page sizes " << swa_page << " and " << extra_page << ", gap " << gap);
      Dsv4PackedDecodeArgs args = plain;
      auto stride = [gap](int64_t page_size) { return (page_size * kPackedRowBytes + 15) / 16 * 16 + gap; };
      const std::vector<uint8_t> swa = relayout(plain.swa.pool, swa_page, stride(swa_page), &args.swa.pool);
      const std::vector<uint8_t> extra = relayout(plain.extra.pool, extra_page, stride(extra_page), &args.extra.pool);

      // q with padding (NaN) between heads and tokens.
      args.q_head_stride = kHeadDim + 24;
      args.q_token_stride = H * args.q_head_stride + 40;
      std::vector<uint16_t> q(T * args.q_token_stride, 0x7FC0);
      for (int64_t t = 0; t < T; ++t) {
        for (int h = 0; h < H; ++h) {
          std::copy_n(&p.q[(t * H + h) * kHeadDim], kHeadDim, &q[t * args.q_token_stride + h * args.q_head_stride]);
        }
      }
      args.q = q.data();
      // Indices with garbage padding columns.
      std::vector<int32_t> indices[2];
      for (int which = 0; which < 2; ++which) {
        PackedSegment& segment = which ? args.extra : args.swa;
        const std::vector<int32_t>& src = which ? p.extra_indices : p.swa_indices;
        const int64_t from_stride = segment.indices_stride;
        segment.indices_stride = from_stride + 8;
        indices[which].resize(T * segment.indices_stride);
        for (auto& index : indices[which]) index = static_cast<int32_t>(rng());
        for (int64_t t = 0; t < T; ++t) {
          std::copy_n(&src[t * from_stride], segment.width, &indices[which][t * segment.indices_stride]);
        }
        segment.indices = indices[which].data();
      }
      args.out_head_stride = kHeadDim + 8;
      args.out_token_stride = H * args.out_head_stride + 16;
      args.lse_token_stride = H + 3;
      std::vector<uint16_t> out(T * args.out_token_stride, test::kOutPoison);
      std::vector<float> lse(T * args.lse_token_stride, test::lse_poison());
      int32_t count = test::kCountStart;
      args.out = out.data();
      args.lse = lse.data();
      args.out_of_range_count = &count;
      const Status status = dsv4_decode_packed(args, nullptr, 0, nullptr);
      ASSERT_TRUE(status.ok()) << status.message();

      test::expect_strided_outputs(expected, T, H, out, args.out_token_stride, args.out_head_stride, lse,
                                   args.lse_token_stride, count);
    }
  }
}

// An extra segment whose lens are all 0 (its indices naming NaN rows and
// out-of-range rows) gives bit for bit the SWA-only result and counts nothing.
TEST(Dsv4PackedLayouts, EmptyExtraSegmentEqualsSwaOnly) {
  const uint64_t seed = test::fresh_seed();
  SCOPED_TRACE(test::seed_message(seed));
  std::mt19937_64 rng(seed);
  Dsv4PackedProblem p = testing::make_dsv4_packed_problem(test::packed_config(seed, 32, 5));
  for (auto& index : p.extra_indices) index = rng() % 2 ? INT32_MAX : index;
  std::fill(p.extra_lens.begin(), p.extra_lens.end(), 0);
  const Dsv4PackedDecodeArgs with_extra = p.host_args(nullptr, nullptr);
  Dsv4PackedDecodeArgs swa_only = with_extra;
  swa_only.extra = PackedSegment{};
  const test::HostOutput a = test::run_packed_host(with_extra), b = test::run_packed_host(swa_only);
  EXPECT_TRUE(a.out == b.out);
  EXPECT_EQ(a.lse, b.lse);
  EXPECT_EQ(a.count, test::kCountStart);
  EXPECT_EQ(b.count, test::kCountStart);
  test::check_packed_problem(swa_only);
}

// Scale bytes across the whole range used in practice (2^-20..2^10) plus
// extremes (0, 2, 15, 150, 160): values from 2^-136 to about 2^42 decode and
// attend without overflow or NaN; the pools really hold those bytes.
TEST(Dsv4PackedLayouts, ExtremeScaleBytes) {
  const uint64_t seed = test::fresh_seed();
  SCOPED_TRACE(test::seed_message(seed));
  Dsv4PackedProblemConfig c = test::packed_config(seed, 16, 4);
  c.extreme_fraction = 0.05;
  const Dsv4PackedProblem p = testing::make_dsv4_packed_problem(c);
  const Dsv4PackedDecodeArgs args = p.host_args(nullptr, nullptr);
  test::check_packed_problem(args);
  int lowest = 255, highest = -1;
  for (const PackedSegment* segment : test::packed_segments(args)) {
    for (int64_t t = 0; t < c.tokens; ++t) {
      for (int col = 0; col < segment->width; ++col) {
        const int32_t index = segment->indices[t * segment->indices_stride + col];
        if (index < 0 || col >= segment->lens[t]) continue;
        const uint8_t* scales = reference::packed_row_scales(segment->pool, index);
        for (int k = 0; k < kPackedTiles; ++k) lowest = std::min<int>(lowest, scales[k]);
        for (int k = 0; k < kPackedTiles; ++k) highest = std::max<int>(highest, scales[k]);
      }
    }
  }
  EXPECT_LE(lowest, 2);
  EXPECT_GE(highest, 150);
}

// T = 0 is a valid call that reads and writes nothing, even with null pointers.
TEST(Dsv4PackedLayouts, ZeroTokensWritesNothing) {
  const uint64_t seed = test::fresh_seed();
  SCOPED_TRACE(test::seed_message(seed));
  const Dsv4PackedProblem p = testing::make_dsv4_packed_problem(test::packed_config(seed));
  std::vector<uint16_t> out(16 * kHeadDim, test::kOutPoison);
  std::vector<float> lse(16, 1.5f);
  int32_t count = test::kCountStart;
  Dsv4PackedDecodeArgs args = p.host_args(out.data(), lse.data());
  args.num_tokens = 0;
  args.out_of_range_count = &count;
  EXPECT_TRUE(dsv4_decode_packed(args, nullptr, 0, nullptr).ok());
  Dsv4PackedDecodeArgs bare;
  bare.memory = MemorySpace::kHost;
  bare.swa.width = 128;
  EXPECT_TRUE(dsv4_decode_packed(bare, nullptr, 0, nullptr).ok());
  EXPECT_TRUE(std::all_of(out.begin(), out.end(), [](uint16_t v) { return v == test::kOutPoison; }));
  EXPECT_TRUE(std::all_of(lse.begin(), lse.end(), [](float v) { return v == 1.5f; }));
  EXPECT_EQ(count, test::kCountStart);
  EXPECT_TRUE(reference::dsv4_decode_packed(args).out.empty());
}

}  // namespace
}  // namespace sparse_decode
