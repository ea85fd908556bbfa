// Explicit instantiation, page-walk form (traits.cuh: kPageWalkForm):
// the stream kernel in two dim parts, FP8 E4M3, 64 heads
// (StreamHalvesFp8H64).
#include "dsv4/configs.cuh"
#include "dsv4/instantiations/kernels.h"
#include "dsv4/kernels/stream_kernel.cuh"

namespace sparse_decode::dsv4 {
const void* page_walk_stream_halves_kernel_fp8_h64() {
  return reinterpret_cast<const void*>(&stream_kernel<PageWalkTraits<StreamHalvesTraitsFp8H64>>);
}
}  // namespace sparse_decode::dsv4
