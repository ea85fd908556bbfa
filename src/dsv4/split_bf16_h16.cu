// Explicit instantiation: the split and combine kernels, BF16, 16 heads.
#include "dsv4/launch.h"
#include "dsv4/split_kernel.cuh"

namespace sparse_decode::dsv4 {
const void* split_kernel_bf16_h16() { return reinterpret_cast<const void*>(&split_kernel<SplitTraitsBf16>); }
const void* combine_kernel_bf16_h16() { return reinterpret_cast<const void*>(&combine_kernel<SplitTraitsBf16>); }
}  // namespace sparse_decode::dsv4
