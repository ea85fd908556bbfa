// Host-side validation of Dsv4DecodeArgs: everything that can be checked
// without reading device memory, before anything is launched.
#include <cstdint>
#include <string>

#include "dsv4/validate_rows.h"
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

  if (args.seq_lens) {
    if (args.num_requests < 1) {
      return invalid("num_requests: expected >= 1 with seq_lens, got ", args.num_requests);
    }
    if (args.cum_seq_lens_q) {
      if (args.max_q_len < 1 || args.max_q_len > kMaxQueryLen) {
        return invalid("max_q_len: expected 1..16 with cum_seq_lens_q, got ", args.max_q_len);
      }
      if (args.num_tokens > int64_t{args.num_requests} * args.max_q_len) {
        return invalid("num_tokens: expected <= num_requests * max_q_len = ",
                       int64_t{args.num_requests} * args.max_q_len, ", got ", args.num_tokens);
      }
    } else {
      if (args.q_len < 1 || args.q_len > kMaxQueryLen) {
        return invalid("q_len: expected 1..16 with seq_lens and no cum_seq_lens_q, got ", args.q_len);
      }
      if (args.num_tokens != int64_t{args.num_requests} * args.q_len) {
        return invalid("num_tokens: expected num_requests * q_len = ", int64_t{args.num_requests} * args.q_len,
                       ", got ", args.num_tokens);
      }
    }
  }

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
  return Status::Ok();
}

}  // namespace sparse_decode
