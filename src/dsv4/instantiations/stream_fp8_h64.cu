// Explicit instantiation, plain and general forms (traits.cuh): the stream
// kernel, FP8 E4M3, 64 heads a CTA (StreamFp8H64; docs/kernels/heads64.md).
#include "dsv4/configs.cuh"
#include "dsv4/instantiations/kernels.h"
#include "dsv4/kernels/stream_kernel.cuh"

namespace sparse_decode::dsv4 {
const void* stream_kernel_fp8_h64(bool general) {
  return general ? reinterpret_cast<const void*>(&stream_kernel<GeneralTraits<StreamTraitsFp8H64>>)
                 : reinterpret_cast<const void*>(&stream_kernel<StreamTraitsFp8H64>);
}
}  // namespace sparse_decode::dsv4
