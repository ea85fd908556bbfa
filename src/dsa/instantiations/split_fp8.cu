// Explicit instantiation: the split kernel, FP8 E4M3 caches.
#include "dsa/instantiations/kernels.h"
#include "dsa/kernels/split_kernel.cuh"

namespace sparse_decode::dsa {
const void* split_kernel_fp8(bool regions_share_tiles) {
  return regions_share_tiles ? reinterpret_cast<const void*>(&split_kernel<true, true, false>)
                             : reinterpret_cast<const void*>(&split_kernel<true, false, false>);
}
}  // namespace sparse_decode::dsa
