// The kernel registry of dsv4_decode: the file of each configuration
// (configs.cuh) defines the getter of its kernel; the launcher takes kernels
// by address, so that one translation unit compiles each instance.
// combine_kernel_*(few_units): kFewUnitsSlices CTAs a unit, else kCombineSlices.
// `general`: the kernel's general form (traits.cuh), else its plain form.
#pragma once

namespace sparse_decode::dsv4 {

const void* cluster_kernel_fp8_h16(bool general);          // ClusterFp8          cluster_fp8_h16.cu
const void* stream_kernel_fp8_h16(bool general);           // StreamFp8           stream_fp8_h16.cu
const void* stream_deep_kernel_fp8_h16(bool general);      // StreamDeepFp8       stream_deep_fp8_h16.cu
const void* stream_pv_warps_kernel_fp8_h16(bool general);  // StreamPvWarpsFp8    stream_pv_warps_fp8_h16.cu
const void* stream_halves_kernel_fp8_h16(bool general);    // StreamHalvesFp8     stream_halves_fp8_h16.cu
const void* split_kernel_fp8_h16(bool general);            // SplitFp8            split_fp8_h16.cu
const void* combine_kernel_fp8_h16(bool few_units, bool general);
const void* cluster_kernel_bf16_h16(bool general);         // ClusterBf16         cluster_bf16_h16.cu
const void* stream_kernel_bf16_h16(bool general);          // StreamBf16          stream_bf16_h16.cu
const void* stream_halves_kernel_bf16_h16(bool general);   // StreamHalvesBf16    stream_halves_bf16_h16.cu
const void* split_kernel_bf16_h16(bool general);           // SplitBf16           split_bf16_h16.cu
const void* combine_kernel_bf16_h16(bool few_units, bool general);
const void* stream_kernel_fp8_h64(bool general);           // StreamFp8H64        stream_fp8_h64.cu
const void* stream_halves_kernel_fp8_h64(bool general);    // StreamHalvesFp8H64  stream_halves_fp8_h64.cu
const void* split_kernel_fp8_h64(bool general);            // SplitFp8H64         split_fp8_h64.cu
const void* combine_kernel_fp8_h64(bool few_units, bool general);

// The page-walk form (traits.cuh: kPageWalkForm) of the FP8 kernels that
// dsv4_decode_hca runs; its combine kernels are the general form's.
const void* page_walk_cluster_kernel_fp8_h16();         // ClusterFp8          page_walk_cluster_fp8_h16.cu
const void* page_walk_stream_kernel_fp8_h16();          // StreamFp8           page_walk_stream_fp8_h16.cu
const void* page_walk_stream_deep_kernel_fp8_h16();     // StreamDeepFp8       page_walk_stream_deep_fp8_h16.cu
const void* page_walk_stream_pv_warps_kernel_fp8_h16(); // StreamPvWarpsFp8    page_walk_stream_pv_warps_fp8_h16.cu
const void* page_walk_stream_halves_kernel_fp8_h16();   // StreamHalvesFp8     page_walk_stream_halves_fp8_h16.cu
const void* page_walk_split_kernel_fp8_h16();           // SplitFp8            page_walk_split_fp8_h16.cu
const void* page_walk_stream_kernel_fp8_h64();          // StreamFp8H64        page_walk_stream_fp8_h64.cu
const void* page_walk_stream_halves_kernel_fp8_h64();   // StreamHalvesFp8H64  page_walk_stream_halves_fp8_h64.cu
const void* page_walk_split_kernel_fp8_h64();           // SplitFp8H64         page_walk_split_fp8_h64.cu

}  // namespace sparse_decode::dsv4
