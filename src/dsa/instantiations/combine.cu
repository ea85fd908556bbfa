// Explicit instantiation: the combine kernel at each bound on the splits.
#include "common/dispatch.h"
#include "dsa/instantiations/kernels.h"
#include "dsa/kernels/combine_kernel.cuh"

namespace sparse_decode::dsa {
const void* combine_kernel_for(int max_splits) {
  return with_bound<4, 8, 16, 32>(max_splits, [](auto bound) {
    return reinterpret_cast<const void*>(&combine_kernel<decltype(bound)::value>);
  });
}
}  // namespace sparse_decode::dsa
