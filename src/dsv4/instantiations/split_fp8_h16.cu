// Explicit instantiation, plain and general forms (traits.cuh): the split and
// combine kernels, FP8 E4M3, 16 heads (SplitFp8).
#include "common/instrument.cuh"
#include "dsv4/configs.cuh"
#include "dsv4/instantiations/kernels.h"
#include "dsv4/kernels/combine_kernel.cuh"
#include "dsv4/kernels/split_kernel.cuh"
#include "dsv4/smem.cuh"

namespace sparse_decode::dsv4 {
const void* split_kernel_fp8_h16(bool general) {
  return general ? reinterpret_cast<const void*>(&split_kernel<GeneralTraits<SplitTraitsFp8>>)
                 : reinterpret_cast<const void*>(&split_kernel<SplitTraitsFp8>);
}
const void* combine_kernel_fp8_h16(bool few_units, bool general) {
  using Workspace = SplitWorkspace<SplitTraitsFp8>;
  using General = GeneralTraits<SplitTraitsFp8>;
  if (general) {
    return few_units ? reinterpret_cast<const void*>(&combine_kernel<General, Workspace::kFewUnitsSlices>)
                     : reinterpret_cast<const void*>(&combine_kernel<General, Workspace::kCombineSlices>);
  }
  return few_units ? reinterpret_cast<const void*>(&combine_kernel<SplitTraitsFp8, Workspace::kFewUnitsSlices>)
                   : reinterpret_cast<const void*>(&combine_kernel<SplitTraitsFp8, Workspace::kCombineSlices>);
}
}  // namespace sparse_decode::dsv4

#if defined(SPARSE_DECODE_DIAGNOSTICS)
int sparse_decode::instrument::phase_clocks::read_split(unsigned long long* host) { return copy_clocks(host); }
int sparse_decode::instrument::phase_clocks::read_split_stamps(unsigned long long* host) { return copy_stamps(host); }
#endif
