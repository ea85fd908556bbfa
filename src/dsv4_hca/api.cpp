// dsv4_decode_hca: validation, then the CPU backend for host memory or, for
// device memory, section 1's kernels in their page-walk form, which read the
// columns from the HCA metadata (docs/formats/hca_layout.md, "The GPU path").
#include "sparse_decode/dsv4_decode_hca.h"

#include <climits>
#include <cstdint>
#include <string>

#include "common/validation.h"
#include "dsv4/dispatch.h"
#include "dsv4/launch.h"
#include "dsv4_hca/expand.h"
#include "reference/dsv4_hca_reference.h"

namespace sparse_decode::dsv4_hca {
namespace {

// Section 1's arguments of the same rows: the HCA call's q, pools, sinks
// and sink term, scales, outputs (with their request views) and counter,
// with the width W' of the expansion into a section-1 table. No indices,
// lens or seq_lens: the kernels' page walk reads the columns from the HCA
// metadata (page_walk_params); cum_seq_lens_q or q_len name the requests.
Dsv4DecodeArgs section1_args(const Dsv4HcaDecodeArgs& args, int32_t width) {
  Dsv4DecodeArgs s;
  s.memory = MemorySpace::kDevice;
  s.dtype = DType::kFloat8E4M3;
  s.num_tokens = args.num_tokens;
  s.num_heads = args.num_heads;
  s.q = args.q;
  s.q_token_stride = args.q_token_stride;
  s.q_head_stride = args.q_head_stride;
  s.q_request_stride = args.q_request_stride;
  s.swa_kv = args.swa_kv;
  s.compressed_kv = args.compressed_kv;
  s.width = width;
  s.indices_stride = width;
  s.num_requests = args.num_requests;
  s.cum_seq_lens_q = args.cum_seq_lens_q;
  s.q_len = args.cum_seq_lens_q ? 0 : args.q_len;
  s.sinks = args.sinks;
  s.sink_term = args.sink_term;
  s.bmm1_scale.value = args.bmm1_scale;
  s.bmm2_scale.value = args.bmm2_scale;
  s.out = args.out;
  s.out_token_stride = args.out_token_stride;
  s.out_head_stride = args.out_head_stride;
  s.out_request_stride = args.out_request_stride;
  s.lse = args.lse;
  s.lse_token_stride = args.lse_token_stride;
  s.lse_request_stride = args.lse_request_stride;
  s.out_of_range_count = args.out_of_range_count;
  s.enable_pdl = args.enable_pdl;
  s.kernel = Dsv4Kernel::kAuto;
  return s;
}

// Where the page walk reads a token's columns (validated arguments the GPU
// path serves), with the caller's strides: launch_dsv4 resolves them with
// those of q, out and lse.
dsv4::PageWalkParams page_walk_params(const Dsv4HcaDecodeArgs& args) {
  const int32_t page_size = static_cast<int32_t>(args.compressed_kv.page_size);  // <= 16384: expanded_width
  dsv4::PageWalkParams p{};
  p.swa_rows = args.swa_rows;
  p.swa_rows_stride = args.swa_rows_stride;
  p.swa_lens = args.swa_lens;
  p.block_table = args.block_table;
  p.block_table_stride = args.block_table_stride;
  p.lens = args.lens;
  p.swa_rows_request_stride = args.swa_rows_request_stride;
  p.swa_lens_token_stride = args.swa_lens_token_stride;
  p.swa_lens_request_stride = args.swa_lens_request_stride;
  p.block_table_request_stride = args.block_table_request_stride;
  p.lens_token_stride = args.lens_token_stride;
  p.lens_request_stride = args.lens_request_stride;
  p.hca_seq_lens = args.hca_seq_lens;
  p.page_size = fast_divisor(static_cast<uint32_t>(page_size));
  p.columns = kSwaColumns + args.max_pages * page_size;
  return p;
}

// Section 1's width limit on the walk (validated arguments).
Status walk_width_support(const Dsv4HcaDecodeArgs& args) {
  if (expanded_width(args.max_pages, args.compressed_kv.page_size) == 0) {
    return Status::NotSupported(
        "max_pages: the GPU path walks at most section 1's 16384 compressed columns; "
        "max_pages * compressed_kv.page_size = " +
        std::to_string(validation::saturating_mul(args.max_pages, args.compressed_kv.page_size)) + " (" +
        std::to_string(args.max_pages) + " pages of " + std::to_string(args.compressed_kv.page_size) + ")");
  }
  return Status::Ok();
}

// Why the page walk cannot represent these validated arguments (T > 0):
// section 1's width limit and int32 row indices. Needs no device.
Status walk_support(const Dsv4HcaDecodeArgs& args) {
  if (Status status = walk_width_support(args); !status.ok()) return status;
  if (args.compressed_kv.rows() > INT32_MAX) {
    return Status::NotSupported("compressed_kv: the GPU path names rows with int32 indices, at most " +
                                std::to_string(INT32_MAX) + " rows, got " +
                                std::to_string(args.compressed_kv.rows()));
  }
  return Status::Ok();
}

// Section 1's arguments of the same rows, for validated device arguments the walk serves.
Dsv4DecodeArgs section1_args(const Dsv4HcaDecodeArgs& args) {
  return section1_args(args, expanded_width(args.max_pages, args.compressed_kv.page_size));
}

}  // namespace
}  // namespace sparse_decode::dsv4_hca

namespace sparse_decode {

Status supports(const Dsv4HcaDecodeArgs& args) {
  if (Status status = validate(args); !status.ok()) return status;
  if (args.memory == MemorySpace::kHost) return Status::Ok();
  // The width is static: refused at any T, as section 1 refuses a wide table.
  if (args.num_tokens == 0) return dsv4_hca::walk_width_support(args);
  if (Status status = dsv4_hca::walk_support(args); !status.ok()) return status;
  return dsv4::kernels_support(dsv4_hca::section1_args(args));
}

// Section 1's workspace_size on the same rows (0 without a device).
size_t workspace_size(const Dsv4HcaDecodeArgs& args) {
  if (args.memory == MemorySpace::kHost || args.num_tokens == 0 || !validate(args).ok() ||
      !dsv4_hca::walk_support(args).ok()) {
    return 0;
  }
  return dsv4::call_workspace_bytes(dsv4_hca::section1_args(args));
}

Status dsv4_decode_hca(const Dsv4HcaDecodeArgs& args, void* workspace, size_t workspace_bytes, CUstream_st* stream) {
  if (Status status = validate(args); !status.ok()) return status;
  if (args.memory == MemorySpace::kHost) {
    if (args.num_tokens > 0) reference::dsv4_decode_hca_host(args);
    return Status::Ok();
  }
  if (args.num_tokens == 0) return dsv4_hca::walk_width_support(args);
  if (Status status = dsv4_hca::walk_support(args); !status.ok()) return status;
  const Dsv4DecodeArgs section1 = dsv4_hca::section1_args(args);
  if (Status status = dsv4::kernels_support(section1); !status.ok()) return status;
  // The workspace serves the split path as in dsv4_decode: where it is too
  // small, kAuto runs without it (same bits).
  const dsv4::PageWalkParams pages = dsv4_hca::page_walk_params(args);
  return dsv4::launch_dsv4(section1, workspace, workspace_bytes, stream, &pages);
}

}  // namespace sparse_decode
