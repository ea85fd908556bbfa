// Host-side validation of Dsv4HcaDecodeArgs:
// everything that can be checked without reading device memory. The rules
// are section 1's (src/dsv4/validate.cpp) wherever the calls share an argument;
// docs/formats/hca_layout.md explains the new ones.
#include <algorithm>
#include <cstdint>
#include <limits>

#include "dsv4/validate_rows.h"
#include "dsv4/validate_views.h"
#include "sparse_decode/dsv4_decode_hca.h"

namespace sparse_decode::dsv4_hca {
namespace {

using validation::aligned16;
using validation::aligned4;
using validation::check_pool;
using validation::check_rows;
using validation::invalid;

Status check_memory(MemorySpace memory) {
  if (memory != MemorySpace::kDevice && memory != MemorySpace::kHost) {
    return invalid("memory: expected kDevice or kHost, got ", static_cast<int>(memory));
  }
  return Status::Ok();
}

// An int32 array: 16-byte aligned for a [T, columns] table read by 16-byte
// rows (`rows16`), 4-byte aligned otherwise.
Status check_int_array(const char* name, const void* data, bool rows16) {
  if (data == nullptr) return invalid(name, ": expected a non-null pointer");
  if (rows16 ? !aligned16(data) : !aligned4(data)) {
    return invalid(name, ": expected a ", rows16 ? 16 : 4, "-byte aligned pointer");
  }
  return Status::Ok();
}

Status check_swa_rows_stride(int64_t stride) {
  if (stride < kSwaColumns || stride % 4 != 0) {
    return invalid("swa_rows_stride: expected a multiple of 4 that is >= 128, got ", stride);
  }
  return Status::Ok();
}

Status check_block_table_stride(int64_t stride, int32_t max_pages) {
  if (stride < max_pages) return invalid("block_table_stride: expected >= max_pages = ", max_pages, ", got ", stride);
  return Status::Ok();
}

// The HCA metadata (read by the decode, written by the converter): swa_rows
// and its stride, swa_lens, block_table and its stride, in that order.
template <typename Args>
Status check_hca_metadata(const Args& args) {
  if (Status s = check_int_array("swa_rows", args.swa_rows, true); !s.ok()) return s;
  if (Status s = check_swa_rows_stride(args.swa_rows_stride); !s.ok()) return s;
  if (Status s = check_int_array("swa_lens", args.swa_lens, false); !s.ok()) return s;
  if (Status s = check_int_array("block_table", args.block_table, false); !s.ok()) return s;
  return check_block_table_stride(args.block_table_stride, args.max_pages);
}

// The request mapping of section 1 (uniform q_len or cum_seq_lens_q), here
// always required: it says which hca_seq_lens / seq_lens entry a token uses.
// Host memory: the values of cum_seq_lens_q too.
Status check_requests(MemorySpace memory, int64_t tokens, int32_t requests, const int32_t* cum_seq_lens_q,
                      int32_t q_len, int32_t max_q_len) {
  if (cum_seq_lens_q && !aligned4(cum_seq_lens_q)) return invalid("cum_seq_lens_q: expected a 4-byte aligned pointer");
  const validation::Requests r{tokens, requests, cum_seq_lens_q, q_len, max_q_len};
  if (Status s = validation::check_request_mapping(r, "HCA metadata"); !s.ok()) return s;
  return validation::check_host_cum_seq_lens_q(memory, r);
}

Status validate_decode(const Dsv4HcaDecodeArgs& args) {
  if (Status s = check_memory(args.memory); !s.ok()) return s;
  if (Status s = validation::check_sink_term(args.sink_term); !s.ok()) return s;
  if (args.num_tokens < 0) return invalid("num_tokens: expected >= 0, got ", args.num_tokens);
  const int32_t H = args.num_heads;
  if (H != 8 && H != 16 && H != 32 && H != 64 && H != 128) {
    return invalid("num_heads: expected one of 8, 16, 32, 64, 128, got ", H);
  }
  if (args.max_pages < 1) return invalid("max_pages: expected >= 1, got ", args.max_pages);
  if (args.num_tokens == 0) return Status::Ok();  // nothing is read or written

  constexpr DType fp8 = DType::kFloat8E4M3;
  if (Status s = check_rows("q", args.q, args.q_token_stride, args.q_head_stride, H, fp8, false); !s.ok()) return s;
  if (Status s = check_rows("out", args.out, args.out_token_stride, args.out_head_stride, H, DType::kBFloat16, true);
      !s.ok()) {
    return s;
  }
  if (Status s = check_pool("swa_kv", args.swa_kv, fp8); !s.ok()) return s;
  if (Status s = check_pool("compressed_kv", args.compressed_kv, fp8); !s.ok()) return s;
  if (validation::saturating_mul(args.max_pages, args.compressed_kv.page_size) == std::numeric_limits<int64_t>::max()) {
    return invalid("max_pages: expected max_pages * compressed_kv.page_size to fit in 64 bits, got ", args.max_pages,
                   " pages of ", args.compressed_kv.page_size);
  }

  if (Status s = check_hca_metadata(args); !s.ok()) return s;
  if (Status s = check_int_array("lens", args.lens, false); !s.ok()) return s;
  if (Status s = check_int_array("hca_seq_lens", args.hca_seq_lens, false); !s.ok()) return s;
  if (Status s = check_requests(args.memory, args.num_tokens, args.num_requests, args.cum_seq_lens_q, args.q_len,
                                args.max_q_len);
      !s.ok()) {
    return s;
  }
  const int64_t out_extent = validation::saturating_add(validation::saturating_mul(H - 1, args.out_head_stride),
                                                        kHeadDim);
  if (Status s = validation::check_request_views(
          {args.num_tokens, args.num_requests, args.cum_seq_lens_q, args.q_len, args.max_q_len},
          {{"q", "q_token_stride", args.q_request_stride, args.q_token_stride, 16},
           {"out", "out_token_stride", args.out_request_stride, args.out_token_stride, 8, out_extent},
           {"lse", "lse_token_stride", args.lse ? args.lse_request_stride : 0, args.lse_token_stride, 1,
            args.lse ? H : 0},
           {"swa_rows", "swa_rows_stride", args.swa_rows_request_stride, args.swa_rows_stride, 4},
           {"swa_lens", "swa_lens_token_stride", args.swa_lens_request_stride, args.swa_lens_token_stride},
           {"block_table", "block_table_stride", args.block_table_request_stride, args.block_table_stride},
           {"lens", "lens_token_stride", args.lens_request_stride, args.lens_token_stride}});
      !s.ok()) {
    return s;
  }
  if (Status s = validation::check_lens_token_stride("swa_lens_token_stride", args.swa_lens_token_stride); !s.ok()) {
    return s;
  }
  if (Status s = validation::check_lens_token_stride("lens_token_stride", args.lens_token_stride); !s.ok()) return s;

  if (Status s = validation::check_aligned4(
          {{args.sinks, "sinks"}, {args.lse, "lse"}, {args.out_of_range_count, "out_of_range_count"}});
      !s.ok()) {
    return s;
  }
  if (Status s = validation::check_lse_token_stride(args.lse, args.lse_token_stride, H); !s.ok()) return s;
  if (!(args.bmm1_scale == args.bmm1_scale)) return invalid("bmm1_scale: expected a number, got NaN");
  if (!(args.bmm2_scale == args.bmm2_scale)) return invalid("bmm2_scale: expected a number, got NaN");
  return Status::Ok();
}

}  // namespace
}  // namespace sparse_decode::dsv4_hca

namespace sparse_decode {

Status validate(const Dsv4HcaDecodeArgs& args) { return dsv4_hca::validate_decode(args); }

}  // namespace sparse_decode
