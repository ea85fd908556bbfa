// Types shared by every operation of the library.
#pragma once

#include <cstdint>

namespace sparse_decode {

inline constexpr int kHeadDim = 512;       // dims of q, k and v
inline constexpr int kSwaColumns = 128;    // leading columns of `indices` that address swa_kv
inline constexpr int kMaxQueryLen = 16;    // query tokens per request

enum class DType : int32_t {
  kFloat8E4M3 = 0,  // 1 byte an element
  kBFloat16 = 1,    // 2 bytes an element
};

// Where every pointer of a call lives. Host memory runs the double-precision
// CPU backend (the reference of docs/spec.md); device memory runs the GPU kernels.
enum class MemorySpace : int32_t { kDevice = 0, kHost = 1 };

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
