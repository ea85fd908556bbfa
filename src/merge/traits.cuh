// The configuration of the merge kernel (docs/kernels/merge.md).
//
// Words: a rank is one producer of a partial result (a GPU of a decode
// context parallel group); a head row is the D dims of one (token, head)
// pair of an array [T, H, D]; a vector is 8 consecutive dims of a head row
// (16 bytes of BF16, 32 of float32), the work of one thread; a rank batch is
// the ranks whose vectors a thread loads at once before it folds them.
#pragma once

#include "sparse_decode/merge_states.h"

namespace sparse_decode::merge {

struct MergeTraits {
  static constexpr int kThreads = 256;                    // a CTA: 256 consecutive vectors
  static constexpr int kVectorDims = kMergeDimMultiple;  // 8 dims a thread
  static_assert(kVectorDims == 8, "a vector is one 16-byte BF16 load (two float32 ones)");

  // Rank batches by a bound on R (instances: 2, 4, 8 for BF16 partials; 2,
  // 4 for float32): at most 128 bytes in flight a thread, and no more
  // registers than R needs, so that small R keeps more threads an SM
  // (ptxas: BF16 40 / 48 / 80 registers, float32 59 / 64). HBM stays busy
  // with ~22 KB in flight an SM (4.8 TB/s x ~600 ns / 132 SMs); R = 2 holds
  // 1536 threads x 32 bytes = 48 KB, R = 8 768 threads x 128 bytes = 96 KB.
  static constexpr int max_batch(MergeDType partial_dtype) { return partial_dtype == MergeDType::kFloat32 ? 4 : 8; }
  static constexpr int bound(int ranks, MergeDType partial_dtype) {
    const int batch = ranks <= 2 ? 2 : ranks <= 4 ? 4 : 8;
    return batch < max_batch(partial_dtype) ? batch : max_batch(partial_dtype);
  }
};

}  // namespace sparse_decode::merge
