// Explicit instantiation, plain and general forms (traits.cuh): the stream
// kernel, BF16, 16 heads (StreamBf16).
#include "dsv4/configs.cuh"
#include "dsv4/instantiations/kernels.h"
#include "dsv4/kernels/stream_kernel.cuh"

namespace sparse_decode::dsv4 {
const void* stream_kernel_bf16_h16(bool general) {
  return general ? reinterpret_cast<const void*>(&stream_kernel<GeneralTraits<StreamTraitsBf16>>)
                 : reinterpret_cast<const void*>(&stream_kernel<StreamTraitsBf16>);
}
}  // namespace sparse_decode::dsv4
