// Host-side validation of Dsv4PackedDecodeArgs: everything that can be
// checked without reading device memory, before anything is launched. The
// rules follow src/dsv4/validate.cpp (SPEC section 1) wherever the two calls
// share an argument; docs/formats/packed_layout.md explains the ones that
// are new here.
#include <cstdint>
#include <limits>
#include <string>

#include "common/validation.h"
#include "dsv4/validate_views.h"
#include "sparse_decode/dsv4_decode_packed.h"

namespace sparse_decode {
namespace {

constexpr int64_t kBf16Bytes = 2;

using validation::aligned16;
using validation::aligned4;
using validation::invalid;

// The pool's base and page stride are multiples of 16 bytes, so every data
// row (576 = 36 * 16 bytes) and every page's scale block starts 16-byte
// aligned: the GPU kernels copy rows with 16-byte cp.async/TMA.
Status check_pool(const std::string& name, const PackedPool& pool) {
  if (pool.data == nullptr) return invalid(name, ".data: expected a non-null pointer");
  if (!aligned16(pool.data)) return invalid(name, ".data: expected a 16-byte aligned pointer");
  if (pool.pages < 1) return invalid(name, ".pages: expected >= 1, got ", pool.pages);
  if (pool.page_size < 1) return invalid(name, ".page_size: expected >= 1, got ", pool.page_size);
  const int64_t page_extent = validation::saturating_mul(pool.page_size, kPackedRowBytes);
  if (pool.page_stride < page_extent) {
    return invalid(name, ".page_stride: expected >= page_size * 584 = ", page_extent, " bytes, got ",
                   pool.page_stride);
  }
  if (validation::saturating_mul(pool.pages, pool.page_stride) == std::numeric_limits<int64_t>::max()) {
    return invalid(name, ".pages: expected pages * page_stride to fit in 64-bit byte offsets, got ", pool.pages,
                   " pages of ", pool.page_stride, " bytes");
  }
  if (pool.page_stride % 16 != 0) {
    return invalid(name, ".page_stride: expected a multiple of 16 bytes, got ", pool.page_stride);
  }
  return Status::Ok();
}

// The width is checked before the T = 0 shortcut (as section 1 checks W);
// the rest of the segment only when tokens are read.
Status check_width(const std::string& name, const PackedSegment& segment) {
  if (segment.width < 1 || segment.width > kPackedMaxWidth) {
    return invalid(name, ".width: expected 1..", kPackedMaxWidth, ", got ", segment.width);
  }
  return Status::Ok();
}

Status check_segment(const std::string& name, const PackedSegment& segment, bool lens_required) {
  if (Status s = check_pool(name + ".pool", segment.pool); !s.ok()) return s;
  if (segment.indices == nullptr) return invalid(name, ".indices: expected a non-null pointer");
  if (!aligned16(segment.indices)) return invalid(name, ".indices: expected a 16-byte aligned pointer");
  if (segment.indices_stride < segment.width || segment.indices_stride % 4 != 0) {
    return invalid(name, ".indices_stride: expected a multiple of 4 that is >= width = ", segment.width,
                   ", got ", segment.indices_stride);
  }
  if (lens_required && segment.lens == nullptr) {
    return invalid(name, ".lens: expected a non-null pointer (required with the extra segment)");
  }
  if (!aligned4(segment.lens)) return invalid(name, ".lens: expected a 4-byte aligned pointer");
  return validation::check_lens_token_stride((name + ".lens_token_stride").c_str(), segment.lens_token_stride);
}

// BF16 [T, H, 512] rows. q is only read, so its strides may be 0 (one row
// broadcast); out is written, so its rows must not overlap.
Status check_rows(const char* name, const void* data, int64_t token_stride, int64_t head_stride, int64_t heads,
                  bool written) {
  const std::string n = name;
  if (data == nullptr) return invalid(n, ": expected a non-null pointer");
  if (!aligned16(data)) return invalid(n, ": expected a 16-byte aligned pointer");
  if (head_stride < (written ? kHeadDim : 0) || !validation::multiple_of_16_bytes(head_stride, kBf16Bytes)) {
    return invalid(n, "_head_stride: expected ", written ? ">= 512 elements and " : ">= 0 and ",
                   "a multiple of 8 elements (16 bytes), got ", head_stride);
  }
  const int64_t row_extent =
      validation::saturating_add(validation::saturating_mul(heads - 1, head_stride), kHeadDim);
  if (token_stride < (written ? row_extent : 0) || !validation::multiple_of_16_bytes(token_stride, kBf16Bytes)) {
    return invalid(n, "_token_stride: expected ",
                   written ? ">= (H - 1) * head_stride + 512 = " + std::to_string(row_extent) + " elements and "
                           : std::string(">= 0 and "),
                   "a multiple of 8 elements (16 bytes), got ", token_stride);
  }
  return Status::Ok();
}

}  // namespace

Status validate(const Dsv4PackedDecodeArgs& args) {
  if (args.memory != MemorySpace::kDevice && args.memory != MemorySpace::kHost) {
    return invalid("memory: expected kDevice or kHost, got ", static_cast<int>(args.memory));
  }
  if (args.num_tokens < 0) return invalid("num_tokens: expected >= 0, got ", args.num_tokens);
  if (args.kernel != Dsv4PackedKernel::kAuto && args.kernel != Dsv4PackedKernel::kCluster && args.kernel != Dsv4PackedKernel::kStream &&
      args.kernel != Dsv4PackedKernel::kSplit && args.kernel != Dsv4PackedKernel::kStreamH64 &&
      args.kernel != Dsv4PackedKernel::kSplitH64) {
    return invalid("kernel: expected kAuto, kCluster, kStream, kSplit, kStreamH64 or kSplitH64, got ",
                   static_cast<int>(args.kernel));
  }
  if (args.batch_invariant && (args.kernel == Dsv4PackedKernel::kCluster || args.kernel == Dsv4PackedKernel::kSplit ||
                               args.kernel == Dsv4PackedKernel::kSplitH64)) {
    return invalid("batch_invariant: expected kernel kAuto, kStream or kStreamH64 with it (their bits do not depend "
                   "on the batch), got ",
                   args.kernel == Dsv4PackedKernel::kCluster ? "kCluster"
                   : args.kernel == Dsv4PackedKernel::kSplit ? "kSplit"
                                                             : "kSplitH64");
  }
  if (Status s = validation::check_sink_term(args.sink_term); !s.ok()) return s;
  const int32_t H = args.num_heads;
  if (H != 8 && H != 16 && H != 32 && H != 64 && H != 128) {
    return invalid("num_heads: expected one of 8, 16, 32, 64, 128, got ", H);
  }
  if (Status s = check_width("swa", args.swa); !s.ok()) return s;
  const bool has_extra = args.extra.given();
  if (has_extra) {
    if (Status s = check_width("extra", args.extra); !s.ok()) {
      return invalid(s.message(), " (the extra segment is present: some field of it is set)");
    }
  }
  if (args.num_tokens == 0) return Status::Ok();  // nothing is read or written

  if (Status s = check_rows("q", args.q, args.q_token_stride, args.q_head_stride, H, false); !s.ok()) return s;
  if (Status s = check_rows("out", args.out, args.out_token_stride, args.out_head_stride, H, true); !s.ok()) {
    return s;
  }
  if (Status s = check_segment("swa", args.swa, false); !s.ok()) return s;
  if (has_extra) {
    if (Status s = check_segment("extra", args.extra, true); !s.ok()) return s;
  }

  const validation::Requests requests{args.num_tokens, args.num_requests, args.cum_seq_lens_q, args.q_len,
                                      args.max_q_len};
  if (args.seq_lens) {
    if (Status s = validation::check_request_mapping(requests, "seq_lens"); !s.ok()) return s;
  }
  const int64_t out_extent = validation::saturating_add(validation::saturating_mul(H - 1, args.out_head_stride),
                                                        kHeadDim);
  const PackedSegment& extra = args.extra;  // all zero when absent: its strides are 0 and 1
  if (Status s = validation::check_request_views(
          requests,
          {{"q", "q_token_stride", args.q_request_stride, args.q_token_stride, 8},
           {"swa.indices", "swa.indices_stride", args.swa.indices_request_stride, args.swa.indices_stride, 4},
           {"swa.lens", "swa.lens_token_stride", args.swa.lens ? args.swa.lens_request_stride : 0,
            args.swa.lens_token_stride},
           {"extra.indices", "extra.indices_stride", extra.indices_request_stride, extra.indices_stride, 4},
           {"extra.lens", "extra.lens_token_stride", extra.lens ? extra.lens_request_stride : 0,
            extra.lens_token_stride},
           {"out", "out_token_stride", args.out_request_stride, args.out_token_stride, 8, out_extent},
           {"lse", "lse_token_stride", args.lse ? args.lse_request_stride : 0, args.lse_token_stride, 1,
            args.lse ? H : 0}});
      !s.ok()) {
    return s;
  }

  // Optional 32-bit arrays: naturally aligned.
  if (Status s = validation::check_aligned4({{args.sinks, "sinks"},
                                             {args.lse, "lse"},
                                             {args.out_of_range_count, "out_of_range_count"},
                                             {args.seq_lens, "seq_lens"},
                                             {args.cum_seq_lens_q, "cum_seq_lens_q"}});
      !s.ok()) {
    return s;
  }
  if (Status s = validation::check_lse_token_stride(args.lse, args.lse_token_stride, H); !s.ok()) return s;
  if (!(args.softmax_scale == args.softmax_scale)) return invalid("softmax_scale: expected a number, got NaN");
  if (args.seq_lens) return validation::check_host_cum_seq_lens_q(args.memory, requests);
  return Status::Ok();
}

}  // namespace sparse_decode
