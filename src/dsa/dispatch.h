// Host side of the dsa_decode kernels: the plan (the splits the kernels
// run and the kernel parameters), the support check, and the launch.
#pragma once

#include <cstdint>

#include "dsa/params.h"
#include "sparse_decode/dsa_decode.h"

namespace sparse_decode::dsa {

// The splits the kernels run for a validated call: split s takes region
// columns s, s + splits, ... (docs/formats/dsa_layout.md, decision 4), so
// splits past the R columns read nothing and weigh 0 in the combine (their
// partials are zeros). Running min(splits, R) of them, but at least
// kMinCombinedSplits so that the same combine runs, gives the same
// partition and the same bits without the empty CTAs. One split runs alone
// (no workspace, no combine).
inline constexpr int32_t kMinCombinedSplits = 2;
int32_t launched_splits(const DsaDecodeArgs& args);

// Whether the direct kernel serves a validated device-memory call: an FP8
// cache with kAuto, kDirect or kDirectCluster.
bool uses_direct_kernel(const DsaDecodeArgs& args);

// Whether a row's launched splits run as one cluster that folds them (the
// direct kernel with FP8 caches, the split kernel with BF16 ones):
// kDirectCluster with more than one launched split, and kAuto from
// kClusterFoldMinSplits to kDsaMaxClusterSplits launched splits. No
// combine kernel, the workspace unused, the combine's bits (kDirect's,
// kStaged's). The direct kernel, measured at 16 heads, distinct pages
// (H200, µs a layer, cluster against kDirect): 16 splits T = 1 9.10 / 10.31, T = 6
// 9.62 / 11.15, T = 12 11.90 / 13.08; 8 splits T = 1 9.75 / 10.52, T = 24
// 12.93 / 13.92; 4 splits T = 1 13.17 / 12.59, T = 24 14.40 / 14.16, 2
// splits T = 128 26.21 / 25.73 (a CTA folds two or more granules a thread:
// the combine kernel's three CTAs a row win). Measured with a relaxed exit
// arrive; with the release arrive (one GPU-scope fence a CTA) 16 splits
// T = 1 / 6 / 12 take 9.22 / 9.95 / 12.15.
// kAuto folds in a cluster only where the device schedules a cluster of
// the launched splits (largest_cluster_fold); kDirectCluster elsewhere is
// refused by kernels_support().
inline constexpr int32_t kClusterFoldMinSplits = 8;
bool uses_cluster_fold(const DsaDecodeArgs& args);

// Whether the kernels run their instance whose tiles regions share: blocks
// of a power of two up to 32 slots (region_key_shift), where a split holds
// two or more region columns. With one column a split both instances give
// the same tiles and the same bits; the one-region instance's code is the
// shorter chain there (16 heads, block 16, R = 16, T = 6: 8.5 against
// 9.1 us).
bool uses_shared_tiles(const DsaDecodeArgs& args);

// The largest cluster of the folding kernel for `cache_dtype` (the direct
// kernel, FP8; the split kernel, BF16) that the current device can
// schedule, from kDsaMaxClusterSplits down (0: none, or no device): a MIG
// or MPS partition may hold fewer SMs a GPC than a 16-CTA cluster needs.
int32_t largest_cluster_fold(DType cache_dtype);

// The kernels' parameters for a validated call, with `workspace` split into
// the partial outputs and the log-sum-exps of launched_splits(args) splits.
DsaParams make_params(const DsaDecodeArgs& args, void* workspace);

// Whether this build's kernels serve a validated device-memory call (an
// sm_90 device; a grid of num_rows * splits CTAs).
Status kernels_support(const DsaDecodeArgs& args);

// Launches the split kernel (and, with more than one launched split, the
// combine kernel) for a validated device-memory call with rows > 0 that
// kernels_support() accepts.
Status launch(const DsaDecodeArgs& args, void* workspace, CUstream_st* stream);

}  // namespace sparse_decode::dsa
