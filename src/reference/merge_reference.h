// The double-precision CPU implementation of SPEC section 5 (merge_states):
// the oracle of the tests and the CPU backend for host memory.
#pragma once

#include <vector>

#include "sparse_decode/merge_states.h"

namespace sparse_decode::reference {

struct MergeResult {
  std::vector<double> out;  // [T, H, D]
  std::vector<double> lse;  // [T, H]: L, natural log; -inf where every rank is empty
};

// Computes SPEC section 5 from host pointers (args.memory is not looked at;
// args.out and args.out_lse are not written): for each token and head, the
// non-empty ranks' weights exp(lse_r - m) / sum_s exp(lse_s - m) (m their
// largest lse) fold their partials in rank order, starting from -0.0 (so
// that a weight of 1 gives the partial back, signed zeros included). Empty
// ranks (lse = -inf) are not read; every rank empty gives zeros and -inf;
// an lse of +inf or NaN gives NaN.
MergeResult merge_states(const MergeStatesArgs& args);

// Runs merge_states() and writes args.out (BF16 nearest even, or float32)
// and args.out_lse (if not null): the CPU backend.
void merge_states_host(const MergeStatesArgs& args);

}  // namespace sparse_decode::reference
