// Host side of the dsv4 kernels: the chunk plan, the support check, the
// choice between the cluster, the split and the stream kernel, the split
// path's workspace, and the launch.
#pragma once

#include <cstddef>
#include <cstdint>

#include "sparse_decode/dsv4_decode.h"

namespace sparse_decode::dsv4 {

// How a token's columns form groups: the unit that both kernels fold in
// order (the cluster kernel gives each group a CTA). Depends on W only.
struct ChunkPlan {
  int32_t chunks = 0;            // 64-column chunks: ceil(W / 64)
  int32_t chunks_per_group = 0;  // ceil(chunks / 16)
  int32_t column_groups = 0;     // ceil(chunks / chunks_per_group) <= 16
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
