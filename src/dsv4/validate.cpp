// Host-side validation of Dsv4DecodeArgs: everything that can be checked
// without reading device memory, before anything is launched.
#include <cstdint>
#include <string>

#include "dsv4/validate_rows.h"
#include "dsv4/validate_views.h"
#include "sparse_decode/dsv4_decode.h"

namespace sparse_decode {
namespace {

constexpr int32_t kMaxWidth = kSwaColumns + 16384;

using validation::aligned16;
using validation::check_pool;
using validation::check_rows;
using validation::invalid;

}  // namespace

Status validate(const Dsv4DecodeArgs& args) {
  if (args.memory != MemorySpace::kDevice && args.memory != MemorySpace::kHost) {
    return invalid("memory: expected kDevice or kHost, got ", static_cast<int>(args.memory));
  }
  if (args.dtype != DType::kFloat8E4M3 && args.dtype != DType::kBFloat16) {
    return invalid("dtype: expected kFloat8E4M3 or kBFloat16, got ", static_cast<int>(args.dtype));
  }
  if (args.kernel != Dsv4Kernel::kAuto && args.kernel != Dsv4Kernel::kCluster && args.kernel != Dsv4Kernel::kStream &&
      args.kernel != Dsv4Kernel::kSplit) {
    return invalid("kernel: expected kAuto, kCluster, kStream or kSplit, got ", static_cast<int>(args.kernel));
  }
  if (Status s = validation::check_sink_term(args.sink_term); !s.ok()) return s;
  if (args.num_tokens < 0) return invalid("num_tokens: expected >= 0, got ", args.num_tokens);
  const int32_t H = args.num_heads;
  if (H != 8 && H != 16 && H != 32 && H != 64 && H != 128) {
    return invalid("num_heads: expected one of 8, 16, 32, 64, 128, got ", H);
  }
  const int32_t W = args.width;
  if (W < kSwaColumns || W > kMaxWidth || W % 4 != 0) {
    return invalid("width: expected a multiple of 4 in [128, ", kMaxWidth, "], got ", W);
  }
  if (args.num_tokens == 0) return Status::Ok();  // nothing is read or written

  if (Status s = check_rows("q", args.q, args.q_token_stride, args.q_head_stride, H, args.dtype, false); !s.ok()) {
    return s;
  }
  if (Status s = check_rows("out", args.out, args.out_token_stride, args.out_head_stride, H,
                            DType::kBFloat16, true);
      !s.ok()) {
    return s;
  }
  if (Status s = check_pool("swa_kv", args.swa_kv, args.dtype); !s.ok()) return s;
  const bool has_compressed = args.compressed_kv.data != nullptr || args.compressed_kv.pages != 0;
  if (W > kSwaColumns || has_compressed) {
    if (Status s = check_pool("compressed_kv", args.compressed_kv, args.dtype); !s.ok()) {
      return W > kSwaColumns ? invalid(s.message(), " (required when width > 128)") : s;
    }
  }

  if (args.indices == nullptr) return invalid("indices: expected a non-null pointer");
  if (!aligned16(args.indices)) return invalid("indices: expected a 16-byte aligned pointer");
  if (args.indices_stride < W || args.indices_stride % 4 != 0) {
    return invalid("indices_stride: expected a multiple of 4 that is >= width = ", W, ", got ",
                   args.indices_stride);
  }

  const validation::Requests requests{args.num_tokens, args.num_requests, args.cum_seq_lens_q, args.q_len,
                                      args.max_q_len};
  if (args.seq_lens) {
    if (Status s = validation::check_request_mapping(requests, "seq_lens"); !s.ok()) return s;
  }
  const int64_t q_bytes = validation::element_bytes(args.dtype);
  const int64_t out_extent = validation::saturating_add(validation::saturating_mul(H - 1, args.out_head_stride),
                                                        kHeadDim);
  if (Status s = validation::check_request_views(
          requests, {{"q", "q_token_stride", args.q_request_stride, args.q_token_stride, 16 / q_bytes},
                     {"indices", "indices_stride", args.indices_request_stride, args.indices_stride, 4},
                     {"lens", "lens_token_stride", args.lens ? args.lens_request_stride : 0, args.lens_token_stride},
                     {"out", "out_token_stride", args.out_request_stride, args.out_token_stride, 8, out_extent},
                     {"lse", "lse_token_stride", args.lse ? args.lse_request_stride : 0, args.lse_token_stride, 1,
                      args.lse ? H : 0}});
      !s.ok()) {
    return s;
  }
  if (Status s = validation::check_lens_token_stride("lens_token_stride", args.lens_token_stride); !s.ok()) return s;
  // Optional 32-bit arrays: naturally aligned.
  if (Status s = validation::check_aligned4({{args.lens, "lens"},
                                             {args.seq_lens, "seq_lens"},
                                             {args.cum_seq_lens_q, "cum_seq_lens_q"},
                                             {args.sinks, "sinks"},
                                             {args.lse, "lse"},
                                             {args.out_of_range_count, "out_of_range_count"},
                                             {args.bmm1_scale.device, "bmm1_scale.device"},
                                             {args.bmm2_scale.device, "bmm2_scale.device"}});
      !s.ok()) {
    return s;
  }
  if (Status s = validation::check_lse_token_stride(args.lse, args.lse_token_stride, H); !s.ok()) return s;
  if (args.bmm1_scale.device == nullptr && !(args.bmm1_scale.value == args.bmm1_scale.value)) {
    return invalid("bmm1_scale: expected a number, got NaN");
  }
  if (args.bmm2_scale.device == nullptr && !(args.bmm2_scale.value == args.bmm2_scale.value)) {
    return invalid("bmm2_scale: expected a number, got NaN");
  }
  if (args.seq_lens) return validation::check_host_cum_seq_lens_q(args.memory, requests);
  return Status::Ok();
}

}  // namespace sparse_decode
