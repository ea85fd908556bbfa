// Host side of the dsv4 kernels: the chunk plan, the support check, the
// choice between the cluster, the split and the stream kernel, the split
// path's workspace, and the launch.
#pragma once

#include <cstddef>
#include <cstdint>

#include "sparse_decode/dsv4_decode.h"

namespace sparse_decode::dsv4 {

// Defined with their instantiations (cluster_fp8_h16.cu, stream_fp8_h16.cu,
// split_fp8_h16.cu and the bf16 ones).
const void* cluster_kernel_fp8_h16();
const void* stream_kernel_fp8_h16();
const void* stream_deep_kernel_fp8_h16();  // at most one unit an SM (stream_deep_fp8_h16.cu)
const void* stream_pipelined_kernel_fp8_h16();  // the same with P V warps (stream_pipelined_fp8_h16.cu)
const void* stream_halves_kernel_fp8_h16();  // two CTAs a unit, half the dims each (stream_halves_fp8_h16.cu)
const void* split_kernel_fp8_h16();
const void* combine_kernel_fp8_h16(bool few_units);  // few_units: kFewUnitsSlices CTAs a unit, else kCombineSlices
const void* cluster_kernel_bf16_h16();
const void* stream_kernel_bf16_h16();
const void* stream_halves_kernel_bf16_h16();  // two CTAs a unit, half the dims each (stream_halves_bf16_h16.cu)
const void* split_kernel_bf16_h16();
const void* combine_kernel_bf16_h16(bool few_units);  // few_units: kFewUnitsSlices CTAs a unit, else kCombineSlices
const void* stream_kernel_fp8_h64();  // 64 heads a CTA (stream_fp8_h64.cu, split_fp8_h64.cu)
const void* stream_halves_kernel_fp8_h64();  // two CTAs a unit, half the dims each (stream_halves_fp8_h64.cu)
const void* split_kernel_fp8_h64();
const void* combine_kernel_fp8_h64(bool few_units);  // few_units: kFewUnitsSlices CTAs a unit, else kCombineSlices

// How a token's columns form groups: the unit that both kernels fold in
// order (the cluster kernel gives each group a CTA). Depends on W only.
struct ChunkPlan {
  int32_t chunks = 0;            // 64-column chunks: ceil(W / 64)
  int32_t chunks_per_group = 0;  // ceil(chunks / 16)
  int32_t groups = 0;            // ceil(chunks / chunks_per_group) <= 16
};
ChunkPlan chunk_plan(int32_t width);

// Why the kernels cannot serve these (validated) arguments; Ok when they can.
Status kernels_support(const Dsv4DecodeArgs& args);

// Tokens whose clusters are all resident at once on the current device.
int64_t cluster_max_tokens(int32_t width, DType dtype);

// kCluster, kSplit or kStream: args.kernel unless kAuto, else by the
// measured crossovers; kSplit only when `split_workspace` (the caller gives
// the workspace it needs), else the better of the other two.
Dsv4Kernel choose_kernel(const Dsv4DecodeArgs& args, bool split_workspace = true);

// Bytes of workspace the split path needs for these (validated) arguments,
// whichever kernel is chosen.
size_t split_workspace_bytes(const Dsv4DecodeArgs& args);

// Whether `workspace` can serve the split path: large and aligned enough.
bool split_workspace_fits(const Dsv4DecodeArgs& args, const void* workspace, size_t workspace_bytes);

// Launches the chosen kernel on `stream` (where kAuto's kSplit has no
// workspace that fits, the choice without the split path); arguments must have passed
// kernels_support(), and a forced kSplit split_workspace_fits().
Status launch_dsv4(const Dsv4DecodeArgs& args, void* workspace, size_t workspace_bytes, CUstream_st* stream);

}  // namespace sparse_decode::dsv4
