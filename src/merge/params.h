// What the merge kernel reads (docs/kernels/merge.md): MergeStatesArgs with
// the rank pointers resolved into fixed arrays (passed by value with the
// launch) and the work counted in vectors.
#pragma once

#include <cstdint>

#include "sparse_decode/merge_states.h"

namespace sparse_decode::merge {

struct MergeParams {
  const void* partial[kMergeMaxRanks];  // [R] rank r's [T, H, D] of the partial dtype (first `ranks` used)
  const float* lse[kMergeMaxRanks];     // [R] rank r's [T, H] float32
  int64_t partial_token_stride;         // elements
  int64_t partial_head_stride;          // elements
  int64_t lse_token_stride;             // elements
  int64_t lse_head_stride;              // elements

  void* out;                 // [T, H, D] of the output dtype
  int64_t out_token_stride;  // elements
  int64_t out_head_stride;   // elements
  float* out_lse;            // optional [T, H] float32
  int64_t out_lse_token_stride;  // elements
  int64_t out_lse_head_stride;   // elements

  int32_t ranks;              // R, 1..kMergeMaxRanks
  int32_t heads;              // H
  int32_t vectors_per_head;   // D / 8: vectors of one head row
  uint32_t vectors;           // T * H * D / 8, < 2^31
};

}  // namespace sparse_decode::merge
