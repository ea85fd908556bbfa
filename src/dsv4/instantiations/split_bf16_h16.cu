// Explicit instantiation, plain and general forms (traits.cuh): the split and
// combine kernels, BF16, 16 heads (SplitBf16, one KV tile as the cluster
// kernel).
#include "dsv4/configs.cuh"
#include "dsv4/instantiations/kernels.h"
#include "dsv4/kernels/combine_kernel.cuh"
#include "dsv4/kernels/split_kernel.cuh"
#include "dsv4/smem.cuh"

namespace sparse_decode::dsv4 {
const void* split_kernel_bf16_h16(bool general) {
  return general ? reinterpret_cast<const void*>(&split_kernel<GeneralTraits<SplitTraitsBf16>>)
                 : reinterpret_cast<const void*>(&split_kernel<SplitTraitsBf16>);
}
const void* combine_kernel_bf16_h16(bool few_units, bool general) {
  using Workspace = SplitWorkspace<SplitTraitsBf16>;
  using General = GeneralTraits<SplitTraitsBf16>;
  if (general) {
    return few_units ? reinterpret_cast<const void*>(&combine_kernel<General, Workspace::kFewUnitsSlices>)
                     : reinterpret_cast<const void*>(&combine_kernel<General, Workspace::kCombineSlices>);
  }
  return few_units ? reinterpret_cast<const void*>(&combine_kernel<SplitTraitsBf16, Workspace::kFewUnitsSlices>)
                   : reinterpret_cast<const void*>(&combine_kernel<SplitTraitsBf16, Workspace::kCombineSlices>);
}
}  // namespace sparse_decode::dsv4
