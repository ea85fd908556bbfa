// The split kernel's online softmax (log2 domain).
#pragma once

#include <cmath>

namespace sparse_decode::dsa {

// The online softmax state of this thread's two heads (lane / 4 and + 8).
struct HeadPair {
  float max[2] = {-INFINITY, -INFINITY};  // log2 domain, CTA-wide over the keys so far
  float sum[2] = {0.0f, 0.0f};            // this thread's share of the sum (its key columns)
};

}  // namespace sparse_decode::dsa
