#include "reference/dsv4_hca_reference.h"

#include <algorithm>
#include <vector>

#include "reference/formats.h"
#include "reference/requests.h"

namespace sparse_decode::reference {
namespace {

// Appends the 512 exactly decoded FP8 values of row `row` of `pool`.
void append_row(const KvPool& pool, int64_t row, std::vector<double>& kv) {
  const auto* bytes = static_cast<const uint8_t*>(pool.data) + (row / pool.page_size) * pool.page_stride +
                      (row % pool.page_size) * pool.row_stride;
  for (int d = 0; d < kHeadDim; ++d) kv.push_back(decode_e4m3(bytes[d]));
}

}  // namespace

HcaRowState hca_swa_column(const Dsv4HcaDecodeArgs& args, int64_t token, int32_t column) {
  HcaRowState state;
  const int32_t swa_len =
      args.swa_lens[token_offset(token, args.swa_lens_token_stride, args.swa_lens_request_stride, args.q_len)];
  if (column >= std::clamp(swa_len, 0, kSwaColumns)) return state;
  const int32_t row =
      args.swa_rows[token_offset(token, args.swa_rows_stride, args.swa_rows_request_stride, args.q_len) + column];
  if (row < 0) return state;
  if (row >= args.swa_kv.rows()) {
    state.out_of_range = true;
    return state;
  }
  state.active = true;
  state.row = row;
  return state;
}

int64_t hca_compressed_slots(const Dsv4HcaDecodeArgs& args, int64_t token) {
  const TokenRequest r = locate_token(token, args.num_requests, args.cum_seq_lens_q, args.q_len);
  if (r.request < 0) return 0;
  const int32_t len = args.lens[token_offset(token, args.lens_token_stride, args.lens_request_stride, args.q_len)];
  const int64_t slots = std::min({int64_t{len} - kSwaColumns,
                                  int64_t{args.hca_seq_lens[r.request]} - kSwaColumns,
                                  int64_t{args.max_pages} * args.compressed_kv.page_size});
  return std::max<int64_t>(slots, 0);
}

HcaRowState hca_compressed_slot(const Dsv4HcaDecodeArgs& args, int64_t token, int64_t slot) {
  HcaRowState state;
  const int64_t page_size = args.compressed_kv.page_size;
  const int32_t page =
      args.block_table[token_offset(token, args.block_table_stride, args.block_table_request_stride, args.q_len) +
                       slot / page_size];
  if (page < 0) return state;
  if (page >= args.compressed_kv.pages) {
    state.out_of_range = true;
    return state;
  }
  state.active = true;
  state.row = page * page_size + slot % page_size;
  return state;
}

Dsv4Result dsv4_decode_hca(const Dsv4HcaDecodeArgs& args) {
  // The token's active rows: its window rows, then its compressed slots.
  auto gather = [&](int64_t t, std::vector<double>& kv) {
    int64_t out_of_range = 0;
    for (int32_t c = 0; c < kSwaColumns; ++c) {
      const HcaRowState column = hca_swa_column(args, t, c);
      out_of_range += column.out_of_range;
      if (column.active) append_row(args.swa_kv, column.row, kv);
    }
    const int64_t slots = hca_compressed_slots(args, t);
    for (int64_t j = 0; j < slots; ++j) {
      const HcaRowState slot = hca_compressed_slot(args, t, j);
      out_of_range += slot.out_of_range;
      if (slot.active) append_row(args.compressed_kv, slot.row, kv);
    }
    return out_of_range;
  };
  auto load_q = [&](int64_t t, int h, double* q) {
    const uint8_t* q_row = static_cast<const uint8_t*>(args.q) +
                           token_offset(t, args.q_token_stride, args.q_request_stride, args.q_len) +
                           h * args.q_head_stride;
    for (int d = 0; d < kHeadDim; ++d) q[d] = decode_e4m3(q_row[d]);
  };
  const int64_t width = kSwaColumns + int64_t{args.max_pages} * args.compressed_kv.page_size;
  return attend_tokens(args.num_tokens, args.num_heads, width, args.bmm1_scale, args.bmm2_scale, args.sinks,
                       args.sink_term, gather, load_q);
}

void dsv4_decode_hca_host(const Dsv4HcaDecodeArgs& args) {
  write_host_outputs(dsv4_decode_hca(args), args.num_tokens, args.num_heads, host_outputs(args));
}

}  // namespace sparse_decode::reference
