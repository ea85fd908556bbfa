// The kernel registry of dsv4_decode: the file of each configuration
// (configs.cuh) defines the getter of its kernel; the launcher takes kernels
// by address, so that one translation unit compiles each instance.
// combine_kernel_*(few_units): kFewUnitsSlices CTAs a unit, else kCombineSlices.
#pragma once

namespace sparse_decode::dsv4 {

const void* cluster_kernel_fp8_h16();          // ClusterFp8          cluster_fp8_h16.cu
const void* stream_kernel_fp8_h16();           // StreamFp8           stream_fp8_h16.cu
const void* stream_deep_kernel_fp8_h16();      // StreamDeepFp8       stream_deep_fp8_h16.cu
const void* stream_pv_warps_kernel_fp8_h16();  // StreamPvWarpsFp8    stream_pv_warps_fp8_h16.cu
const void* stream_halves_kernel_fp8_h16();    // StreamHalvesFp8     stream_halves_fp8_h16.cu
const void* split_kernel_fp8_h16();            // SplitFp8            split_fp8_h16.cu
const void* combine_kernel_fp8_h16(bool few_units);
const void* cluster_kernel_bf16_h16();         // ClusterBf16         cluster_bf16_h16.cu
const void* stream_kernel_bf16_h16();          // StreamBf16          stream_bf16_h16.cu
const void* stream_halves_kernel_bf16_h16();   // StreamHalvesBf16    stream_halves_bf16_h16.cu
const void* split_kernel_bf16_h16();           // SplitBf16           split_bf16_h16.cu
const void* combine_kernel_bf16_h16(bool few_units);
const void* stream_kernel_fp8_h64();           // StreamFp8H64        stream_fp8_h64.cu
const void* stream_halves_kernel_fp8_h64();    // StreamHalvesFp8H64  stream_halves_fp8_h64.cu
const void* split_kernel_fp8_h64();            // SplitFp8H64         split_fp8_h64.cu
const void* combine_kernel_fp8_h64(bool few_units);

}  // namespace sparse_decode::dsv4
