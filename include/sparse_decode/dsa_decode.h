// Region-paged DSA decode with GQA (docs/spec.md section 4; Step-style, seed 002).
//
// A row is one (query token, KV group) pair: row r is token r / G, group
// r % G, and carries that group's `heads` query heads (<= 16). Each row
// selects up to R logical blocks ("regions") of its request's paged cache and
// attends every key of those regions at a position <= positions[row]:
//
//   out[r, h] = gate * sum_k softmax_k(scale * q[r, h] . K_k) V_k
//
// K and V share a slot of the cache: dims 0..191 are K, 192..383 are V.
// docs/formats/dsa_layout.md states the semantics and every decision taken where
// SPEC and seed are silent (duplicate regions, out-of-range ids, splits).
//
// The names of section 1 are overloaded (validate, supports,
// workspace_size); the call itself is dsa_decode.
#pragma once

#include <cstddef>
#include <cstdint>

#include "sparse_decode/status.h"
#include "sparse_decode/types.h"

struct CUstream_st;  // cudaStream_t without the CUDA headers

namespace sparse_decode {

inline constexpr int kDsaHeadDim = 192;    // dims of q, out, K and V
inline constexpr int kDsaSlotDim = 384;    // dims of a cache slot: K then V
inline constexpr int kDsaMaxHeads = 16;    // query heads per KV group
inline constexpr int kDsaMaxSplits = 32;   // most parts a row's regions are split into
inline constexpr int kDsaMaxClusterSplits = 16;  // most splits of kDirectCluster: a cluster's CTAs on Hopper

// The dtype of the optional gate; the sigmoid is rounded to it (seed 002's
// `sigmoid.to(Gate.dtype)`), so it changes the result, not only the storage.
enum class DsaGateDType : int32_t {
  kBFloat16 = 0,
  kFloat32 = 1,
  kFloat16 = 2,
};

// Which GPU kernel serves a device-memory call (docs/kernels/dsa.md).
// kAuto runs kDirect with an FP8 cache (as kDirectCluster from 8 to 16
// launched splits), kStaged with BF16 (from 8 to 16 launched splits with
// the row's splits folded in one cluster as kDirectCluster folds them:
// kStaged's bits in one launch). kStaged copies FP8 slots to a staging buffer and
// converts each tile in shared memory (K to BF16, V to FP16) before its
// MMAs. kDirect (FP8 caches only) feeds FP16 MMAs from the FP8 tile, K and
// V converted exactly in registers and q scaled by a power of two a head
// into FP16: a result within the accuracy bound, not kStaged's bits.
// kDirectCluster (FP8 caches, min(splits, num_regions) <= 16) is kDirect
// whose splits of a row run as one thread-block cluster and fold each
// other's results through distributed shared memory instead of the
// workspace and the combine kernel: kDirect's bits in one launch (one
// split: the direct kernel alone). On a device that cannot schedule such a
// cluster (a MIG or MPS partition), kAuto keeps the combine kernel and
// kDirectCluster is refused (kNotSupported, naming `kernel`).
enum class DsaKernel : int32_t {
  kAuto = 0,
  kStaged = 1,
  kDirect = 2,
  kDirectCluster = 3,
};

struct DsaDecodeArgs {
  MemorySpace memory = MemorySpace::kDevice;  // of every pointer, k_scale/v_scale included
  int64_t num_rows = 0;    // rows = tokens * G, token-major (row r: token r / G, group r % G)
  int32_t num_groups = 1;  // G: KV groups, >= 1
  int32_t num_heads = 16;  // query heads per group, 1..16

  const void* q = nullptr;   // [rows, heads, 192] bfloat16, dims contiguous
  int64_t q_row_stride = 0;  // elements between rows
  int64_t q_head_stride = kDsaHeadDim;  // elements between heads

  void* out = nullptr;         // [rows, heads, 192] bfloat16, dims contiguous
  int64_t out_row_stride = 0;  // elements between rows, >= (heads - 1) * out_head_stride + 192
  int64_t out_head_stride = kDsaHeadDim;  // elements between heads, >= 192

  // The paged cache: slot s of group g of page p holds K (dims 0..191) and
  // V (dims 192..383) of one key position.
  DType cache_dtype = DType::kBFloat16;  // kBFloat16, or kFloat8E4M3 scaled by k_scale/v_scale
  const void* cache = nullptr;           // [pages, G, block, 384] elements of cache_dtype
  int64_t num_pages = 0;                 // pages of the cache, >= 1
  int32_t block_size = 0;                // key positions a region (and a page) holds, >= 1
  int64_t cache_page_stride = 0;         // elements between pages, >= G * cache_group_stride
  int64_t cache_group_stride = 0;        // elements between groups, >= block * cache_slot_stride
  int64_t cache_slot_stride = kDsaSlotDim;  // elements between slots, >= 384
  const float* k_scale = nullptr;        // [1] float32, required for FP8 (k = fp8 * k_scale); ignored for BF16
  const float* v_scale = nullptr;        // [1] float32, required for FP8 (v = fp8 * v_scale); ignored for BF16

  const int32_t* block_table = nullptr;  // [requests, max_blocks]: page of each logical block
  int32_t num_requests = 0;              // requests, >= rows / (G * query_len)
  int32_t max_blocks = 0;                // logical blocks per request, >= 1
  int64_t block_table_stride = 0;        // elements between requests, >= max_blocks
  int32_t query_len = 1;                 // tokens per request: request of row r is r / (G * query_len)

  const int32_t* regions = nullptr;  // [rows, R]: logical block ids of the row's request, -1 = unused
  int32_t num_regions = 0;           // R, >= 1
  int64_t regions_stride = 0;        // elements between rows, >= R

  const int32_t* positions = nullptr;  // [rows]: keys at positions <= positions[r] are visible
  const int32_t* active = nullptr;     // [rows]: 0 = inactive (no work), anything else = active
  bool clear_inactive = true;          // zero the output of inactive rows (else leave it untouched)

  float scale = 1.0f;  // softmax scale applied to q . K
  int32_t splits = 1;  // parts a row's regions are split into, 1..32 (dsa_splits_for gives the default)

  // Optional headwise sigmoid gate: out[r, h] *= round_to(gate_dtype,
  // sigmoid(gate[r / G, (r % G) * heads + h])).
  const void* gate = nullptr;                       // optional [tokens, G * heads] of gate_dtype, heads contiguous
  DsaGateDType gate_dtype = DsaGateDType::kBFloat16;
  int64_t gate_token_stride = 0;                    // elements between tokens, >= G * heads

  bool enable_pdl = false;  // programmatic dependent launch (device memory only)
  DsaKernel kernel = DsaKernel::kAuto;  // device memory only; kDirect, kDirectCluster need an FP8 cache
};

// The default number of splits for `rows` rows (seed 002's
// sparse_decode_splits: about 256 programs): doubling from 1 while
// splits < 32 and rows * splits * 2 <= 256.
int32_t dsa_splits_for(int64_t rows);

// Checks every argument that the host can check. InvalidArgument names the
// argument and the expected value.
Status validate(const DsaDecodeArgs& args);

// validate(), then whether a path of this build serves the call. Host memory
// is served by the fp64 CPU backend, device memory by the GPU kernels on an
// sm_90a device (NotSupported says why not: no such device, or a grid past
// 2^31 - 1 CTAs); rows == 0 launches nothing.
Status supports(const DsaDecodeArgs& args);

// Bytes of scratch memory that dsa_decode needs. Host memory: 0. Device
// memory with splits > 1: the float32 split partials, the normalized
// outputs [rows, splits, heads, 192] followed by their natural-log
// sums of exp [rows, splits, heads] (docs/formats/dsa_layout.md); 0 with one split.
size_t workspace_size(const DsaDecodeArgs& args);

// Runs the decode on `stream` (ignored for host memory, which runs
// synchronously on the CPU). No allocation, no host synchronization. For
// device memory the workspace must be 16-byte aligned and hold
// workspace_size(args) bytes. Nothing is launched or written when it fails.
Status dsa_decode(const DsaDecodeArgs& args, void* workspace, size_t workspace_bytes, CUstream_st* stream);

}  // namespace sparse_decode
