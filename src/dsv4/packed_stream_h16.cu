// Explicit instantiations of the packed-row stream kernel (16 heads a CTA;
// other head counts are CTAs of 16, 8 heads padded): one CTA a unit, and a
// pair of CTAs a unit for batches of at most one unit per two CTA slots.
#include "dsv4/packed_stream_kernel.cuh"

namespace sparse_decode::dsv4 {
const void* packed_stream_kernel_pointer(int unit_ctas) {
  return unit_ctas == 2 ? reinterpret_cast<const void*>(&packed_stream::packed_stream_kernel<2>)
                        : reinterpret_cast<const void*>(&packed_stream::packed_stream_kernel<1>);
}
}  // namespace sparse_decode::dsv4
