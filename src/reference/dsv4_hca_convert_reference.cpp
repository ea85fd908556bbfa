// FlashInfer's conversion as its documentation and tests state it: a mask
// per check over all tokens, in FlashInfer's order, then the outputs with
// FlashInfer's padding (0). Python's floor division and remainder.
#include "reference/dsv4_hca_convert_reference.h"

#include <algorithm>
#include <cstdint>
#include <vector>

namespace sparse_decode::reference {
namespace {

constexpr int64_t kWindow = 128;  // window columns, and slots of an HCA tile

int64_t py_div(int64_t a, int64_t b) { return a / b - ((a % b != 0) && ((a < 0) != (b < 0)) ? 1 : 0); }
int64_t py_mod(int64_t a, int64_t b) { return a - py_div(a, b) * b; }

// FlashInfer's compressed table width for a batch whose longest backing is
// `max_slots` compressed slots: whole tiles of 128 slots, in pages, at least 1.
int64_t table_columns(int64_t max_slots, int64_t page_size) {
  const int64_t tiles = (max_slots + kWindow - 1) / kWindow;
  return std::max<int64_t>(1, tiles * (kWindow / page_size));
}

}  // namespace

ConvertOutput convert_reference(const ConvertInput& in) {
  const int64_t B = static_cast<int64_t>(in.seq_lens.size());
  const int64_t Q = in.q_len;
  const int64_t T = B * Q;
  const int64_t ps = in.page_size;
  const int64_t capacity = in.width;
  ConvertOutput out;
  out.rule.assign(T, 0);
  auto flag = [&](int64_t t, int32_t rule) {  // a token's rule is the smallest code it fails
    out.rule[t] = out.rule[t] == 0 ? rule : std::min(out.rule[t], rule);
  };

  // visible_raw_len = seq_len - q_len + query_position + 1; every one must be positive.
  std::vector<int64_t> visible(T), expected_lens(T), slots(T), window(T);
  for (int64_t b = 0; b < B; ++b) {
    for (int64_t i = 0; i < Q; ++i) visible[b * Q + i] = int64_t{in.seq_lens[b]} - Q + i + 1;
  }
  for (int64_t t = 0; t < T; ++t) {
    if (visible[t] <= 0) flag(t, 1);
    window[t] = std::clamp<int64_t>(visible[t], 0, kWindow);
    expected_lens[t] = kWindow + py_div(std::max<int64_t>(visible[t], 0), kWindow);
    slots[t] = expected_lens[t] - kWindow;
  }
  // The table must hold the lengths derived from seq_lens, and lens must equal them.
  for (int64_t t = 0; t < T; ++t) {
    if (expected_lens[t] > capacity) flag(t, 2);
  }
  for (int64_t t = 0; t < T; ++t) {
    if (in.lens[t] != expected_lens[t]) flag(t, 3);
  }
  // hca_seq_lens = 128 + floor(seq_lens / 128); the table's width follows the longest.
  out.hca_seq_lens.resize(B);
  int64_t max_backing = 0;
  for (int64_t b = 0; b < B; ++b) {
    out.hca_seq_lens[b] = static_cast<int32_t>(kWindow + py_div(std::max<int32_t>(in.seq_lens[b], 0), kWindow));
    max_backing = std::max<int64_t>(max_backing, out.hca_seq_lens[b] - kWindow);
  }
  out.flashinfer_max_pages = static_cast<int32_t>(table_columns(max_backing, ps));
  for (int64_t t = 0; t < T; ++t) {
    const int64_t request_slots = out.hca_seq_lens[t / Q] - kWindow;
    if (table_columns(request_slots, ps) > in.max_pages) flag(t, 4);
  }

  // Window: active columns c < min(visible, 128) must name rows of the SWA pool; the rest become 0.
  out.swa_rows.assign(T * kWindow, 0);
  out.swa_lens.resize(T);
  for (int64_t t = 0; t < T; ++t) {
    out.swa_lens[t] = static_cast<int32_t>(window[t]);
    for (int64_t c = 0; c < window[t]; ++c) {
      const int32_t row = in.indices[t * in.stride + c];
      if (row < 0 || row >= in.swa_pool_rows) flag(t, 5);
      out.swa_rows[t * kWindow + c] = row;
    }
  }

  // Compressed: the first slot of every active page names a page of the
  // pool (offset 0); every active slot is page_id * page_size + offset.
  std::vector<int64_t> page_ids(T * ((capacity - kWindow) / ps + 1), 0);
  const int64_t pages_a_row = (capacity - kWindow) / ps + 1;
  for (int64_t t = 0; t < T; ++t) {
    if (slots[t] > capacity - kWindow) continue;  // refused above; its columns do not exist
    const int32_t* segment = &in.indices[t * in.stride + kWindow];
    for (int64_t start = 0; start < slots[t]; start += ps) {
      const int64_t page = py_div(segment[start], ps);
      page_ids[t * pages_a_row + start / ps] = page;
      if (page < 0 || page >= in.compressed_pool_pages) flag(t, 6);
      if (py_mod(segment[start], ps) != 0) flag(t, 7);
    }
  }
  for (int64_t t = 0; t < T; ++t) {
    if (slots[t] > capacity - kWindow) continue;
    const int32_t* segment = &in.indices[t * in.stride + kWindow];
    for (int64_t j = 0; j < slots[t]; ++j) {
      const bool canonical =
          py_div(segment[j], ps) == page_ids[t * pages_a_row + j / ps] && py_mod(segment[j], ps) == j % ps;
      if (!canonical) flag(t, 7);
    }
  }
  out.block_table.assign(T * in.max_pages, 0);
  for (int64_t t = 0; t < T; ++t) {
    for (int64_t k = 0; k * ps < slots[t] && k < in.max_pages; ++k) {
      out.block_table[t * in.max_pages + k] = static_cast<int32_t>(page_ids[t * pages_a_row + k]);
    }
  }

  for (int64_t t = 0; t < T; ++t) {
    if (out.rule[t] == 0) continue;
    if (out.refused++ == 0) out.first = t;
  }
  return out;
}

}  // namespace sparse_decode::reference
