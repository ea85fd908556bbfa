// Explicit instantiations of the packed-row stream kernel (16 heads a CTA;
// other head counts are CTAs of 16, 8 heads padded): one CTA a unit, and a
// pair of CTAs a unit for batches of at most one unit per two CTA slots;
// the split path (0: runs of chunks a CTA, shares in the workspace) and its combine kernel.
#include "dsv4/packed_stream_kernel.cuh"

namespace sparse_decode::dsv4 {
const void* packed_stream_kernel_pointer(int unit_ctas) {
  return unit_ctas == 2   ? reinterpret_cast<const void*>(&packed_stream::packed_stream_kernel<2>)
         : unit_ctas == 1 ? reinterpret_cast<const void*>(&packed_stream::packed_stream_kernel<1>)
                          : reinterpret_cast<const void*>(&packed_stream::packed_stream_kernel<0>);
}
const void* packed_combine_kernel_pointer(int shares) {
  return shares <= 2    ? reinterpret_cast<const void*>(&packed_stream::packed_combine_kernel<2>)
         : shares <= 4  ? reinterpret_cast<const void*>(&packed_stream::packed_combine_kernel<4>)
         : shares <= 10 ? reinterpret_cast<const void*>(&packed_stream::packed_combine_kernel<10>)
                        : reinterpret_cast<const void*>(&packed_stream::packed_combine_kernel<16>);
}
}  // namespace sparse_decode::dsv4

#if defined(SPARSE_DECODE_PHASE_CLOCKS)
int sparse_decode::dsv4::phase_clocks::read_packed_stream(unsigned long long* host) { return copy_clocks(host); }
int sparse_decode::dsv4::phase_clocks::read_packed_stream_stamps(unsigned long long* host) { return copy_stamps(host); }
#endif
