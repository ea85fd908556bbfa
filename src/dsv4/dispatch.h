// Host side of dsv4_decode before the launch: how a call's columns and
// units are planned, whether the kernels serve it, which kernel does (kAuto:
// dispatch_rules.h), and the split path's workspace.
#pragma once

#include <cstddef>
#include <cstdint>

#include "sparse_decode/dsv4_decode.h"

namespace sparse_decode::dsv4 {

// How a token's columns form column groups, the runs that every kernel
// folds in order (the cluster kernel gives each group a CTA). Depends on W only.
struct ChunkPlan {
  int32_t chunks = 0;            // 64-column chunks: ceil(W / 64)
  int32_t chunks_per_group = 0;  // ceil(chunks / 16)
  int32_t column_groups = 0;     // ceil(chunks / chunks_per_group) <= 16
};
ChunkPlan chunk_plan(int32_t width);

// Heads a unit of `kernel` serves: 64 for the stream kernel and the split
// path of 64-head calls (FP8, H = 64 or 128, W <= 1024;
// docs/kernels/heads64.md), else 16 (the cluster kernel always).
int unit_heads(const Dsv4DecodeArgs& args, Dsv4Kernel kernel);

// Head groups of a token: ceil(heads / unit_heads).
int32_t head_groups(int32_t heads, int unit_heads);

// How the split kernel covers a unit's column groups: as many CTAs a unit as
// the GPU holds at once for all units (at most one a group), the groups
// dealt in equal runs. The bits do not depend on it (each group restarts).
struct SplitPlan {
  int32_t ctas;    // CTAs a unit
  int32_t groups;  // column groups a CTA (the last one may walk fewer)
};
SplitPlan split_plan(const Dsv4DecodeArgs& args);

// Why the kernels cannot serve these (validated) arguments; Ok when they can.
Status kernels_support(const Dsv4DecodeArgs& args);

// Tokens whose clusters are all resident at once on the current device.
int64_t cluster_max_tokens(int32_t width, DType dtype);

// kCluster, kSplit or kStream: args.kernel unless kAuto, else by the
// measured bounds (dispatch_rules.h); kSplit only when `split_workspace`
// (the caller gives the workspace it needs), else the better of the other two.
Dsv4Kernel choose_kernel(const Dsv4DecodeArgs& args, bool split_workspace = true);

// Bytes of workspace the split path needs for these (validated) arguments,
// whichever kernel is chosen.
size_t split_workspace_bytes(const Dsv4DecodeArgs& args);

// Bytes of workspace a validated call asks for (workspace_size): the split
// path's when kAuto or the caller picks it, else 0.
size_t call_workspace_bytes(const Dsv4DecodeArgs& args);

// Whether `workspace` can serve the split path: large and aligned enough.
bool split_workspace_fits(const Dsv4DecodeArgs& args, const void* workspace, size_t workspace_bytes);

}  // namespace sparse_decode::dsv4
