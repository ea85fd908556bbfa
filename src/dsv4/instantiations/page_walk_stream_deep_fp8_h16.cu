// Explicit instantiation, page-walk form (traits.cuh: kPageWalkForm):
// the deep stream kernel, FP8 E4M3, 16 heads (StreamDeepFp8).
#include "common/instrument.cuh"
#include "dsv4/configs.cuh"
#include "dsv4/instantiations/kernels.h"
#include "dsv4/kernels/stream_kernel.cuh"

namespace sparse_decode::dsv4 {
const void* page_walk_stream_deep_kernel_fp8_h16() {
  return reinterpret_cast<const void*>(&stream_kernel<PageWalkTraits<StreamDeepTraitsFp8>>);
}
}  // namespace sparse_decode::dsv4

#if defined(SPARSE_DECODE_DIAGNOSTICS)
int sparse_decode::instrument::phase_clocks::read_page_walk_stream_deep(unsigned long long* host) { return copy_clocks(host); }
int sparse_decode::instrument::phase_clocks::read_page_walk_stream_deep_stamps(unsigned long long* host) { return copy_stamps(host); }
#endif
