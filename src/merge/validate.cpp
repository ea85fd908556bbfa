// Host-side validation of MergeStatesArgs: everything that can be checked
// without reading the caller's arrays (the pointer lists are host arrays and
// are read), before anything is launched.
#include <cstdint>
#include <limits>
#include <string>
#include <utility>

#include "common/validation.h"
#include "sparse_decode/merge_states.h"

namespace sparse_decode {
namespace {

using validation::aligned16;
using validation::aligned4;
using validation::invalid;
using validation::multiple_of_16_bytes;
using validation::saturating_add;
using validation::saturating_mul;

int64_t element_bytes(MergeDType dtype) { return dtype == MergeDType::kFloat32 ? 4 : 2; }

bool valid_dtype(MergeDType dtype) { return dtype == MergeDType::kBFloat16 || dtype == MergeDType::kFloat32; }

// The head rows of a written [T, H, extent] array must not overlap:
// the smaller of the two strides (of a dim longer than 1) covers `extent`
// elements, the larger covers the whole smaller dim. Token-major ([T, H])
// and head-major ([H, T]) layouts both pass.
Status check_head_rows_disjoint(const std::string& name, int64_t tokens, int64_t heads, int64_t token_stride,
                           int64_t head_stride, int64_t extent, const char* extent_name) {
  const std::string token = name + "_token_stride", head = name + "_head_stride";
  const bool token_major = heads == 1 || (tokens > 1 && token_stride >= head_stride);
  const std::string inner = token_major ? head : token, outer = token_major ? token : head;
  const int64_t inner_count = token_major ? heads : tokens, outer_count = token_major ? tokens : heads;
  const int64_t inner_stride = token_major ? head_stride : token_stride;
  const int64_t outer_stride = token_major ? token_stride : head_stride;
  if (inner_count > 1 && inner_stride < extent) {
    return invalid(inner, ": expected >= ", extent_name, " = ", extent, " (head rows must not overlap), got ",
                   inner_stride);
  }
  const int64_t span = saturating_add(saturating_mul(inner_count - 1, inner_stride), extent);
  if (outer_count > 1 && outer_stride < span) {
    return invalid(outer, ": expected >= (", token_major ? "num_heads" : "num_tokens", " - 1) * ", inner, " + ",
                   extent_name, " = ", span, " (head rows must not overlap), got ", outer_stride);
  }
  return Status::Ok();
}

// An input stride: >= 0 and, for the 16-byte loads of the partials, a
// multiple of 16 bytes.
Status check_input_stride(const char* name, int64_t stride, int64_t bytes) {
  if (stride < 0 || (bytes > 0 && !multiple_of_16_bytes(stride, bytes))) {
    return invalid(name, ": expected >= 0", bytes > 0 ? " and a multiple of 16 bytes (" : "",
                   bytes > 0 ? std::to_string(16 / bytes) + " elements)" : "", ", got ", stride);
  }
  return Status::Ok();
}

Status check_partials(const MergeStatesArgs& a) {
  const int64_t bytes = element_bytes(a.partial_dtype);
  if ((a.partials == nullptr) == (a.partial_base == nullptr)) {
    return invalid("partials: expected either a host array of num_ranks pointers or partial_base, got ",
                   a.partials ? "both" : "neither");
  }
  if (a.partials) {
    for (int r = 0; r < a.num_ranks; ++r) {
      if (a.partials[r] == nullptr || !aligned16(a.partials[r])) {
        return invalid("partials[", r, "]: expected a non-null 16-byte aligned pointer");
      }
    }
  } else {
    if (!aligned16(a.partial_base)) return invalid("partial_base: expected a 16-byte aligned pointer");
    if (Status s = check_input_stride("partial_rank_stride", a.partial_rank_stride, bytes); !s.ok()) return s;
  }
  if (Status s = check_input_stride("partial_token_stride", a.partial_token_stride, bytes); !s.ok()) return s;
  return check_input_stride("partial_head_stride", a.partial_head_stride, bytes);
}

Status check_lses(const MergeStatesArgs& a) {
  if ((a.lses == nullptr) == (a.lse_base == nullptr)) {
    return invalid("lses: expected either a host array of num_ranks pointers or lse_base, got ",
                   a.lses ? "both" : "neither");
  }
  if (a.lses) {
    for (int r = 0; r < a.num_ranks; ++r) {
      if (a.lses[r] == nullptr || !aligned4(a.lses[r])) {
        return invalid("lses[", r, "]: expected a non-null 4-byte aligned pointer");
      }
    }
  } else {
    if (!aligned4(a.lse_base)) return invalid("lse_base: expected a 4-byte aligned pointer");
    if (Status s = check_input_stride("lse_rank_stride", a.lse_rank_stride, 0); !s.ok()) return s;
  }
  if (Status s = check_input_stride("lse_token_stride", a.lse_token_stride, 0); !s.ok()) return s;
  return check_input_stride("lse_head_stride", a.lse_head_stride, 0);
}

Status check_outputs(const MergeStatesArgs& a) {
  const int64_t bytes = element_bytes(a.out_dtype);
  if (a.out == nullptr) return invalid("out: expected a non-null pointer");
  if (!aligned16(a.out)) return invalid("out: expected a 16-byte aligned pointer");
  const struct {
    int64_t stride;
    const char* name;
  } out_strides[] = {{a.out_token_stride, "out_token_stride"}, {a.out_head_stride, "out_head_stride"}};
  for (const auto& s : out_strides) {
    if (!multiple_of_16_bytes(s.stride, bytes)) {
      return invalid(s.name, ": expected a multiple of 16 bytes (", 16 / bytes, " elements), got ", s.stride);
    }
  }
  if (Status s = check_head_rows_disjoint("out", a.num_tokens, a.num_heads, a.out_token_stride, a.out_head_stride,
                                     a.head_dim, "head_dim");
      !s.ok()) {
    return s;
  }
  if (a.out_lse == nullptr) return Status::Ok();
  if (!aligned4(a.out_lse)) return invalid("out_lse: expected a 4-byte aligned pointer");
  return check_head_rows_disjoint("out_lse", a.num_tokens, a.num_heads, a.out_lse_token_stride,
                                  a.out_lse_head_stride, 1, "1");
}

// The bytes [begin, end) that a [T, H, extent] array spans (strides of either sign).
struct ByteRange {
  intptr_t begin, end;
};
ByteRange byte_range(const void* base, const MergeStatesArgs& a, int64_t token_stride, int64_t head_stride,
                     int64_t extent, int64_t bytes) {
  int64_t low = 0, high = extent;
  const std::pair<int64_t, int64_t> dims[] = {{a.num_tokens, token_stride}, {a.num_heads, head_stride}};
  for (const auto& [count, stride] : dims) {
    const int64_t span = saturating_mul(count - 1, stride);
    if (span < 0) low = -saturating_add(-low, -span);
    else high = saturating_add(high, span);
  }
  const intptr_t at = reinterpret_cast<intptr_t>(base);
  return {at + static_cast<intptr_t>(saturating_mul(low, bytes)),
          at + static_cast<intptr_t>(saturating_mul(high, bytes))};
}
bool overlap(const ByteRange& x, const ByteRange& y) { return x.begin < y.end && y.begin < x.end; }

// out and out_lse are written while every rank's partial and lse are read:
// they may share no byte with an input, nor with each other.
Status check_outputs_apart(const MergeStatesArgs& a) {
  const ByteRange out = byte_range(a.out, a, a.out_token_stride, a.out_head_stride, a.head_dim,
                                   element_bytes(a.out_dtype));
  ByteRange out_lse{0, 0};
  if (a.out_lse) {
    out_lse = byte_range(a.out_lse, a, a.out_lse_token_stride, a.out_lse_head_stride, 1, 4);
    if (overlap(out, out_lse)) return invalid("out_lse: expected no overlap with out");
  }
  for (int r = 0; r < a.num_ranks; ++r) {
    const ByteRange inputs[] = {
        byte_range(a.partial_of(r), a, a.partial_token_stride, a.partial_head_stride, a.head_dim,
                   element_bytes(a.partial_dtype)),
        byte_range(a.lse_of(r), a, a.lse_token_stride, a.lse_head_stride, 1, 4)};
    const char* input_names[] = {"partial", "lse"};
    for (int i = 0; i < 2; ++i) {
      if (overlap(out, inputs[i])) {
        return invalid("out: expected no overlap with an input, got one with rank ", r, "'s ", input_names[i]);
      }
      if (a.out_lse && overlap(out_lse, inputs[i])) {
        return invalid("out_lse: expected no overlap with an input, got one with rank ", r, "'s ", input_names[i]);
      }
    }
  }
  return Status::Ok();
}

}  // namespace

Status validate(const MergeStatesArgs& a) {
  if (a.memory != MemorySpace::kDevice && a.memory != MemorySpace::kHost) {
    return invalid("memory: expected kDevice or kHost, got ", static_cast<int>(a.memory));
  }
  if (a.num_ranks < 1 || a.num_ranks > kMergeMaxRanks) {
    return invalid("num_ranks: expected 1..", kMergeMaxRanks, ", got ", a.num_ranks);
  }
  if (a.num_tokens < 0) return invalid("num_tokens: expected >= 0, got ", a.num_tokens);
  if (a.num_heads < 1) return invalid("num_heads: expected >= 1, got ", a.num_heads);
  if (a.head_dim < kMergeDimMultiple || a.head_dim % kMergeDimMultiple != 0) {
    return invalid("head_dim: expected a positive multiple of ", kMergeDimMultiple, ", got ", a.head_dim);
  }
  if (!valid_dtype(a.partial_dtype)) {
    return invalid("partial_dtype: expected kBFloat16 or kFloat32, got ", static_cast<int>(a.partial_dtype));
  }
  if (!valid_dtype(a.out_dtype)) {
    return invalid("out_dtype: expected kBFloat16 or kFloat32, got ", static_cast<int>(a.out_dtype));
  }
  if (a.num_tokens == 0) return Status::Ok();  // nothing is read or written

  if (Status s = check_partials(a); !s.ok()) return s;
  if (Status s = check_lses(a); !s.ok()) return s;
  if (Status s = check_outputs(a); !s.ok()) return s;
  return check_outputs_apart(a);
}

}  // namespace sparse_decode
