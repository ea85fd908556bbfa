// Explicit instantiation of the packed-row stream kernel (16 heads a CTA;
// other head counts are CTAs of 16, 8 heads padded).
#include "dsv4/packed_stream_kernel.cuh"

namespace sparse_decode::dsv4 {
const void* packed_stream_kernel_pointer() { return reinterpret_cast<const void*>(&packed_stream::packed_stream_kernel); }
}  // namespace sparse_decode::dsv4
