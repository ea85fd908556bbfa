// The bench's input modes, on the host: the shared mode's indices are
// pinned, and the distinct mode reads no row twice in a layer
// (windows disjoint, one request a token, top-k rows and pages drawn without
// replacement), with pools sized for it and a refusal naming what fits.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "bench/bench_indices.h"
#include "bench/dsa_layers.h"
#include "support/test_support.h"

namespace sparse_decode::bench {
namespace {

using test::fresh_seed;
using test::seed_message;

uint64_t fnv1a(const std::vector<int32_t>& values) {
  uint64_t hash = 1469598103934665603ull;
  for (int32_t v : values) {
    for (int byte = 0; byte < 4; ++byte) {
      hash ^= (static_cast<uint32_t>(v) >> (8 * byte)) & 0xFFu;
      hash *= 1099511628211ull;
    }
  }
  return hash;
}

BenchShape shape_of(int64_t tokens, int32_t width, BenchMode mode, bool page_aligned = false) {
  BenchShape shape;
  shape.tokens = tokens;
  shape.width = width;
  shape.mode = mode;
  shape.page_aligned_topk = page_aligned;
  return shape;
}

// The shared mode's indices are pinned, so that result files made before and
// after a change of the harness compare. The hashes are those of libstdc++'s
// distributions (the toolchain of the builds).
TEST(BenchIndices, SharedModeIndicesArePinned) {
#if !defined(__GLIBCXX__)
  GTEST_SKIP() << "the pinned hashes are libstdc++'s";
#endif
  struct Pinned {
    int64_t tokens;
    int32_t width;
    bool page_aligned;
    int64_t swa_rows, compressed_rows;
    uint64_t seed, hash;
  };
  const Pinned pinned[] = {
      {1, 640, false, 16384, 393216, 1ull, 0x636bc27f12a349ddull},
      {6, 640, false, 16384, 393216, 7ull, 0x37a722baebba2546ull},
      {12, 128, false, 16384, 393216, 3ull, 0x8edd30910016faa0ull},
      {48, 640, true, 16384, 393216, 5ull, 0x5aa6a0e51f714872ull},
      {128, 2176, false, 131072, 393216, 11ull, 0xec57ec37cc827429ull},
      {2048, 640, false, 131072, 393216, 16218753ull, 0x3801a5e12a88ba1aull},
  };
  for (const Pinned& p : pinned) {
    const BenchShape shape = shape_of(p.tokens, p.width, BenchMode::kShared, p.page_aligned);
    EXPECT_EQ(fnv1a(make_layer_indices(shape, p.swa_rows, p.compressed_rows, p.seed)), p.hash)
        << "T=" << p.tokens << " W=" << p.width << " page_aligned=" << p.page_aligned;
  }
}

// Every row of the layer's indices, checked as the distinct mode promises.
void expect_distinct(const BenchShape& shape, const std::vector<int32_t>& indices, int64_t swa_rows,
                     int64_t compressed_rows) {
  const int64_t T = shape.tokens;
  const int32_t W = shape.width, topk = W - kSwaColumns;
  ASSERT_EQ(indices.size(), static_cast<size_t>(T * W));
  std::vector<uint8_t> swa_seen(static_cast<size_t>(swa_rows), 0);
  std::vector<uint8_t> compressed_seen(static_cast<size_t>(compressed_rows), 0);
  std::set<int64_t> window_starts;
  for (int64_t t = 0; t < T; ++t) {
    const int32_t* row = &indices[static_cast<size_t>(t * W)];
    // One request a token: its window is 128 consecutive rows of its own.
    ASSERT_GE(row[0], 0);
    ASSERT_LE(int64_t{row[0]} + kSwaColumns, swa_rows);
    EXPECT_TRUE(window_starts.insert(row[0]).second) << "token " << t << " shares a window start";
    for (int32_t c = 0; c < kSwaColumns; ++c) {
      ASSERT_EQ(row[c], row[0] + c) << "token " << t << " column " << c;
      ASSERT_EQ(swa_seen[static_cast<size_t>(row[c])]++, 0)
          << "SWA row " << row[c] << " read twice (token " << t << ")";
    }
    for (int32_t k = 0; k < topk; ++k) {
      const int32_t r = row[kSwaColumns + k];
      ASSERT_GE(r, 0);
      ASSERT_LT(r, compressed_rows);
      ASSERT_EQ(compressed_seen[static_cast<size_t>(r)]++, 0)
          << "top-k row " << r << " read twice (token " << t << ")";
      if (shape.page_aligned_topk) {
        // Whole pages, each page's rows in order.
        const int32_t first = row[kSwaColumns + k / kBenchPageSize * kBenchPageSize];
        ASSERT_EQ(first % kBenchPageSize, 0) << "token " << t << " page of column " << kSwaColumns + k;
        ASSERT_EQ(r, first + k % kBenchPageSize);
      }
    }
  }
}

TEST(BenchIndices, DistinctModeReadsNoRowTwiceInALayer) {
  const uint64_t seed = fresh_seed();
  SCOPED_TRACE(seed_message(seed));
  for (int64_t tokens : {1, 6, 7, 48, 512}) {
    for (int32_t width : {128, 132, 640, 2176}) {
      const RegionRows rows = distinct_region_rows({tokens}, {width});
      const BenchShape shape = shape_of(tokens, width, BenchMode::kDistinct);
      SCOPED_TRACE("T=" + std::to_string(tokens) + " W=" + std::to_string(width));
      // Exactly the rows needed (rounded to pages), and a region 3x larger.
      for (int64_t scale : {1, 3}) {
        const std::vector<int32_t> indices =
            make_layer_indices(shape, rows.swa * scale, std::max<int64_t>(rows.compressed * scale, 1), seed + tokens);
        expect_distinct(shape, indices, rows.swa * scale, std::max<int64_t>(rows.compressed * scale, 1));
      }
    }
  }
}

TEST(BenchIndices, DistinctModeDrawsWholePagesOnceForHca) {
  const uint64_t seed = fresh_seed();
  SCOPED_TRACE(seed_message(seed));
  for (int64_t tokens : {1, 6, 128}) {
    for (int32_t width : {192, 640, 2176}) {
      const RegionRows rows = distinct_region_rows({tokens}, {width});
      const BenchShape shape = shape_of(tokens, width, BenchMode::kDistinct, true);
      SCOPED_TRACE("T=" + std::to_string(tokens) + " W=" + std::to_string(width));
      expect_distinct(shape, make_layer_indices(shape, rows.swa, rows.compressed, seed), rows.swa, rows.compressed);
    }
  }
}

// The largest shape of DESIGN.md with 8 layers fits: every row of the
// region read exactly once, and the pools those rows need.
TEST(BenchIndices, DistinctModeFitsTheLargestShape) {
  const RegionRows rows = distinct_region_rows({1, 6, 2048}, {640, 2176, 128});
  EXPECT_EQ(rows.swa, 2048 * 128);
  EXPECT_EQ(rows.compressed, 2048 * 2048);
  const BenchShape shape = shape_of(2048, 2176, BenchMode::kDistinct);
  const uint64_t seed = fresh_seed();
  SCOPED_TRACE(seed_message(seed));
  const std::vector<int32_t> indices = make_layer_indices(shape, rows.swa, rows.compressed, seed);
  expect_distinct(shape, indices, rows.swa, rows.compressed);

  const PoolBytes defaults{512ull << 20, 1536ull << 20};
  const PoolBytes fp8 = pool_bytes_for(BenchMode::kDistinct, {2048}, {2176}, 8, 512, defaults);
  EXPECT_EQ(fp8.swa, 1ull << 30);
  EXPECT_EQ(fp8.compressed, 16ull << 30);
  const PoolBytes packed = pool_bytes_for(BenchMode::kDistinct, {2048}, {2176}, 8, 584, defaults);
  EXPECT_EQ(packed.compressed, 8ull * 2048 * 2048 * 584);
  // Small shapes keep at least the default pools; the shared mode always does.
  const PoolBytes small = pool_bytes_for(BenchMode::kDistinct, {1, 6}, {640}, 8, 512, defaults);
  EXPECT_EQ(small.swa, defaults.swa);
  EXPECT_EQ(small.compressed, defaults.compressed);
  const PoolBytes shared = pool_bytes_for(BenchMode::kShared, {2048}, {2176}, 8, 512, defaults);
  EXPECT_EQ(shared.swa, defaults.swa);
  EXPECT_EQ(shared.compressed, defaults.compressed);
}

TEST(BenchIndices, DistinctModeIsAFunctionOfTheSeed) {
  const BenchShape shape = shape_of(48, 640, BenchMode::kDistinct);
  const RegionRows rows = distinct_region_rows({48}, {640});
  const uint64_t seed = fresh_seed();
  SCOPED_TRACE(seed_message(seed));
  const std::vector<int32_t> a = make_layer_indices(shape, rows.swa * 2, rows.compressed * 2, seed);
  EXPECT_EQ(a, make_layer_indices(shape, rows.swa * 2, rows.compressed * 2, seed));
  EXPECT_NE(a, make_layer_indices(shape, rows.swa * 2, rows.compressed * 2, seed + 1));
}

TEST(BenchIndices, DistinctModeRefusesRegionsTooSmall) {
  const BenchShape shape = shape_of(48, 640, BenchMode::kDistinct);
  const RegionRows rows = distinct_region_rows({48}, {640});
  try {
    make_layer_indices(shape, rows.swa, rows.compressed - 1, 1);
    ADD_FAILURE() << "a compressed region one row short was accepted";
  } catch (const std::runtime_error& error) {
    EXPECT_NE(std::string(error.what()).find("fewer than T x (W - 128) = 24576"), std::string::npos) << error.what();
  }
  try {
    make_layer_indices(shape, rows.swa - 1, rows.compressed, 1);
    ADD_FAILURE() << "an SWA region one row short was accepted";
  } catch (const std::runtime_error& error) {
    EXPECT_NE(std::string(error.what()).find("fewer than T x 128 = 6144"), std::string::npos) << error.what();
  }
}

// A run that does not fit is refused with the largest T that does, and that T fits.
TEST(BenchIndices, DistinctFitNamesTheLargestShapeThatFits) {
  const PoolBytes defaults{512ull << 20, 1536ull << 20};
  const std::vector<int32_t> heads = {16, 128};
  const size_t available = 60ull << 30;
  EXPECT_EQ(distinct_fit_problem({1, 2048}, {640, 2176}, heads, 8, 512, 1, defaults, available), "");
  const std::string problem = distinct_fit_problem({1, 8192}, {640, 2176}, heads, 8, 512, 1, defaults, available);
  ASSERT_NE(problem.find("--mode distinct: T = 8192 at width 2176 with 8 layers needs"), std::string::npos) << problem;
  const size_t at = problem.find("T <= ");
  ASSERT_NE(at, std::string::npos) << problem;
  const int64_t largest = std::strtoll(problem.c_str() + at + 5, nullptr, 10);
  EXPECT_GT(largest, 2048);
  EXPECT_LT(largest, 8192);
  EXPECT_EQ(distinct_fit_problem({largest}, {2176}, heads, 8, 512, 1, defaults, available), "");
  EXPECT_NE(distinct_fit_problem({largest + 1}, {2176}, heads, 8, 512, 1, defaults, available), "");
  EXPECT_NE(distinct_fit_problem({1}, {640}, heads, 8, 512, 1, defaults, 1ull << 30).find("no T fits"),
            std::string::npos);
}

// A DSA table shape of the tests below: T, G, block, R in `mode`.
struct DsaCase {
  int64_t tokens;
  int32_t groups, block, regions;
};

DsaBenchShape dsa_case_shape(const DsaCase& c, BenchMode mode) {
  DsaBenchShape shape;
  shape.tokens = c.tokens;
  shape.groups = c.groups;
  shape.block_size = c.block;
  shape.regions = c.regions;
  shape.mode = mode;
  return shape;
}

std::string dsa_case_name(const DsaCase& c) {
  return "T=" + std::to_string(c.tokens) + " G=" + std::to_string(c.groups) + " block=" + std::to_string(c.block) +
         " R=" + std::to_string(c.regions);
}

// DSA's tables with the pages the bench sizes its cache for: no (page,
// group) slot range is read by two rows, and no page is named by two
// requests, so no key is read twice in a layer.
TEST(BenchIndices, DsaTablesGiveEveryRequestItsOwnPages) {
  const uint64_t seed = fresh_seed();
  SCOPED_TRACE(seed_message(seed));
  for (const DsaCase& c : {DsaCase{1, 1, 64, 16}, DsaCase{48, 1, 64, 16}, DsaCase{12, 4, 64, 16},
                           DsaCase{7, 2, 16, 64}, DsaCase{6, 8, 256, 8}}) {
    const DsaBenchShape shape = dsa_case_shape(c, BenchMode::kDistinct);
    SCOPED_TRACE(dsa_case_name(c));
    const int64_t pages = shape.pages_wanted_per_layer();
    const DsaTables tables = make_dsa_tables(shape, pages, seed);
    const int32_t max_blocks = shape.max_blocks();
    std::set<std::pair<int32_t, int32_t>> slots;  // (page, group) read
    std::vector<int64_t> request_of_page(static_cast<size_t>(pages), -1);
    for (int64_t row = 0; row < shape.rows(); ++row) {
      const int64_t request = row / c.groups;  // query_len 1
      const int32_t group = static_cast<int32_t>(row % c.groups);
      std::set<int32_t> blocks;
      for (int32_t r = 0; r < c.regions; ++r) {
        const int32_t block = tables.regions[static_cast<size_t>(row * c.regions + r)];
        ASSERT_GE(block, 0);
        ASSERT_LT(block, max_blocks);
        EXPECT_TRUE(blocks.insert(block).second) << "row " << row << " names block " << block << " twice";
        const int32_t page = tables.block_table[static_cast<size_t>(request * max_blocks + block)];
        ASSERT_GE(page, 0);
        ASSERT_LT(page, pages);
        EXPECT_TRUE(slots.insert({page, group}).second) << "page " << page << " group " << group << " read twice";
        int64_t& owner = request_of_page[static_cast<size_t>(page)];
        EXPECT_TRUE(owner == -1 || owner == request) << "page " << page << " named by requests " << owner << " and "
                                                     << request;
        owner = request;
      }
    }
    EXPECT_EQ(tables.visible_keys, shape.rows() * c.regions * c.block);
  }
}

// The shared mode: runs of kBenchQueryLen tokens share one block table
// (the same page for every block) and their regions slide: token i of a run
// reads blocks i .. i + R - 1 of its group's R + n - 1 distinct blocks (n
// tokens in the run; at most max_blocks: the shift stops there). A run of
// one token draws exactly R blocks a group, as the distinct mode does.
TEST(BenchIndices, DsaSharedTablesSlideOverOneTableARun) {
  const uint64_t seed = fresh_seed();
  SCOPED_TRACE(seed_message(seed));
  for (const DsaCase& c : {DsaCase{1, 1, 64, 16}, DsaCase{12, 1, 64, 16}, DsaCase{13, 4, 64, 16},
                           DsaCase{7, 2, 16, 64}, DsaCase{6, 1, 4096, 4}}) {
    const DsaBenchShape shape = dsa_case_shape(c, BenchMode::kShared);
    SCOPED_TRACE(dsa_case_name(c));
    const int64_t pages = shape.pages_wanted_per_layer();
    const DsaTables tables = make_dsa_tables(shape, pages, seed);
    const int32_t max_blocks = shape.max_blocks();
    const int32_t R = c.regions;
    std::set<int32_t> read_pages;
    for (int64_t t = 0; t < c.tokens; ++t) {
      const int64_t first = t / kBenchQueryLen * kBenchQueryLen, i = t - first;
      const int64_t n = std::min<int64_t>(kBenchQueryLen, c.tokens - first);
      const int32_t span = static_cast<int32_t>(std::min<int64_t>(R + n - 1, max_blocks));
      const int32_t shift = static_cast<int32_t>(std::min<int64_t>(i, span - R));
      for (int32_t b = 0; b < max_blocks; ++b) {
        ASSERT_EQ(tables.block_table[static_cast<size_t>(t * max_blocks + b)],
                  tables.block_table[static_cast<size_t>(first * max_blocks + b)])
            << "token " << t << " block " << b << ": not its run's table";
      }
      for (int32_t g = 0; g < c.groups; ++g) {
        const int64_t row = t * c.groups + g, run_row = first * c.groups + g;
        std::set<int32_t> blocks;
        for (int32_t r = 0; r < R; ++r) {
          const int32_t block = tables.regions[static_cast<size_t>(row * R + r)];
          ASSERT_GE(block, 0);
          ASSERT_LT(block, max_blocks);
          EXPECT_TRUE(blocks.insert(block).second) << "row " << row << " names block " << block << " twice";
          read_pages.insert(tables.block_table[static_cast<size_t>(t * max_blocks + block)]);
          if (r + shift < R) {  // within the run's first token's regions: the same block, shifted
            EXPECT_EQ(block, tables.regions[static_cast<size_t>(run_row * R + r + shift)]) << "row " << row;
          }
        }
      }
    }
    EXPECT_EQ(tables.visible_keys, shape.rows() * R * c.block);
    EXPECT_EQ(tables.distinct_pages, static_cast<int64_t>(read_pages.size()));
  }
}

// A run of one token is the distinct mode's draw: the shared mode at T = 1
// gives the distinct mode's tables.
TEST(BenchIndices, DsaSharedModeOfOneTokenIsTheDistinctDraw) {
  const uint64_t seed = fresh_seed();
  SCOPED_TRACE(seed_message(seed));
  DsaBenchShape shape;
  shape.tokens = 1;
  shape.groups = 2;
  const DsaTables distinct = make_dsa_tables(shape, shape.pages_wanted_per_layer(), seed);
  shape.mode = BenchMode::kShared;
  const DsaTables shared = make_dsa_tables(shape, shape.pages_wanted_per_layer(), seed);
  EXPECT_EQ(distinct.block_table, shared.block_table);
  EXPECT_EQ(distinct.regions, shared.regions);
}

}  // namespace
}  // namespace sparse_decode::bench
