// The direct split kernel, FP8 E4M3 caches.
#include "dsa/instantiations/kernels.h"
#include "dsa/kernels/direct_kernel.cuh"

namespace sparse_decode::dsa {
const void* direct_kernel_fp8() { return reinterpret_cast<const void*>(&direct_kernel); }
}  // namespace sparse_decode::dsa
