// Explicit instantiation: FP8 E4M3, 16 heads.
#include "dsv4/small_batch_kernel.cuh"

namespace sparse_decode::dsv4 {
const void* small_batch_kernel_fp8_h16() { return reinterpret_cast<const void*>(&small_batch_kernel<SmallBatchTraits<16>>); }
}  // namespace sparse_decode::dsv4
