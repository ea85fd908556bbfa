// convert_page_aligned_indices: validation, then the conversion on the host
// (here) or on the device (convert_kernel.cu). Both check and write every
// token with convert_rules.h. The host conversion checks every token before
// it writes anything, and names the first token that breaks a rule.
#include <cstdint>

#include "common/device_support.h"
#include "common/validation.h"
#include "dsv4_hca/convert.h"
#include "dsv4_hca/convert_rules.h"
#include "sparse_decode/dsv4_hca_convert.h"

namespace sparse_decode::dsv4_hca {
namespace {

using validation::invalid;
using Rule = Dsv4HcaConvertRule;

ConvertParams params_of(const Dsv4HcaConvertArgs& args) {
  ConvertParams p{};
  p.indices = args.indices;
  p.indices_stride = args.indices_stride;
  p.width = args.width;
  p.lens = args.lens;
  p.seq_lens = args.seq_lens;
  p.q_len = args.q_len;
  p.page_size = static_cast<int32_t>(args.page_size);  // 2..128: validate()
  p.swa_pool_rows = args.swa_pool_rows;
  p.compressed_pool_pages = args.compressed_pool_pages;
  p.swa_rows = args.swa_rows;
  p.swa_rows_stride = args.swa_rows_stride;
  p.swa_lens = args.swa_lens;
  p.block_table = args.block_table;
  p.block_table_stride = args.block_table_stride;
  p.max_pages = args.max_pages;
  p.hca_seq_lens = args.hca_seq_lens;
  p.error = args.error;
  p.num_tokens = args.num_tokens;
  return p;
}

const int32_t* row_of(const ConvertParams& p, int64_t t) { return p.indices + t * p.indices_stride; }

// The first rule token t breaks (0 when none): the device's token_rule, one
// column at a time.
int32_t host_token_rule(const ConvertParams& p, int64_t t) {
  const TokenShape s = token_shape(p, t);
  const int32_t* row = row_of(p, t);
  int32_t rule = scalar_rule(p, t, s);
  for (int32_t c = 0; c < s.window; ++c) rule = first_rule(rule, window_rule(p, row, c));
  for (int64_t j = 0; j < s.read_slots; ++j) rule = first_rule(rule, slot_rule(p, row, j));
  return rule;
}

// The refusal of token t, which breaks `rule` first: the argument, the value
// and what was expected.
Status refusal(const Dsv4HcaConvertArgs& args, const ConvertParams& p, int64_t t, int32_t rule) {
  const TokenShape s = token_shape(p, t);
  const int32_t b = s.request, seq_len = args.seq_lens[b];
  const int64_t i = t % p.q_len, columns = kSwaColumns + s.slots;
  const int32_t* row = row_of(p, t);
  switch (static_cast<Rule>(rule)) {
    case Rule::kSeqLens:
      return invalid("seq_lens[", b, "] = ", seq_len, ": expected >= q_len = ", p.q_len, " (token ", t, ", token ", i,
                     " of request ", b, ", sees seq_lens[b] - q_len + ", i, " + 1 = ", s.visible, " positions)");
    case Rule::kWidth:
      return invalid("width: expected >= 128 + floor(visible / 128) = ", columns, ", the columns of token ", t,
                     " (it sees ", s.visible, " positions: seq_lens[", b, "] = ", seq_len, ", q_len = ", p.q_len,
                     "), got ", p.width);
    case Rule::kLens:
      return invalid("lens[", t, "] = ", p.lens[t], ": expected 128 + floor(visible / 128) = ", columns, " (token ", t,
                     " sees ", s.visible, " positions: seq_lens[", b, "] = ", seq_len, ", q_len = ", p.q_len,
                     "; FlashInfer's conversion takes dense causal lengths)");
    case Rule::kMaxPages:
      return invalid("max_pages: expected >= convert_max_pages(seq_lens[", b, "] = ", seq_len, ", page_size = ",
                     p.page_size, ") = ", pages_for(seq_len, p.page_size), ", the pages of request ", b,
                     " (token ", t, " on), got ", p.max_pages);
    case Rule::kWindowRow:
      for (int32_t c = 0; c < s.window; ++c) {
        if (window_rule(p, row, c) != 0) {
          return invalid("indices: token ", t, " column ", c, " = ", row[c],
                         ": expected a row of the SWA pool in [0, swa_pool_rows = ", p.swa_pool_rows,
                         ") (columns c < min(128, visible) = ", s.window, " are the active SWA indices)");
        }
      }
      break;
    case Rule::kPage:
    case Rule::kNotCanonical:
      for (int64_t j = 0; j < s.read_slots; ++j) {
        if (slot_rule(p, row, j) != rule) continue;
        const int64_t offset = j % p.page_size, first = kSwaColumns + j - offset;
        const int64_t page = floor_div(row[first], p.page_size);
        if (rule == static_cast<int32_t>(Rule::kPage)) {
          return invalid("indices: token ", t, " column ", kSwaColumns + j, " = ", row[kSwaColumns + j],
                         " is in page ", page,
                         ": expected a page in [0, compressed_pool_pages = ", p.compressed_pool_pages,
                         "), the valid physical page IDs of the compressed pool (page_size = ", p.page_size, ")");
        }
        return invalid("indices: token ", t, " column ", kSwaColumns + j, " = ", row[kSwaColumns + j],
                       ": expected the canonical compressed-page expansion page * page_size + ", offset, " = ",
                       page * p.page_size + offset, " (page ", page, " of column ", first, ", page_size = ",
                       p.page_size, "; column 128 + j holds slot j of the ", s.slots, " the token attends)");
      }
      break;
    default:
      break;
  }
  return invalid("indices: token ", t, " breaks rule ", rule);  // unreachable: every rule names its column
}

void write_token(const ConvertParams& p, int64_t t) {
  const TokenShape s = token_shape(p, t);
  const int32_t* row = row_of(p, t);
  int32_t* swa_rows = p.swa_rows + t * p.swa_rows_stride;
  for (int32_t c = 0; c < kSwaColumns; ++c) swa_rows[c] = swa_row_out(row, s, c);
  int32_t* pages = p.block_table + t * p.block_table_stride;
  for (int64_t k = 0; k < p.max_pages; ++k) pages[k] = page_out(p, row, s, k);
  p.swa_lens[t] = s.window;
  if (t % p.q_len == 0) p.hca_seq_lens[s.request] = hca_seq_len_out(p.seq_lens[s.request]);
}

// Checks every token, then writes the outputs (validated host arguments).
Status convert_on_host(const Dsv4HcaConvertArgs& args) {
  const ConvertParams p = params_of(args);
  int32_t refused = 0, rule = 0;
  int64_t first = -1;
  for (int64_t t = 0; t < p.num_tokens; ++t) {
    const int32_t r = host_token_rule(p, t);
    if (r == 0) continue;
    if (refused++ == 0) first = t, rule = r;
  }
  if (args.error) {
    args.error[0] = refused;
    args.error[1] = static_cast<int32_t>(first);
    args.error[2] = rule;
  }
  if (refused > 0) return refusal(args, p, first, rule);
  for (int64_t t = 0; t < p.num_tokens; ++t) write_token(p, t);
  return Status::Ok();
}

}  // namespace
}  // namespace sparse_decode::dsv4_hca

namespace sparse_decode {

int32_t convert_max_pages(int32_t max_seq_len, int64_t page_size) {
  if (!dsv4_hca::convert_page_size_ok(page_size)) return 0;
  return static_cast<int32_t>(dsv4_hca::pages_for(max_seq_len, page_size));  // <= 2^23 for int32 lengths
}

Status convert_page_aligned_indices(const Dsv4HcaConvertArgs& args, CUstream_st* stream) {
  if (Status status = validate(args); !status.ok()) return status;
  if (args.memory == MemorySpace::kHost) return dsv4_hca::convert_on_host(args);
  if (Status status = hopper_device_status("convert_page_aligned_indices: "); !status.ok()) return status;
  return dsv4_hca::launch_convert(dsv4_hca::params_of(args), stream);
}

}  // namespace sparse_decode
