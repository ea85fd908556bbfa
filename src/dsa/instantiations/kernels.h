// The kernel registry of dsa_decode: each instantiation file defines the
// getters of its kernels (the launcher takes kernels by address, so that
// only one translation unit compiles each instance).
#pragma once

namespace sparse_decode::dsa {

// regions_share_tiles: the instance whose tiles hold several regions
// (region_key_shift(block_size) < kRegionAlone); the other one's walk is
// compiled for one region a tile.
const void* split_kernel_bf16(bool regions_share_tiles);  // split_bf16.cu
const void* split_cluster_kernel_bf16(bool regions_share_tiles);  // split_bf16.cu: the cluster fold
const void* split_kernel_fp8(bool regions_share_tiles);   // split_fp8.cu
const void* direct_kernel_fp8(bool regions_share_tiles);          // direct_fp8.cu
const void* direct_cluster_kernel_fp8(bool regions_share_tiles);  // direct_fp8.cu: kDirectCluster
// The combine kernel for at most `max_splits` splits, one of
// CombineTraits::bound's instances (4, 8, 16, 32; combine.cu).
const void* combine_kernel_for(int max_splits);

}  // namespace sparse_decode::dsa
