// Types shared by every operation of the library.
#pragma once

#include <cstdint>

namespace sparse_decode {

inline constexpr int kHeadDim = 512;       // dims of q, k and v
inline constexpr int kSwaColumns = 128;    // leading columns of `indices` that address swa_kv
// Query tokens a request in the library's synthetic problems (src/testing,
// the bench). Not a limit: q_len and max_q_len take any value >= 1.
inline constexpr int kMaxQueryLen = 16;

enum class DType : int32_t {
  kFloat8E4M3 = 0,  // 1 byte an element
  kBFloat16 = 1,    // 2 bytes an element
};

// Where every pointer of a call lives. Host memory runs the double-precision
// CPU backend (the reference of docs/spec.md); device memory runs the GPU kernels.
enum class MemorySpace : int32_t { kDevice = 0, kHost = 1 };

// What the attention sinks add to a call's results (docs/spec.md, sections 1
// and 5). Partial results of ranks that each attend some of a token's rows
// merge (merge_states: out = sum_r exp(lse_r - L) out_r, L = log sum_r
// exp(lse_r)) into the result of one call over all of its rows when exactly
// one rank adds the sink: that rank with kInOutputAndLse, every other with kNone.
enum class SinkTerm : int32_t {
  kInOutput = 0,        // the sink weighs in out's denominator; lse = log(sum_c exp(s_c)) excludes it
  kInOutputAndLse = 1,  // out as kInOutput; lse = log(sum_c exp(s_c) + exp(sink)), = sink for a token
                        // without an active column (out 0)
  kNone = 2,            // the sinks are ignored (as if null)
};

// A float given either by value or as a pointer to one float32 that the
// kernel reads when it runs (so a captured CUDA graph sees new values).
struct ScalarArg {
  float value = 1.0f;             // used when `device` is null
  const float* device = nullptr;  // [1] float32, same memory space as the call
};

// A pool of 512-element rows stored as pages. Row r is page r / page_size,
// slot r % page_size. NHD [pages, page_size, 1, 512] and HND
// [pages, 1, page_size, 512] caches with one KV head are both this.
struct KvPool {
  const void* data = nullptr;  // [pages, page_size, 512] elements of the call's dtype
  int64_t pages = 0;           // number of pages
  int64_t page_size = 1;       // rows per page, >= 1
  int64_t page_stride = 0;     // elements between pages, >= page_size * row_stride
  int64_t row_stride = kHeadDim;  // elements between rows of a page, >= 512

  int64_t rows() const { return pages * page_size; }
};

}  // namespace sparse_decode
