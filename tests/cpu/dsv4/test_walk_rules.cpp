// The stream kernels' walk length (src/dsv4/walk_rules.h) over every width's
// chunk plan: it covers every active chunk, ends on a column group's end
// (or the token's last chunk), and skips only wholly masked groups. The
// kernels' bits against the split and cluster kernels, which walk every
// chunk, are tested on the GPU (tests/gpu/dsv4/test_invariance.cpp).
#include <gtest/gtest.h>

#include <climits>
#include <cstdint>

#include "dsv4/dispatch.h"
#include "dsv4/walk_rules.h"

namespace sparse_decode::dsv4 {
namespace {

TEST(WalkRules, WholeGroupsUpToTheLastActiveChunk) {
  for (int32_t width = 128; width <= 16512; width += 4) {
    const ChunkPlan plan = chunk_plan(width);
    for (int32_t len : {INT_MIN, -1, 0, 1, 63, 64, 65, 127, 128, 129, width / 2, width - 64, width - 1, width,
                        width + 1, INT_MAX}) {
      const int32_t walked = walked_chunk_count(len, plan.chunks, plan.chunks_per_group);
      const int64_t active = len < 1 ? 1 : len < width ? len : width;
      const int64_t needed = (active + 63) / 64;  // chunks holding an active column (at least one)
      SCOPED_TRACE("W " + std::to_string(width) + ", len " + std::to_string(len));
      ASSERT_GE(walked, needed);
      ASSERT_LE(walked, plan.chunks);
      ASSERT_TRUE(walked == plan.chunks || walked % plan.chunks_per_group == 0) << walked;
      ASSERT_LT(walked - needed, plan.chunks_per_group);  // no wholly masked group walked
    }
  }
}

TEST(WalkRules, Examples) {
  EXPECT_EQ(walked_chunk_count(128, 3, 1), 2);      // HCA's W' = 192 with no compressed slot
  EXPECT_EQ(walked_chunk_count(0, 10, 1), 1);       // nothing active: one chunk, so that the walk starts
  EXPECT_EQ(walked_chunk_count(1025, 18, 2), 18);   // W 1152: chunk 16 ends with group 8 (chunks 16, 17)
  EXPECT_EQ(walked_chunk_count(1024, 18, 2), 16);
  EXPECT_EQ(walked_chunk_count(2100, 34, 3), 33);   // W 2176: 33 chunks, 11 groups of 3
  EXPECT_EQ(walked_chunk_count(2176, 34, 3), 34);   // the last group holds one chunk
  EXPECT_EQ(walked_chunk_count(INT_MAX, 258, 17), 258);
}

}  // namespace
}  // namespace sparse_decode::dsv4
