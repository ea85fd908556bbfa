// Small helpers shared by the argument validation of every operation.
#pragma once

#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <limits>
#include <sstream>

#include "sparse_decode/status.h"

namespace sparse_decode::validation {

inline bool aligned16(const void* pointer) { return reinterpret_cast<uintptr_t>(pointer) % 16 == 0; }
inline bool aligned4(const void* pointer) { return reinterpret_cast<uintptr_t>(pointer) % 4 == 0; }

// Extents computed from caller values saturate instead of wrapping, so that a
// huge stride or size cannot make a check pass by overflow (std::numeric_limits<int64_t>::max() is
// larger than any extent a buffer can have).
inline int64_t saturating_mul(int64_t a, int64_t b) {
  int64_t product = 0;
  return __builtin_mul_overflow(a, b, &product) ? std::numeric_limits<int64_t>::max() : product;
}
inline int64_t saturating_add(int64_t a, int64_t b) {
  int64_t sum = 0;
  return __builtin_add_overflow(a, b, &sum) ? std::numeric_limits<int64_t>::max() : sum;
}
// Whether `elements` of `element_bytes` (1, 2 or 4) bytes are a multiple of 16 bytes.
inline bool multiple_of_16_bytes(int64_t elements, int64_t element_bytes) {
  return elements % (16 / element_bytes) == 0;
}

// Builds "argument: expected ..., got ..." messages.
template <typename... Parts>
Status invalid(const Parts&... parts) {
  std::ostringstream message;
  (message << ... << parts);
  return Status::InvalidArgument(message.str());
}

// The refusal of a split path called without the workspace it needs: `what`
// names it ("the split kernel"), `needed` is workspace_size(args).
inline Status workspace_too_small(const char* what, size_t needed, const void* workspace, size_t workspace_bytes) {
  return invalid("workspace_bytes: ", what, " needs a 16-byte aligned workspace of ", needed,
                 " bytes (workspace_size(args)), got ", workspace_bytes, workspace ? "" : " at a null workspace");
}

// Optional arrays of 32-bit elements, by name: each naturally aligned (null
// passes); the first that is not is named.
struct NamedPointer {
  const void* pointer;
  const char* name;
};
inline Status check_aligned4(std::initializer_list<NamedPointer> pointers) {
  for (const NamedPointer& p : pointers) {
    if (!aligned4(p.pointer)) return invalid(p.name, ": expected a 4-byte aligned pointer");
  }
  return Status::Ok();
}

// The optional lse [T, H] of the DeepSeek-V4 calls: with lse, its token
// stride covers the heads.
inline Status check_lse_token_stride(const float* lse, int64_t lse_token_stride, int32_t heads) {
  if (lse && lse_token_stride < heads) {
    return invalid("lse_token_stride: expected >= num_heads = ", heads, ", got ", lse_token_stride);
  }
  return Status::Ok();
}

}  // namespace sparse_decode::validation
