// The converter's oracle: FlashInfer's documented
// convert_compressed_page_aligned_sparse_indices_to_hca_metadata, check by
// check over whole arrays as FlashInfer states them, written independently
// of the library's converter (src/dsv4_hca/convert_rules.h). The tests compare
// the library's host and device conversions with it.
#pragma once

#include <cstdint>
#include <vector>

namespace sparse_decode::reference {

// A section-1 table of B requests of q_len tokens and the pools it names.
struct ConvertInput {
  std::vector<int32_t> indices;  // [T, stride]
  int64_t stride = 0;            // elements between tokens, >= width
  int32_t width = 0;             // W
  std::vector<int32_t> lens;     // [T] sparse_topk_lens
  std::vector<int32_t> seq_lens; // [B]
  int32_t q_len = 1;
  int64_t page_size = 2;
  int64_t swa_pool_rows = 1;
  int64_t compressed_pool_pages = 1;
  int32_t max_pages = 1;  // the caller's block-table width (FlashInfer's own: flashinfer_max_pages)
};

struct ConvertOutput {
  // Per token, the first check it fails, in FlashInfer's order (the
  // smallest code of Dsv4HcaConvertRule it fails; 0 when none): visible positions < 1, 128 + n past
  // the width, lens != 128 + n, then (the caller's width, not FlashInfer's)
  // max_pages short of the request's pages, an active window row outside
  // the SWA pool, an active page outside the compressed pool, a
  // non-canonical active compressed column.
  std::vector<int32_t> rule;
  int32_t refused = 0;       // tokens with a rule
  int64_t first = -1;        // the first of them
  int32_t flashinfer_max_pages = 0;  // FlashInfer's block-table width: max(1, tiles(max n) * 128 / page_size)
  // The outputs (meaningful when refused == 0), the block table at the
  // caller's max_pages.
  std::vector<int32_t> swa_rows;      // [T, 128]
  std::vector<int32_t> swa_lens;      // [T]
  std::vector<int32_t> block_table;   // [T, max_pages]
  std::vector<int32_t> hca_seq_lens;  // [B]
};

ConvertOutput convert_reference(const ConvertInput& input);

}  // namespace sparse_decode::reference
