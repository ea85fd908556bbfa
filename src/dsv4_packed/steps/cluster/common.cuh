// What every step of the packed cluster kernel shares: the short name of
// its configuration and the online-softmax state.
#pragma once

#include <cmath>

#include "dsv4_packed/cluster_smem.cuh"

namespace sparse_decode::dsv4_packed::cluster {

using Traits = ClusterTraits;

// Online-softmax state of heads lane / 4 ([0]) and lane / 4 + 8 ([1]), in
// the log2 domain; every warp computes the same values.
struct SoftmaxState {
  float max[2] = {-INFINITY, -INFINITY};
  float sum[2] = {0.0f, 0.0f};  // of the FP32 probabilities
};

}  // namespace sparse_decode::dsv4_packed::cluster
