// The rules of convert_page_aligned_indices, host and device alike: the CPU
// conversion (convert.cpp) and the device kernels (convert_kernel.cu) check
// and write every token with these functions, so that the two agree bit for
// bit. docs/formats/hca_layout.md, "The converter".
#pragma once

#include <cstdint>

#include "common/host_device.h"
#include "sparse_decode/dsv4_hca_convert.h"

namespace sparse_decode::dsv4_hca {

// FlashInfer's HCA tiles: the compressed slots of a request are scheduled in
// tiles of 128, and page sizes divide a tile.
inline constexpr int64_t kHcaTileSlots = 128;

// Threads of a converter CTA (one token at a time).
inline constexpr int kConvertThreads = 128;

// The converter's arguments, by value (validated; device or host pointers).
struct ConvertParams {
  const int32_t* indices;         // [T, indices_stride]
  int64_t indices_stride;
  int32_t width;                  // W
  const int32_t* lens;            // [T]
  const int32_t* seq_lens;        // [B]
  int32_t q_len;
  int32_t page_size;              // 2..128, divides 128
  int64_t swa_pool_rows;
  int64_t compressed_pool_pages;
  int32_t* swa_rows;              // [T, swa_rows_stride]
  int64_t swa_rows_stride;
  int32_t* swa_lens;              // [T]
  int32_t* block_table;           // [T, block_table_stride]
  int64_t block_table_stride;
  int32_t max_pages;
  int32_t* hca_seq_lens;          // [B]
  int32_t* error;                 // [kConvertErrorWords]
  int64_t num_tokens;             // T
};

// A page size FlashInfer's conversion accepts: 2..128, dividing 128.
SPARSE_DECODE_HD bool convert_page_size_ok(int64_t page_size) {
  return page_size > 1 && page_size <= kHcaTileSlots && kHcaTileSlots % page_size == 0;
}

// Compressed slots that back a sequence of `seq_len` positions (a token that
// sees `seq_len` positions attends all of them): floor(seq_len / 128).
SPARSE_DECODE_HD int64_t compressed_slots_of(int64_t seq_len) { return seq_len > 0 ? seq_len / 128 : 0; }

// Block-table columns for a sequence of `seq_len` positions: its slots in
// whole 128-slot tiles, in pages, at least 1 (valid page size).
SPARSE_DECODE_HD int64_t pages_for(int64_t seq_len, int64_t page_size) {
  const int64_t tiles = (compressed_slots_of(seq_len) + kHcaTileSlots - 1) / kHcaTileSlots;
  const int64_t pages = tiles * (kHcaTileSlots / page_size);
  return pages > 1 ? pages : 1;
}

// Floor division, as FlashInfer's checks compute it (a negative index lies
// in a negative page).
SPARSE_DECODE_HD int64_t floor_div(int64_t value, int64_t divisor) {
  const int64_t q = value / divisor;
  return (value % divisor != 0 && value < 0) ? q - 1 : q;
}

// What one token is: its request, how many positions it sees, its window
// columns and compressed slots, and the slots its table row can hold.
struct TokenShape {
  int32_t request;
  int64_t visible;     // seq_lens[b] - q_len + i + 1
  int32_t window;      // min(max(visible, 0), 128)
  int64_t slots;       // n = floor(visible / 128) (0 when visible < 128)
  int64_t read_slots;  // min(n, W - 128): the columns the checks read
};

SPARSE_DECODE_HD TokenShape token_shape(const ConvertParams& p, int64_t t) {
  TokenShape s;
  s.request = static_cast<int32_t>(t / p.q_len);
  s.visible = int64_t{p.seq_lens[s.request]} - p.q_len + t % p.q_len + 1;
  s.window = static_cast<int32_t>(s.visible < 0 ? 0 : s.visible < kSwaColumns ? s.visible : kSwaColumns);
  s.slots = compressed_slots_of(s.visible);
  const int64_t capacity = int64_t{p.width} - kSwaColumns;
  s.read_slots = s.slots < capacity ? s.slots : capacity;
  return s;
}

// The rules a token breaks are folded to the first: kNone, or the smallest code.
SPARSE_DECODE_HD int32_t first_rule(int32_t a, int32_t b) {
  if (a == 0) return b;
  if (b == 0) return a;
  return a < b ? a : b;
}

// The rules of the token's scalars (seq_lens, width, lens, max_pages).
SPARSE_DECODE_HD int32_t scalar_rule(const ConvertParams& p, int64_t t, const TokenShape& s) {
  using R = Dsv4HcaConvertRule;
  if (s.visible < 1) return static_cast<int32_t>(R::kSeqLens);
  const int64_t columns = kSwaColumns + s.slots;
  if (columns > p.width) return static_cast<int32_t>(R::kWidth);
  if (int64_t{p.lens[t]} != columns) return static_cast<int32_t>(R::kLens);
  if (pages_for(p.seq_lens[s.request], p.page_size) > p.max_pages) return static_cast<int32_t>(R::kMaxPages);
  return 0;
}

// Window column c (< s.window) of the token's table row `row`.
SPARSE_DECODE_HD int32_t window_rule(const ConvertParams& p, const int32_t* row, int32_t c) {
  const int32_t value = row[c];
  return value < 0 || value >= p.swa_pool_rows ? static_cast<int32_t>(Dsv4HcaConvertRule::kWindowRow) : 0;
}

// Compressed slot j (< s.read_slots) of the token's table row `row`: a page's
// first slot names a page of the pool; every slot is the canonical
// expansion of its page's first slot.
SPARSE_DECODE_HD int32_t slot_rule(const ConvertParams& p, const int32_t* row, int64_t j) {
  const int64_t offset = j % p.page_size;
  const int64_t value = row[kSwaColumns + j];
  const int64_t page = floor_div(row[kSwaColumns + j - offset], p.page_size);
  int32_t rule = 0;
  if (offset == 0 && (page < 0 || page >= p.compressed_pool_pages)) {
    rule = static_cast<int32_t>(Dsv4HcaConvertRule::kPage);
  }
  if (value != page * p.page_size + offset) {
    rule = first_rule(rule, static_cast<int32_t>(Dsv4HcaConvertRule::kNotCanonical));
  }
  return rule;
}

// The outputs of a token that breaks no rule.
SPARSE_DECODE_HD int32_t swa_row_out(const int32_t* row, const TokenShape& s, int32_t c) {
  return c < s.window ? row[c] : 0;
}
SPARSE_DECODE_HD int32_t page_out(const ConvertParams& p, const int32_t* row, const TokenShape& s, int64_t k) {
  const int64_t slot = k * p.page_size;
  return slot < s.slots ? row[kSwaColumns + slot] / p.page_size : 0;
}
SPARSE_DECODE_HD int32_t hca_seq_len_out(int32_t seq_len) {
  return static_cast<int32_t>(kSwaColumns + compressed_slots_of(seq_len));
}

}  // namespace sparse_decode::dsv4_hca
