// The per-token metadata of an HCA problem (swa_rows, swa_lens, block_table,
// lens) copied into [B, q_len, ...] request views whose leading dims do not
// merge (docs/spec.md, section 3), for the CPU and GPU tests. The padding
// holds values that change the result if read: the last SWA row and the last
// compressed page (never active, NaN rows), a full window and lens past every
// footprint.
#pragma once

#include <cstdint>
#include <vector>

#include "sparse_decode/dsv4_decode_hca.h"
#include "support/request_views.h"
#include "testing/dsv4_hca_problem.h"

namespace sparse_decode::test {

struct HcaMetadataViews {
  ViewStrides rows_view, lens_view, table_view;
  std::vector<int32_t> swa_rows, swa_lens, block_table, lens;

  // Padded views, or token-interleaved ones ([q_len, B] storage seen as [B, q_len]).
  HcaMetadataViews(const testing::Dsv4HcaProblem& p, bool interleaved) {
    const int64_t T = p.config.tokens, B = T / p.config.q_len, P = p.config.max_pages;
    const int32_t q_len = p.config.q_len;
    rows_view = interleaved ? interleaved_view(kSwaColumns + 4, B) : padded_view(kSwaColumns + 4, q_len, 8);
    lens_view = interleaved ? interleaved_view(1, B) : padded_view(2, q_len, 3);
    table_view = interleaved ? interleaved_view(P + 1, B) : padded_view(P + 3, q_len, 5);
    const int32_t nan_row = static_cast<int32_t>(p.config.swa_rows - 1);
    const int32_t nan_page = static_cast<int32_t>(p.config.compressed_pages - 1);
    swa_rows = to_view<int32_t>(p.swa_rows.data(), kSwaColumns, kSwaColumns, T, q_len, rows_view, nan_row);
    swa_lens = to_view<int32_t>(p.swa_lens.data(), 1, 1, T, q_len, lens_view, kSwaColumns);
    block_table = to_view<int32_t>(p.block_table.data(), P, P, T, q_len, table_view, nan_page);
    lens = to_view<int32_t>(p.lens.data(), 1, 1, T, q_len, lens_view, 1 << 30);
  }

  // Points `a` at the views (rows, window, table, lens: the data of this
  // object, or of `device` copies in the same order when given).
  void apply(Dsv4HcaDecodeArgs& a, const int32_t* const* device = nullptr) const {
    a.swa_rows = device ? device[0] : swa_rows.data();
    a.swa_rows_stride = rows_view.token_stride, a.swa_rows_request_stride = rows_view.request_stride;
    a.swa_lens = device ? device[1] : swa_lens.data();
    a.swa_lens_token_stride = lens_view.token_stride, a.swa_lens_request_stride = lens_view.request_stride;
    a.block_table = device ? device[2] : block_table.data();
    a.block_table_stride = table_view.token_stride, a.block_table_request_stride = table_view.request_stride;
    a.lens = device ? device[3] : lens.data();
    a.lens_token_stride = lens_view.token_stride, a.lens_request_stride = lens_view.request_stride;
  }
};

}  // namespace sparse_decode::test
