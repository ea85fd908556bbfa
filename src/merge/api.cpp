// merge_states: validation, then the CPU backend for host memory or the GPU
// kernel for device memory (src/merge/kernels/, docs/kernels/merge.md).
#include "sparse_decode/merge_states.h"

#include "merge/dispatch.h"
#include "reference/merge_reference.h"

namespace sparse_decode {

namespace {

// What supports() adds to validate().
Status device_status(const MergeStatesArgs& args) {
  if (args.memory == MemorySpace::kHost || args.num_tokens == 0) return Status::Ok();
  return merge::kernels_support(args);
}

}  // namespace

Status supports(const MergeStatesArgs& args) {
  if (Status status = validate(args); !status.ok()) return status;
  return device_status(args);
}

Status merge_states(const MergeStatesArgs& args, CUstream_st* stream) {
  if (Status status = supports(args); !status.ok()) return status;
  if (args.num_tokens == 0) return Status::Ok();
  if (args.memory == MemorySpace::kDevice) return merge::launch(args, stream);
  reference::merge_states_host(args);
  return Status::Ok();
}

}  // namespace sparse_decode
