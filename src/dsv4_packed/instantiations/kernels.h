// The kernel registry of dsv4_decode_packed: the instantiation files define
// these getters (the launcher takes kernels by address).
#pragma once

namespace sparse_decode::dsv4_packed {

// `general`: the kernel's general form (params.h), else its plain form.
const void* cluster_kernel_pointer(bool general);
const void* stream_kernel_pointer(int unit_ctas, bool general);  // 1 or 2 CTAs a unit; 0: the split path
const void* stream_h64_kernel_pointer(bool general);            // one CTA a (token, 64-head group) unit, or a run
const void* combine_h64_kernel_pointer(int shares, bool general);  // kSplitH64: up to 2, 4, 10 or 16 shares a unit
const void* combine_kernel_pointer(int shares, bool general);    // up to 2, 4, 10 or 16 shares a unit

}  // namespace sparse_decode::dsv4_packed
