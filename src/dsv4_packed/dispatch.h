// Host side of the packed-row kernel (docs/kernels/packed.md).
#pragma once

#include <cstdint>

#include "sparse_decode/dsv4_decode_packed.h"

namespace sparse_decode::dsv4_packed {

// CTAs of the packed kernel an H100/H200 holds at once: 132 SMs x 2. A
// constant, not the device's count, so that a plan (and with it the
// output's bits) is the same on every Hopper part.
inline constexpr int64_t kOneWaveCtas = 264;

// How a token's 64-column chunks (SWA ones, then extra ones) are spread
// over the CTAs of its cluster.
struct ClusterPlan {
  int32_t chunks = 0;          // ceil(W_swa / 64) + ceil(W_extra / 64)
  int32_t cluster_ctas = 0;    // CTAs a (token, head group), <= 16
  int32_t chunks_per_cta = 0;  // chunks each CTA walks through
};
// `clusters`: T x head groups. The plan depends on it, and so do the bits
// of a token's output: the same batch gives the same bits run after run,
// but a token can round differently in a batch of another plan.
ClusterPlan packed_plan(int32_t swa_width, int32_t extra_width, int64_t clusters);

// The split path: a unit's chunks in runs over `ctas` ordinary CTAs of the
// stream kernel, whose shares meet in the workspace and are folded by the
// combine kernel (docs/kernels/packed.md, "The split path"). As many CTAs a
// unit as one wave has room for, at most one a chunk and 16.
struct SplitPlan {
  int32_t ctas = 0;            // CTAs (shares) a (token, head group) unit
  int32_t chunks_per_cta = 0;  // chunks each CTA walks through (the last may walk fewer)
};
SplitPlan packed_split_plan(int32_t chunks, int64_t units);

// The kernel a call runs: args.kernel unless kAuto, else by the batch;
// kSplit only when `split_workspace` (the caller gives the workspace).
Dsv4PackedKernel packed_kernel_choice(const Dsv4PackedDecodeArgs& args, bool split_workspace = true);

// Bytes of workspace the split path needs for these (validated) arguments.
size_t packed_split_workspace_bytes(const Dsv4PackedDecodeArgs& args);

// Whether `workspace` can serve the split path: large and aligned enough.
bool packed_split_workspace_fits(const Dsv4PackedDecodeArgs& args, const void* workspace, size_t workspace_bytes);

// Why the kernel cannot serve these (validated, device-memory) arguments;
// Ok when it can.
Status packed_supports(const Dsv4PackedDecodeArgs& args);

// Launches on `stream` the kernel packed_kernel_choice() picks (where kAuto's
// kSplit has no workspace that fits, the choice without it); arguments must
// have passed packed_supports(), have T >= 1, and a forced kSplit a workspace
// that fits.
Status launch_packed(const Dsv4PackedDecodeArgs& args, void* workspace, size_t workspace_bytes, CUstream_st* stream);

}  // namespace sparse_decode::dsv4_packed
