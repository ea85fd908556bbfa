// The kernel registry of dsv4_decode: each instantiation file defines the
// getter of its kernel (the launcher takes kernels by address, so that only
// one translation unit compiles each instance).
#pragma once

namespace sparse_decode::dsv4 {

const void* cluster_kernel_fp8_h16();
const void* stream_kernel_fp8_h16();
const void* stream_deep_kernel_fp8_h16();  // at most one unit an SM (stream_deep_fp8_h16.cu)
const void* stream_pv_warps_kernel_fp8_h16();  // the same with P V warps (stream_pv_warps_fp8_h16.cu)
const void* stream_halves_kernel_fp8_h16();  // two CTAs a unit, half the dims each (stream_halves_fp8_h16.cu)
const void* split_kernel_fp8_h16();
const void* combine_kernel_fp8_h16(bool few_units);  // few_units: kFewUnitsSlices CTAs a unit, else kCombineSlices
const void* cluster_kernel_bf16_h16();
const void* stream_kernel_bf16_h16();
const void* stream_halves_kernel_bf16_h16();  // two CTAs a unit, half the dims each (stream_halves_bf16_h16.cu)
const void* split_kernel_bf16_h16();
const void* combine_kernel_bf16_h16(bool few_units);  // few_units: kFewUnitsSlices CTAs a unit, else kCombineSlices
const void* stream_kernel_fp8_h64();  // 64 heads a CTA (stream_fp8_h64.cu, split_fp8_h64.cu)
const void* stream_halves_kernel_fp8_h64();  // two CTAs a unit, half the dims each (stream_halves_fp8_h64.cu)
const void* split_kernel_fp8_h64();
const void* combine_kernel_fp8_h64(bool few_units);  // few_units: kFewUnitsSlices CTAs a unit, else kCombineSlices

}  // namespace sparse_decode::dsv4
