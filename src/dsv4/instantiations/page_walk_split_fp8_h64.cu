// Explicit instantiation, page-walk form (traits.cuh: kPageWalkForm):
// the split kernel, FP8 E4M3, 64 heads (SplitFp8H64).
#include "dsv4/configs.cuh"
#include "dsv4/instantiations/kernels.h"
#include "dsv4/kernels/split_kernel.cuh"

namespace sparse_decode::dsv4 {
const void* page_walk_split_kernel_fp8_h64() {
  return reinterpret_cast<const void*>(&split_kernel<PageWalkTraits<SplitTraitsFp8H64>>);
}
}  // namespace sparse_decode::dsv4
