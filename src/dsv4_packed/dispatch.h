// Host side of dsv4_decode_packed before a launch: the plans of the cluster
// kernel and of the split path, the kernel choice, the split path's
// workspace, and the support check (docs/dispatch.md). The launch
// itself: launch.h.
#pragma once

#include <cstddef>
#include <cstdint>

#include "sparse_decode/dsv4_decode_packed.h"

namespace sparse_decode::dsv4_packed {

// How a token's 64-column chunks (SWA ones, then extra ones) are spread
// over the CTAs of its cluster.
struct ClusterPlan {
  int32_t chunks = 0;          // ceil(W_swa / 64) + ceil(W_extra / 64)
  int32_t cluster_ctas = 0;    // CTAs a (token, head group), <= 16
  int32_t chunks_per_cta = 0;  // chunks each CTA walks through
};
// `units`: T x head groups. The plan depends on it, and so do the bits of a
// token's output: the same batch gives the same bits run after run, but a
// token can round differently in a batch of another plan.
ClusterPlan cluster_plan(int32_t swa_width, int32_t extra_width, int64_t units);

// The split paths: a unit's chunks in runs over `ctas` ordinary CTAs of the
// stream kernel (kSplit: 16-head units, two CTAs an SM) or of its 64-head
// form (kSplitH64: 64-head units, one an SM), whose shares meet in the
// workspace and are folded by a combine kernel. As many CTAs a unit as one
// wave has room for, at most one a chunk and 16.
struct SplitPlan {
  int32_t ctas = 0;            // CTAs (shares) a (token, head group) unit
  int32_t chunks_per_cta = 0;  // chunks each CTA walks through (the last may walk fewer)
};
SplitPlan split_plan(int32_t chunks, int64_t units, int64_t wave_ctas);

// The geometry of a call.
int head_groups_of(int32_t heads);                         // 16-head groups (8 heads: one, padded)
int64_t units_of(const Dsv4PackedDecodeArgs& args);        // T x head groups, saturated
int64_t h64_units_of(const Dsv4PackedDecodeArgs& args);    // T x 64-head groups, saturated
int32_t chunks_of(int32_t width);                          // ceil(width / 64)
int32_t token_chunks(const Dsv4PackedDecodeArgs& args);    // a token's chunks, both segments
SplitPlan split_plan_of(const Dsv4PackedDecodeArgs& args);  // the chosen split path's plan of a call
bool is_split(Dsv4PackedKernel kernel);                    // kSplit or kSplitH64: shares in the workspace
int stream_unit_ctas(const Dsv4PackedDecodeArgs& args);    // 1 or 2: CTAs a unit of the stream kernel

// The kernel a call runs: args.kernel unless kAuto, else by the batch
// (dispatch_rules.h); kSplit only when `split_workspace` (the caller gives
// the workspace).
Dsv4PackedKernel choose_kernel(const Dsv4PackedDecodeArgs& args, bool split_workspace = true);

// Bytes of workspace the chosen split path needs for these (validated) arguments.
size_t split_workspace_bytes(const Dsv4PackedDecodeArgs& args);

// Whether `workspace` can serve the chosen split path: large and aligned enough.
bool split_workspace_fits(const Dsv4PackedDecodeArgs& args, const void* workspace, size_t workspace_bytes);

// Why the chosen kernel cannot serve these (validated, device-memory)
// arguments; Ok when it can.
Status kernels_support(const Dsv4PackedDecodeArgs& args);

}  // namespace sparse_decode::dsv4_packed
