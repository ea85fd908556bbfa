// Explicit instantiation: the split kernel, BF16 caches.
#include "dsa/instantiations/kernels.h"
#include "dsa/kernels/split_kernel.cuh"

namespace sparse_decode::dsa {
const void* split_kernel_bf16(bool regions_share_tiles) {
  return regions_share_tiles ? reinterpret_cast<const void*>(&split_kernel<false, true>)
                             : reinterpret_cast<const void*>(&split_kernel<false, false>);
}
}  // namespace sparse_decode::dsa
