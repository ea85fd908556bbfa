// Explicit instantiation, plain and general forms (traits.cuh): the deep FP8
// stream kernel (16 heads) in two dim parts, two CTAs a unit (StreamHalvesFp8;
// docs/kernels/large_batch.md).
#include "dsv4/configs.cuh"
#include "dsv4/instantiations/kernels.h"
#include "dsv4/kernels/stream_kernel.cuh"

namespace sparse_decode::dsv4 {
const void* stream_halves_kernel_fp8_h16(bool general) {
  return general ? reinterpret_cast<const void*>(&stream_kernel<GeneralTraits<StreamHalvesTraitsFp8>>)
                 : reinterpret_cast<const void*>(&stream_kernel<StreamHalvesTraitsFp8>);
}
}  // namespace sparse_decode::dsv4
