// How a token's partial output (granules of 4 dims, every head) is dealt to
// the CTAs that fold it: granule g to owner g % n. Shared by the cluster
// kernels of both row formats and the split path's combine kernel.
#pragma once

#include <cstddef>
#include <cstdint>

namespace sparse_decode {

// Granules that owner `rank` of `owners` holds.
__host__ __device__ constexpr int owned_granules(int granules, int rank, int owners) {
  return (granules - rank + owners - 1) / owners;
}

// Bytes owner `rank` of a cluster of `ctas` receives: from every CTA (itself
// included) its granules' FP32 partial output of `heads` heads, and every
// CTA's (max, sum) of each head.
__host__ __device__ constexpr uint32_t received_bytes(int granules, int heads, int rank, int ctas) {
  return static_cast<uint32_t>(ctas * (owned_granules(granules, rank, ctas) * heads * 4 * sizeof(float) +
                                       heads * 2 * sizeof(float)));
}

}  // namespace sparse_decode
