// dsv4_decode_hca: validation, then the CPU backend for host memory or, for
// device memory, the expansion into a section-1 table (expand.cu) and
// section 1's kernels on it (docs/formats/hca_layout.md, "The GPU path").
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

constexpr size_t kPieceAlignment = 16;

size_t round_up16(size_t bytes) {
  if (bytes > SIZE_MAX - (kPieceAlignment - 1)) return SIZE_MAX;
  return (bytes + kPieceAlignment - 1) / kPieceAlignment * kPieceAlignment;
}

size_t saturating_add(size_t a, size_t b) { return a > SIZE_MAX - b ? SIZE_MAX : a + b; }

// Section 1's arguments for the expanded problem: the HCA call's q, pools,
// sinks and sink term, scales, outputs (with their request views) and
// counter, with `indices` [T, W'] and `lens` [T] (null where only the
// geometry is needed). No seq_lens: the expansion already applied the
// window rule, and without seq_lens section 1's window is all 128 columns
// (its kernels' token_scope).
Dsv4DecodeArgs expanded_args(const Dsv4HcaDecodeArgs& args, int32_t width, const int32_t* indices,
                             const int32_t* lens) {
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
  s.indices = indices;
  s.width = width;
  s.indices_stride = width;
  s.lens = lens;
  s.seq_lens = nullptr;
  // The requests serve the request views of q, out and lse only.
  s.num_requests = args.num_requests;
  s.cum_seq_lens_q = nullptr;
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
  // Always the expand kernel's programmatic dependents (as the split path's
  // combine kernel follows its split kernel): they wait for it before reading
  // the table, and what they read before that wait (the sinks) was written
  // before the expand kernel started, which waits for the previous work
  // itself and without the caller's PDL is launched only after it.
  s.enable_pdl = true;
  s.kernel = Dsv4Kernel::kAuto;
  return s;
}

// Section 1's width limit on the expanded table (validated arguments).
Status expansion_width_support(const Dsv4HcaDecodeArgs& args) {
  if (expanded_width(args.max_pages, args.compressed_kv.page_size) == 0) {
    return Status::NotSupported(
        "max_pages: the GPU path expands the compressed stream into section 1's table, at most 16384 columns; "
        "max_pages * compressed_kv.page_size = " +
        std::to_string(validation::saturating_mul(args.max_pages, args.compressed_kv.page_size)) + " (" +
        std::to_string(args.max_pages) + " pages of " + std::to_string(args.compressed_kv.page_size) + ")");
  }
  return Status::Ok();
}

// Why the expansion cannot represent these validated arguments (T > 0):
// section 1's width limit and int32 row indices. Needs no device.
Status expansion_support(const Dsv4HcaDecodeArgs& args) {
  if (Status status = expansion_width_support(args); !status.ok()) return status;
  if (args.compressed_kv.rows() > INT32_MAX) {
    return Status::NotSupported("compressed_kv: the GPU path names rows with int32 indices, at most " +
                                std::to_string(INT32_MAX) + " rows, got " +
                                std::to_string(args.compressed_kv.rows()));
  }
  return Status::Ok();
}

// Why the GPU path cannot serve these validated device arguments (T > 0);
// Ok when it can.
Status gpu_path_support(const Dsv4HcaDecodeArgs& args) {
  if (Status status = expansion_support(args); !status.ok()) return status;
  const int32_t width = expanded_width(args.max_pages, args.compressed_kv.page_size);
  return dsv4::kernels_support(expanded_args(args, width, nullptr, nullptr));
}

// The workspace layout of validated device arguments the GPU path serves.
WorkspaceLayout layout_of(const Dsv4HcaDecodeArgs& args) {
  WorkspaceLayout l;
  l.width = expanded_width(args.max_pages, args.compressed_kv.page_size);
  const Dsv4DecodeArgs s = expanded_args(args, l.width, nullptr, nullptr);
  l.scratch_bytes =
      round_up16(dsv4::choose_kernel(s) == Dsv4Kernel::kSplit ? dsv4::split_workspace_bytes(s) : 0);
  l.table_offset = l.scratch_bytes;
  l.table_bytes = static_cast<size_t>(
      validation::saturating_mul(validation::saturating_mul(args.num_tokens, l.width), sizeof(int32_t)));
  l.lens_offset = saturating_add(l.table_offset, l.table_bytes);  // W' % 4 == 0: a multiple of 16
  l.lens_bytes = round_up16(static_cast<size_t>(validation::saturating_mul(args.num_tokens, sizeof(int32_t))));
  l.total = saturating_add(l.lens_offset, l.lens_bytes);
  return l;
}

}  // namespace
}  // namespace sparse_decode::dsv4_hca

namespace sparse_decode {

Status supports(const Dsv4HcaDecodeArgs& args) {
  if (Status status = validate(args); !status.ok()) return status;
  if (args.memory == MemorySpace::kHost) return Status::Ok();
  // The width is static: refused at any T, as section 1 refuses a wide table.
  if (args.num_tokens == 0) return dsv4_hca::expansion_width_support(args);
  return dsv4_hca::gpu_path_support(args);
}

// Needs no device for the table and lens (the split scratch is 0 without one).
size_t workspace_size(const Dsv4HcaDecodeArgs& args) {
  if (args.memory == MemorySpace::kHost || args.num_tokens == 0 || !validate(args).ok() ||
      !dsv4_hca::expansion_support(args).ok()) {
    return 0;
  }
  return dsv4_hca::layout_of(args).total;
}

Status dsv4_decode_hca(const Dsv4HcaDecodeArgs& args, void* workspace, size_t workspace_bytes, CUstream_st* stream) {
  if (Status status = validate(args); !status.ok()) return status;
  if (args.memory == MemorySpace::kHost) {
    if (args.num_tokens > 0) reference::dsv4_decode_hca_host(args);
    return Status::Ok();
  }
  if (args.num_tokens == 0) return dsv4_hca::expansion_width_support(args);
  if (Status status = dsv4_hca::expansion_support(args); !status.ok()) return status;
  // The workspace before the device checks: its size needs no device (the
  // split scratch is 0 without one), so a caller learns it anywhere.
  const dsv4_hca::WorkspaceLayout layout = dsv4_hca::layout_of(args);
  const bool misaligned = reinterpret_cast<uintptr_t>(workspace) % dsv4_hca::kPieceAlignment != 0;
  if (workspace == nullptr || workspace_bytes < layout.total || misaligned) {
    return Status::InvalidArgument(
        "workspace_bytes: dsv4_decode_hca on device memory needs a 16-byte aligned workspace of " +
        std::to_string(layout.total) + " bytes (workspace_size(args): the expanded index table and lens, plus " +
        std::to_string(layout.scratch_bytes) + " bytes of split scratch), got " + std::to_string(workspace_bytes) +
        (workspace == nullptr ? " at a null workspace" : misaligned ? " at a misaligned workspace" : ""));
  }
  const Dsv4DecodeArgs geometry = dsv4_hca::expanded_args(args, layout.width, nullptr, nullptr);
  if (Status status = dsv4::kernels_support(geometry); !status.ok()) return status;
  uint8_t* base = static_cast<uint8_t*>(workspace);
  auto* indices = reinterpret_cast<int32_t*>(base + layout.table_offset);
  auto* lens = reinterpret_cast<int32_t*>(base + layout.lens_offset);
  const Dsv4DecodeArgs section1 = dsv4_hca::expanded_args(args, layout.width, indices, lens);
  // Host checks of the section-1 call before anything is launched (they hold
  // when the HCA checks do; a failure here is a bug, reported, not launched).
  if (Status status = validate(section1); !status.ok()) {
    return Status::InvalidArgument("internal error: the expanded section-1 arguments of dsv4_decode_hca are invalid: " +
                                   status.message());
  }

  dsv4_hca::ExpandParams p{};
  p.swa_rows = args.swa_rows;
  p.swa_rows_stride = args.swa_rows_stride;
  p.swa_lens = args.swa_lens;
  p.block_table = args.block_table;
  p.block_table_stride = args.block_table_stride;
  p.max_pages = args.max_pages;
  p.page_size = static_cast<int32_t>(args.compressed_kv.page_size);  // <= 16384: expanded_width
  p.lens = args.lens;
  p.hca_seq_lens = args.hca_seq_lens;
  p.num_requests = args.num_requests;
  p.cum_seq_lens_q = args.cum_seq_lens_q;
  p.q_len = args.q_len;
  p.indices = indices;
  p.width = layout.width;
  p.expanded_lens = lens;
  p.num_tokens = args.num_tokens;
  if (Status status = dsv4_hca::launch_expand(p, args.enable_pdl, stream); !status.ok()) return status;
  // Section 1's kernels on the same stream, the expand kernel's dependents (expanded_args).
  return dsv4::launch_dsv4(section1, base, layout.scratch_bytes, stream);
}

}  // namespace sparse_decode
