// Explicit instantiation, plain and general forms (traits.cuh): the split and
// combine kernels, FP8 E4M3, 64 heads a CTA (SplitFp8H64;
// docs/kernels/heads64.md).
#include "dsv4/configs.cuh"
#include "dsv4/instantiations/kernels.h"
#include "dsv4/kernels/combine_kernel.cuh"
#include "dsv4/kernels/split_kernel.cuh"
#include "dsv4/smem.cuh"

namespace sparse_decode::dsv4 {
const void* split_kernel_fp8_h64(bool general) {
  return general ? reinterpret_cast<const void*>(&split_kernel<GeneralTraits<SplitTraitsFp8H64>>)
                 : reinterpret_cast<const void*>(&split_kernel<SplitTraitsFp8H64>);
}
const void* combine_kernel_fp8_h64(bool, bool general) {  // a few units' slices are the usual ones at 64 heads
  using Workspace = SplitWorkspace<SplitTraitsFp8H64>;
  static_assert(Workspace::kFewUnitsSlices == Workspace::kCombineSlices,
                "at 64 heads a unit's combine has 32 slices of 4 granules in either form");
  return general ? reinterpret_cast<const void*>(
                       &combine_kernel<GeneralTraits<SplitTraitsFp8H64>, Workspace::kCombineSlices>)
                 : reinterpret_cast<const void*>(&combine_kernel<SplitTraitsFp8H64, Workspace::kCombineSlices>);
}
}  // namespace sparse_decode::dsv4
