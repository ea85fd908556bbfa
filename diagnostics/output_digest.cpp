// An LD_PRELOAD shim that records a digest of every output the library's
// decode calls write, to prove that two builds compute the same bits on the
// same inputs (a refactoring, a re-housing):
//
//   SPARSE_DECODE_TEST_SEED=1 SPARSE_DECODE_DIGEST_FILE=old.txt \
//     LD_LIBRARY_PATH=old-build LD_PRELOAD=build/diagnostics/liboutput-digest.so \
//     build/tests/sparse_decode_gpu_tests
//   (the same with the new build), then diff old.txt new.txt
//
// Each public decode call is forwarded to the library; after a device call
// that is not being captured into a graph, the stream is synchronized and
// one line is appended: the call, its status, its shape, the kernel
// dsv4_decode chose, and 64-bit digests of out, lse and the out-of-range
// counter. Host-memory calls and refusals get their status only. Under
// gtest sharding the file name gets the shard index.
#include <cuda_runtime_api.h>
#include <dlfcn.h>

#include <cinttypes>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "sparse_decode/dsa_decode.h"
#include "sparse_decode/dsv4_decode.h"
#include "sparse_decode/dsv4_decode_hca.h"
#include "sparse_decode/dsv4_decode_packed.h"
#include "sparse_decode/introspection.h"

namespace sd = sparse_decode;

namespace {

FILE* digest_file() {
  static FILE* file = [] {
    const char* name = std::getenv("SPARSE_DECODE_DIGEST_FILE");
    if (!name) return static_cast<FILE*>(nullptr);
    std::string path = name;
    if (const char* shard = std::getenv("GTEST_SHARD_INDEX")) path += std::string(".") + shard;
    return std::fopen(path.c_str(), "a");
  }();
  return file;
}

uint64_t mix(uint64_t hash, const uint8_t* bytes, size_t n) {
  for (size_t i = 0; i < n; ++i) hash = (hash ^ bytes[i]) * 0x100000001b3ull;
  return hash;
}

// Digest of outer x inner rows of `row_bytes` bytes, row (r, c) at
// base + r * outer_stride + c * inner_stride bytes (device memory).
uint64_t digest_rows(const void* base, int64_t outer, int64_t outer_stride, int64_t inner, int64_t inner_stride,
                     size_t row_bytes) {
  if (!base || outer <= 0 || inner <= 0) return 0;
  std::vector<uint8_t> host(static_cast<size_t>(inner) * row_bytes);
  uint64_t hash = 0xcbf29ce484222325ull;
  for (int64_t r = 0; r < outer; ++r) {
    const uint8_t* row = static_cast<const uint8_t*>(base) + r * outer_stride;
    if (cudaMemcpy2D(host.data(), row_bytes, row, static_cast<size_t>(inner_stride), row_bytes,
                     static_cast<size_t>(inner), cudaMemcpyDeviceToHost) != cudaSuccess) {
      return 1;
    }
    hash = mix(hash, host.data(), host.size());
  }
  return hash;
}

int32_t counter_value(const int32_t* counter) {
  int32_t value = -1;
  if (counter) cudaMemcpy(&value, counter, sizeof(value), cudaMemcpyDeviceToHost);
  return value;
}

bool capturing(CUstream_st* stream) {
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
  cudaStreamIsCapturing(stream, &status);
  return status != cudaStreamCaptureStatusNone;
}

template <class Fn>
Fn real(const char* mangled) {
  return reinterpret_cast<Fn>(dlsym(RTLD_NEXT, mangled));
}

// Synchronizes and writes the line of a device call; false when it should not.
bool settle(const char* what, const sd::Status& status, bool device, CUstream_st* stream, const std::string& shape) {
  FILE* f = digest_file();
  if (!f) return false;
  if (!status.ok() || !device || capturing(stream)) {
    std::fprintf(f, "%s %s status=%d%s\n", what, shape.c_str(), static_cast<int>(status.code()),
                 device && status.ok() ? " captured" : "");
    return false;
  }
  if (cudaStreamSynchronize(stream) != cudaSuccess) {
    std::fprintf(f, "%s %s sync-error=%s\n", what, shape.c_str(), cudaGetErrorString(cudaGetLastError()));
    return false;
  }
  return true;
}

}  // namespace

namespace sparse_decode {

Status dsv4_decode(const Dsv4DecodeArgs& a, void* workspace, size_t bytes, CUstream_st* stream) {
  using Fn = Status (*)(const Dsv4DecodeArgs&, void*, size_t, CUstream_st*);
  static Fn fn = real<Fn>("_ZN13sparse_decode11dsv4_decodeERKNS_14Dsv4DecodeArgsEPvmP11CUstream_st");
  const Status status = fn(a, workspace, bytes, stream);
  const bool device = a.memory == MemorySpace::kDevice;
  char shape[160];
  std::snprintf(shape, sizeof(shape), "T=%" PRId64 " H=%d W=%d dtype=%d kernel=%d", a.num_tokens, a.num_heads,
                a.width, static_cast<int>(a.dtype), static_cast<int>(a.kernel));
  if (!settle("dsv4_decode", status, device, stream, shape)) return status;
  const int chosen = static_cast<int>(dsv4_chosen_kernel(a));
  const uint64_t out = digest_rows(a.out, a.num_tokens, a.out_token_stride * 2, a.num_heads, a.out_head_stride * 2,
                                   kHeadDim * 2);
  const uint64_t lse = a.lse ? digest_rows(a.lse, a.num_tokens, a.lse_token_stride * 4, 1, a.num_heads * 4, a.num_heads * 4) : 0;
  std::fprintf(digest_file(), "dsv4_decode %s chosen=%d out=%016" PRIx64 " lse=%016" PRIx64 " count=%d\n", shape,
               chosen, out, lse, counter_value(a.out_of_range_count));
  std::fflush(digest_file());
  return status;
}

Status dsv4_decode_packed(const Dsv4PackedDecodeArgs& a, void* workspace, size_t bytes, CUstream_st* stream) {
  using Fn = Status (*)(const Dsv4PackedDecodeArgs&, void*, size_t, CUstream_st*);
  static Fn fn = real<Fn>("_ZN13sparse_decode18dsv4_decode_packedERKNS_20Dsv4PackedDecodeArgsEPvmP11CUstream_st");
  const Status status = fn(a, workspace, bytes, stream);
  char shape[160];
  std::snprintf(shape, sizeof(shape), "T=%" PRId64 " H=%d Wswa=%d Wextra=%d kernel=%d", a.num_tokens, a.num_heads,
                a.swa.width, a.extra.width, static_cast<int>(a.kernel));
  if (!settle("dsv4_decode_packed", status, a.memory == MemorySpace::kDevice, stream, shape)) return status;
  const uint64_t out = digest_rows(a.out, a.num_tokens, a.out_token_stride * 2, a.num_heads, a.out_head_stride * 2,
                                   kHeadDim * 2);
  const uint64_t lse = a.lse ? digest_rows(a.lse, a.num_tokens, a.lse_token_stride * 4, 1, a.num_heads * 4, a.num_heads * 4) : 0;
  std::fprintf(digest_file(), "dsv4_decode_packed %s out=%016" PRIx64 " lse=%016" PRIx64 " count=%d\n", shape, out,
               lse, counter_value(a.out_of_range_count));
  std::fflush(digest_file());
  return status;
}

Status dsv4_decode_hca(const Dsv4HcaDecodeArgs& a, void* workspace, size_t bytes, CUstream_st* stream) {
  using Fn = Status (*)(const Dsv4HcaDecodeArgs&, void*, size_t, CUstream_st*);
  static Fn fn = real<Fn>("_ZN13sparse_decode15dsv4_decode_hcaERKNS_17Dsv4HcaDecodeArgsEPvmP11CUstream_st");
  const Status status = fn(a, workspace, bytes, stream);
  char shape[160];
  std::snprintf(shape, sizeof(shape), "T=%" PRId64 " H=%d pages=%d", a.num_tokens, a.num_heads, a.max_pages);
  if (!settle("dsv4_decode_hca", status, a.memory == MemorySpace::kDevice, stream, shape)) return status;
  const uint64_t out = digest_rows(a.out, a.num_tokens, a.out_token_stride * 2, a.num_heads, a.out_head_stride * 2,
                                   kHeadDim * 2);
  const uint64_t lse = a.lse ? digest_rows(a.lse, a.num_tokens, a.lse_token_stride * 4, 1, a.num_heads * 4, a.num_heads * 4) : 0;
  std::fprintf(digest_file(), "dsv4_decode_hca %s out=%016" PRIx64 " lse=%016" PRIx64 " count=%d\n", shape, out, lse,
               counter_value(a.out_of_range_count));
  std::fflush(digest_file());
  return status;
}

Status dsa_decode(const DsaDecodeArgs& a, void* workspace, size_t bytes, CUstream_st* stream) {
  using Fn = Status (*)(const DsaDecodeArgs&, void*, size_t, CUstream_st*);
  static Fn fn = real<Fn>("_ZN13sparse_decode10dsa_decodeERKNS_13DsaDecodeArgsEPvmP11CUstream_st");
  const Status status = fn(a, workspace, bytes, stream);
  char shape[160];
  std::snprintf(shape, sizeof(shape), "rows=%" PRId64 " G=%d H=%d R=%d block=%d splits=%d dtype=%d", a.num_rows,
                a.num_groups, a.num_heads, a.num_regions, a.block_size, a.splits, static_cast<int>(a.cache_dtype));
  if (!settle("dsa_decode", status, a.memory == MemorySpace::kDevice, stream, shape)) return status;
  const uint64_t out = digest_rows(a.out, a.num_rows, a.out_row_stride * 2, a.num_heads, a.out_head_stride * 2,
                                   kDsaHeadDim * 2);
  std::fprintf(digest_file(), "dsa_decode %s out=%016" PRIx64 "\n", shape, out);
  std::fflush(digest_file());
  return status;
}

}  // namespace sparse_decode
