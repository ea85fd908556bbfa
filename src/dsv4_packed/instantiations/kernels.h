// The kernel registry of dsv4_decode_packed: the instantiation files define
// these getters (the launcher takes kernels by address).
#pragma once

namespace sparse_decode::dsv4_packed {

const void* cluster_kernel_pointer();
const void* stream_kernel_pointer(int unit_ctas);  // 1 or 2 CTAs a unit; 0: the split path
const void* combine_kernel_pointer(int shares);  // the combine kernel for up to 2, 4, 10 or 16 shares a unit

}  // namespace sparse_decode::dsv4_packed
