// Synthetic DeepSeek-V4 HCA decode problems (SPEC section 3) on the host, for
// the tests: FP8 q and pools, a ring-buffer sliding window per request, and a
// compressed stream read through a shuffled block table.
//
// What makes them hard:
// - Each request has its own backing slot count (hca_seq_lens) and pages;
//   its tokens attend different prefixes of it (lens), some none (lens
//   below 128), some asking for more than it backs (lens past the footprint).
// - swa_lens cover 0..128; the window wraps around the SWA pool's live rows.
// - Table entries a token never needs, and window columns past swa_lens,
//   hold garbage: -1, rows or pages past the pool, or NaN rows.
// - Every pool row that no active column or slot names holds NaN (E4M3
//   0x7F), and so do the gaps between pages.
#pragma once

#include <cstdint>
#include <vector>

#include "sparse_decode/dsv4_decode.h"
#include "sparse_decode/dsv4_decode_hca.h"

namespace sparse_decode::testing {

struct Dsv4HcaProblemConfig {
  int64_t tokens = 6;              // T
  int32_t heads = 16;              // H
  int32_t q_len = 3;               // query tokens per request (uniform: T % q_len == 0)
  bool varlen = false;             // cum_seq_lens_q with lengths 1..q_len instead (T = their sum)
  int64_t page_size = 64;          // slots per page of the compressed pool
  int32_t max_pages = 4;           // pages of a block table row
  int64_t compressed_pages = 32;   // pages of the compressed pool, >= max_pages (the last quarter never active)
  int64_t swa_rows = 512;          // rows of the SWA pool (the last quarter never active)
  int64_t swa_page_size = 16;      // rows per page of the SWA pool
  int64_t page_gap = 0;            // elements between pages past page_size * 512 (a multiple of 16)
  double short_window = 0.5;       // tokens whose swa_lens is drawn in 0..128 instead of 128
  double odd_lens = 0.2;           // tokens whose lens is below 128 or past the footprint
  double hole_fraction = 0.0;      // active window rows and needed pages set to -1
  bool sinks = true;               // draw sinks [H] from N(0, 1)
  uint64_t seed = 1;
};

struct Dsv4HcaProblem {
  Dsv4HcaProblemConfig config;
  int32_t num_requests = 0;
  std::vector<uint8_t> q;               // [T, H, 512] FP8, contiguous
  std::vector<uint8_t> swa_kv;          // SWA pool bytes
  std::vector<uint8_t> compressed_kv;   // compressed pool bytes
  std::vector<int32_t> swa_rows;        // [T, 128]
  std::vector<int32_t> swa_lens;        // [T]
  std::vector<int32_t> block_table;     // [T, max_pages]
  std::vector<int32_t> lens;            // [T]
  std::vector<int32_t> hca_seq_lens;    // [B]
  std::vector<int32_t> cum_seq_lens_q;  // [B + 1] (empty unless varlen)
  std::vector<float> sinks;             // [H] (empty when config.sinks is false)
  float bmm1_scale = 0.0f;
  float bmm2_scale = 1.0f;

  int64_t swa_page_stride() const { return config.swa_page_size * kHeadDim + config.page_gap; }
  int64_t compressed_page_stride() const { return config.page_size * kHeadDim + config.page_gap; }
  KvPool swa_pool() const;
  KvPool compressed_pool() const;

  // Arguments over this problem's host vectors; out [T, H, 512] BF16 and lse
  // [T, H] (may be null) are contiguous buffers of the caller.
  Dsv4HcaDecodeArgs host_args(void* out, float* lse) const;

  // Fills row `row` of a pool with fresh random values (tests that make a
  // masked row active, or that need it live).
  void fill_row(bool compressed, int64_t row, uint64_t seed);

  // Edge-case mutators of the tests (CPU and GPU), from `seed`:
  // every swa_lens = window, and the columns it makes active name live rows
  // (those that named none get a random row), filled afresh;
  void set_window(int32_t window, uint64_t seed);
  // every table entry a page of the pool (those that named none get a random
  // one), all of their rows filled afresh, so that the bounds alone decide.
  void make_table_live(uint64_t seed);
};

Dsv4HcaProblem make_dsv4_hca_problem(const Dsv4HcaProblemConfig& config);

// The section-1 table that names the same rows in the same order: window
// columns c < swa_lens as they are (-1 past it), then the canonical expansion
// page * page_size + j % page_size of the compressed slots the token attends
// (-1 for a negative page, an index past the pool for a page past it, -1
// past the slots); lens = 128 + slots; no seq_lens. Written independently
// of the reference, from SPEC section 3.
struct Dsv4HcaExpansion {
  std::vector<int32_t> indices;  // [T, width]
  std::vector<int32_t> lens;     // [T]
  int32_t width = 0;             // 128 + max_pages * page_size, rounded up to a multiple of 4

  // Section-1 arguments over the problem's q, pools, sinks and scales.
  Dsv4DecodeArgs args(const Dsv4HcaProblem& problem, void* out, float* lse) const;
};
Dsv4HcaExpansion expand_to_section1(const Dsv4HcaProblem& problem);

}  // namespace sparse_decode::testing
