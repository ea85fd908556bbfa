// Explicit instantiation: the merge kernel for each partial and output
// dtype, at each rank batch of MergeTraits::bound.
#include "common/dispatch.h"
#include "merge/instantiations/kernels.h"
#include "merge/kernels/merge_kernel.cuh"
#include "merge/traits.cuh"

namespace sparse_decode::merge {
namespace {

template <MergeDType kIn, MergeDType kOut>
const void* for_batch(int batch) {
  if constexpr (MergeTraits::max_batch(kIn) == 4) {
    return with_value<2, 4>(batch, [](auto b) {
      return reinterpret_cast<const void*>(&merge_kernel<kIn, kOut, decltype(b)::value>);
    });
  } else {
    return with_value<2, 4, 8>(batch, [](auto b) {
      return reinterpret_cast<const void*>(&merge_kernel<kIn, kOut, decltype(b)::value>);
    });
  }
}

template <MergeDType kIn>
const void* for_output(MergeDType out_dtype, int batch) {
  return out_dtype == MergeDType::kFloat32 ? for_batch<kIn, MergeDType::kFloat32>(batch)
                                           : for_batch<kIn, MergeDType::kBFloat16>(batch);
}

}  // namespace

const void* merge_kernel_for(MergeDType partial_dtype, MergeDType out_dtype, int ranks) {
  const int batch = MergeTraits::bound(ranks, partial_dtype);
  return partial_dtype == MergeDType::kFloat32 ? for_output<MergeDType::kFloat32>(out_dtype, batch)
                                               : for_output<MergeDType::kBFloat16>(out_dtype, batch);
}

}  // namespace sparse_decode::merge
