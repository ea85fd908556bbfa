// The KV-tile walk of the dsa_decode kernels (src/dsa/tile_rules.h) over
// random column tables: every visible slot of a batch's region columns is
// some tile's key exactly once, no key outside them is visible, each tile's
// first key is visible (the copies' zero fills point there), and the masks'
// VisibleKeys agree with key_visible. Batches of kColumnBatch columns as
// the kernels walk them, so tiles that regions share meet a batch's end.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <map>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "dsa/tile_rules.h"
#include "dsa/traits.cuh"

namespace sparse_decode::dsa {
namespace {

struct Table {
  int32_t column_count[TileTraits::kColumnBatch];
};

TEST(DsaTileRules, PowersOfTwoUpTo32ShareATile) {
  for (int block = 1; block <= 4096; ++block) {
    const int shift = region_key_shift(block);
    const bool power_of_two = (block & (block - 1)) == 0;
    if (power_of_two && block <= 32) {
      EXPECT_EQ(1 << shift, block) << block;
    } else {
      EXPECT_EQ(shift, kRegionAlone) << block;
    }
  }
}

// Walks one batch of `columns` columns; returns how many keys cover each (column, slot).
std::map<std::pair<int, int>, int> walk(const Table& t, int shift, int columns, std::string& error) {
  std::map<std::pair<int, int>, int> covered;
  for (TileCursor tile = seek_tile(t, columns, {0, 0}); tile.column < columns;
       tile = next_tile(t, shift, columns, tile)) {
    if (!key_visible(t, shift, columns, tile, 0)) error = "a tile's first key is not visible";
    const VisibleKeys<Table> visible = visible_keys(t, shift, columns, tile);
    for (int key = 0; key < kTileKeys; ++key) {
      const bool v = key_visible(t, shift, columns, tile, key);
      if (visible(key) != v) error = "VisibleKeys differs from key_visible at key " + std::to_string(key);
      if (!v) continue;
      const int column = tile.column + (key >> shift);
      const int slot = tile.first + (key & ((1 << shift) - 1));
      ++covered[{column, slot}];
    }
  }
  return covered;
}

TEST(DsaTileRules, EveryVisibleSlotOnceAcrossBatches) {
  std::mt19937_64 rng(20261204);
  for (int trial = 0; trial < 3000; ++trial) {
    const int block_choices[] = {1, 2, 4, 8, 16, 32, 3, 24, 64, 100, 128, 300};
    const int block = block_choices[rng() % 12];
    const int shift = region_key_shift(block);
    const int split_columns = 1 + static_cast<int>(rng() % 700);
    const double empty = (rng() % 4) / 4.0;  // masked ids, invisible blocks
    SCOPED_TRACE("trial " + std::to_string(trial) + ", block " + std::to_string(block) + ", columns " +
                 std::to_string(split_columns));
    for (int batch0 = 0; batch0 < split_columns; batch0 += TileTraits::kColumnBatch) {
      const int columns = std::min(split_columns - batch0, TileTraits::kColumnBatch);
      Table t;
      for (int c = 0; c < TileTraits::kColumnBatch; ++c) {
        // Past `columns` the table holds what an earlier batch left: never read as visible.
        const bool live = std::uniform_real_distribution<double>(0, 1)(rng) >= empty;
        t.column_count[c] = live ? 1 + static_cast<int>(rng() % block) : 0;
        if (c >= columns) t.column_count[c] = 1 + static_cast<int>(rng() % block);
      }
      std::string error;
      const std::map<std::pair<int, int>, int> covered = walk(t, shift, columns, error);
      ASSERT_TRUE(error.empty()) << error;
      int64_t visible = 0;
      for (int c = 0; c < columns; ++c) visible += t.column_count[c];
      ASSERT_EQ(static_cast<int64_t>(covered.size()), visible);
      for (const auto& [where, count] : covered) {
        ASSERT_EQ(count, 1) << "column " << where.first << " slot " << where.second;
        ASSERT_LT(where.first, columns);
        ASSERT_LT(where.second, t.column_count[where.first]);
      }
    }
  }
}

}  // namespace
}  // namespace sparse_decode::dsa
