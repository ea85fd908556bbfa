// Explicit instantiation, plain and general forms (traits.cuh): the BF16 stream
// kernel (16 heads) in two dim parts, two CTAs a unit (StreamHalvesBf16;
// docs/kernels/bf16.md).
#include "dsv4/configs.cuh"
#include "dsv4/instantiations/kernels.h"
#include "dsv4/kernels/stream_kernel.cuh"

namespace sparse_decode::dsv4 {
const void* stream_halves_kernel_bf16_h16(bool general) {
  return general ? reinterpret_cast<const void*>(&stream_kernel<GeneralTraits<StreamHalvesTraitsBf16>>)
                 : reinterpret_cast<const void*>(&stream_kernel<StreamHalvesTraitsBf16>);
}
}  // namespace sparse_decode::dsv4
