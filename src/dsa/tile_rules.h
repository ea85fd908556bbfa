// The KV tiles of a split's walk (docs/kernels/dsa.md, "Regions sharing a
// KV tile"): which region columns and slots a tile's 64 keys hold, the
// tile after a tile, whether a key holds a visible slot. The kernels and
// the CPU tests (tests/cpu/dsa/test_tile_rules.cpp) run these rules; a
// table is anything with `column_count[c]`, the visible slots of the
// batch's region column c (0: nothing to read).
#pragma once

#include "common/host_device.h"

namespace sparse_decode::dsa {

inline constexpr int kTileKeys = 64;  // keys a KV tile

// How a region's slots map to a KV tile's keys, as a shift: regions of a
// power of two of at most 32 slots share a tile, 64 >> shift regions of
// 2^shift keys each (block 16: four regions a tile instead of a quarter-full
// tile each); larger regions, or other block sizes, fill tiles alone
// (kRegionAlone: up to 64 slots of one region a tile).
inline constexpr int kRegionAlone = 6;
constexpr int region_key_shift(int block_size) {
  int shift = 0;
  while (shift < 5 && (1 << shift) < block_size) ++shift;
  return (1 << shift) == block_size ? shift : kRegionAlone;
}
static_assert(kTileKeys == 1 << kRegionAlone, "kRegionAlone: one region's 64 keys");
static_assert(region_key_shift(16) == 4 && region_key_shift(1) == 0 && region_key_shift(32) == 5 &&
                  region_key_shift(64) == kRegionAlone && region_key_shift(24) == kRegionAlone,
              "powers of two up to 32 share a tile");

// A position in the split's walk: region column `column` of the batch and
// its slots from `first` (first >= count: past the batch's last tile). The
// tile there holds, with `shift` region_key_shift(block_size) (the
// kernels' instances with regions sharing tiles read it from
// p.region_shift, the others take the constant kRegionAlone), up to 64
// slots of that column from `first` (kRegionAlone), or the slots of columns
// column .. column + (64 >> shift) - 1, key k being slot k & (2^shift - 1)
// of column column + (k >> shift) (first = 0).
struct TileCursor {
  int column;
  int first;
};

// The first tile at or after (column, first) of the batch's `columns`.
template <class Table>
SPARSE_DECODE_HD TileCursor seek_tile(const Table& s, int columns, TileCursor at) {
  while (at.column < columns && at.first >= s.column_count[at.column]) at = {at.column + 1, 0};
  return at;
}

// The tile after `tile`.
template <class Table>
SPARSE_DECODE_HD TileCursor next_tile(const Table& s, int shift, int columns, TileCursor tile) {
  return seek_tile(s, columns,
                   shift == kRegionAlone ? TileCursor{tile.column, tile.first + kTileKeys}
                                         : TileCursor{tile.column + (kTileKeys >> shift), 0});
}

// Whether key `key` of the tile holds a visible slot.
template <class Table>
SPARSE_DECODE_HD bool key_visible(const Table& s, int shift, int columns, TileCursor tile, int key) {
  const int column = tile.column + (key >> shift);
  const int slot = tile.first + (key & ((1 << shift) - 1));
  return column < columns && slot < s.column_count[column];
}

// Whether key `key` of the tile holds a visible slot, as the masks take
// it: in a tile of one region, the keys below its count from `first`.
template <class Table>
struct VisibleKeys {
  const Table& s;
  int shift;
  int columns;
  TileCursor tile;
  int n;  // kRegionAlone: the tile's visible keys
  SPARSE_DECODE_HD bool operator()(int key) const {
    return shift == kRegionAlone ? key < n : key_visible(s, shift, columns, tile, key);
  }
};

template <class Table>
SPARSE_DECODE_HD VisibleKeys<Table> visible_keys(const Table& s, int shift, int columns, TileCursor tile) {
  int n = 0;
  if (shift == kRegionAlone) {
    const int left = s.column_count[tile.column] - tile.first;
    n = left < kTileKeys ? left : kTileKeys;
  }
  return {s, shift, columns, tile, n};
}

}  // namespace sparse_decode::dsa
