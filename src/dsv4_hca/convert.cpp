// convert_page_aligned_indices on the host: a section-1 table whose active
// compressed columns are the canonical page expansion, to HCA metadata.
// Every token is checked before anything is written.
#include <algorithm>
#include <cstdint>

#include "common/validation.h"
#include "reference/requests.h"
#include "sparse_decode/dsv4_decode_hca.h"

namespace sparse_decode::dsv4_hca {
namespace {

using validation::invalid;

// What a token keeps: its window columns c < window (those with an index
// >= 0), and its compressed slots j < slots. A token that no request holds
// keeps nothing (docs/formats/hca_layout.md: HCA gives it no backing slots).
struct TokenPlan {
  int32_t request = -1;
  int64_t window = 0;
  int64_t slots = 0;
};

TokenPlan plan_token(const Dsv4HcaConvertArgs& args, int64_t t) {
  TokenPlan plan;
  const reference::TokenRequest r =
      reference::locate_token(t, args.num_requests, args.cum_seq_lens_q, args.q_len);
  if (r.request < 0) return plan;
  plan.request = r.request;
  // Section 1's window: c < lens[t] and c < min(128, p + 1).
  const int64_t position = int64_t{args.seq_lens[r.request]} - r.q_len + r.index;
  plan.window = std::max<int64_t>(0, std::min({int64_t{kSwaColumns}, int64_t{args.lens[t]}, position + 1}));
  plan.slots = std::max<int64_t>(0, std::min(args.lens[t], args.width) - kSwaColumns);
  return plan;
}

const int32_t* table_row(const Dsv4HcaConvertArgs& args, int64_t t) { return args.indices + t * args.indices_stride; }

Status check_canonical(const Dsv4HcaConvertArgs& args, int64_t t, const TokenPlan& plan) {
  const int32_t* row = table_row(args, t) + kSwaColumns;
  const int64_t page_size = args.page_size;
  for (int64_t j = 0; j < plan.slots; ++j) {
    const int64_t column = kSwaColumns + j;
    const int64_t index = row[j];
    const int64_t offset = j % page_size;
    if (index < 0 || index % page_size != offset) {
      return invalid("indices: token ", t, " column ", column, " = ", index,
                     ": expected the canonical expansion page * page_size + ", offset, " (page_size = ", page_size,
                     ", column 128 + j holds slot j; active compressed columns may not be -1)");
    }
    const int64_t first = row[j - offset];
    if (index / page_size != first / page_size) {
      return invalid("indices: token ", t, " column ", column, " = ", index, " is in page ", index / page_size,
                     ": expected page ", first / page_size, " as column ", kSwaColumns + j - offset,
                     " (the slots of one page share its page id)");
    }
  }
  return Status::Ok();
}

void write_token(const Dsv4HcaConvertArgs& args, int64_t t, const TokenPlan& plan) {
  const int32_t* row = table_row(args, t);
  int32_t* swa_rows = args.swa_rows + t * args.swa_rows_stride;
  int32_t kept = 0;
  for (int64_t c = 0; c < plan.window; ++c) {
    if (row[c] >= 0) swa_rows[kept++] = row[c];  // -1 holes close up; the order stays
  }
  std::fill(swa_rows + kept, swa_rows + kSwaColumns, -1);
  args.swa_lens[t] = kept;
  int32_t* pages = args.block_table + t * args.block_table_stride;
  for (int64_t k = 0; k < args.max_pages; ++k) {
    const int64_t slot = k * args.page_size;
    pages[k] = slot < plan.slots ? static_cast<int32_t>(row[kSwaColumns + slot] / args.page_size) : -1;
  }
}

// Checks every token, then writes the metadata (validated host arguments).
Status convert_on_host(const Dsv4HcaConvertArgs& args) {
  for (int64_t t = 0; t < args.num_tokens; ++t) {
    if (Status status = check_canonical(args, t, plan_token(args, t)); !status.ok()) return status;
  }
  std::fill(args.hca_seq_lens, args.hca_seq_lens + args.num_requests, kSwaColumns);
  for (int64_t t = 0; t < args.num_tokens; ++t) {
    const TokenPlan plan = plan_token(args, t);
    write_token(args, t, plan);
    if (plan.request >= 0) {
      int32_t& backing = args.hca_seq_lens[plan.request];
      backing = std::max(backing, static_cast<int32_t>(kSwaColumns + plan.slots));
    }
  }
  return Status::Ok();
}

}  // namespace
}  // namespace sparse_decode::dsv4_hca

namespace sparse_decode {

Status convert_page_aligned_indices(const Dsv4HcaConvertArgs& args, CUstream_st*) {
  if (Status status = validate(args); !status.ok()) return status;
  if (args.memory == MemorySpace::kDevice) {
    return Status::NotSupported(
        "convert_page_aligned_indices: device memory is not served by this build (the device converter is not "
        "written yet); host memory converts on the CPU");
  }
  if (args.num_tokens == 0) return Status::Ok();
  return dsv4_hca::convert_on_host(args);
}

}  // namespace sparse_decode
