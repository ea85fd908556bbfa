// Explicit instantiation, plain and general forms (traits.cuh): the deep stream
// kernel (4 KV tiles, 1 CTA an SM), FP8 E4M3, 16 heads (StreamDeepFp8).
#include "common/instrument.cuh"
#include "dsv4/configs.cuh"
#include "dsv4/instantiations/kernels.h"
#include "dsv4/kernels/stream_kernel.cuh"

namespace sparse_decode::dsv4 {
const void* stream_deep_kernel_fp8_h16(bool general) {
  return general ? reinterpret_cast<const void*>(&stream_kernel<GeneralTraits<StreamDeepTraitsFp8>>)
                 : reinterpret_cast<const void*>(&stream_kernel<StreamDeepTraitsFp8>);
}
}  // namespace sparse_decode::dsv4

#if defined(SPARSE_DECODE_DIAGNOSTICS)
int sparse_decode::instrument::phase_clocks::read_stream_deep(unsigned long long* host) { return copy_clocks(host); }
int sparse_decode::instrument::phase_clocks::read_stream_deep_stamps(unsigned long long* host) { return copy_stamps(host); }
#endif
