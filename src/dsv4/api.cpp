// dsv4_decode: validation, then the CPU backend for host memory or the GPU
// kernels for device memory.
#include "sparse_decode/dsv4_decode.h"
#include "sparse_decode/introspection.h"

#include "common/validation.h"
#include "dsv4/dispatch.h"
#include "dsv4/launch.h"
#include "reference/dsv4_reference.h"

namespace sparse_decode {

Status supports(const Dsv4DecodeArgs& args) {
  if (Status status = validate(args); !status.ok()) return status;
  if (args.memory == MemorySpace::kHost || args.num_tokens == 0) return Status::Ok();
  return dsv4::kernels_support(args);
}

size_t workspace_size(const Dsv4DecodeArgs& args) {
  if (args.memory == MemorySpace::kHost || !validate(args).ok()) return 0;
  return dsv4::call_workspace_bytes(args);
}

Status dsv4_decode(const Dsv4DecodeArgs& args, void* workspace, size_t workspace_bytes, CUstream_st* stream) {
  if (Status status = validate(args); !status.ok()) return status;
  if (args.memory == MemorySpace::kDevice && args.kernel == Dsv4Kernel::kSplit && args.num_tokens > 0 &&
      !dsv4::split_workspace_fits(args, workspace, workspace_bytes)) {
    return validation::workspace_too_small("the split kernel", dsv4::split_workspace_bytes(args), workspace,
                                           workspace_bytes);
  }
  // supports() without validating again: the device checks of a call that launches.
  if (args.memory == MemorySpace::kDevice && args.num_tokens > 0) {
    if (Status status = dsv4::kernels_support(args); !status.ok()) return status;
  }
  if (args.num_tokens == 0) return Status::Ok();
  if (args.memory == MemorySpace::kHost) {
    reference::dsv4_decode_host(args);
    return Status::Ok();
  }
  return dsv4::launch_dsv4(args, workspace, workspace_bytes, stream);
}

int64_t dsv4_small_batch_max_tokens(const Dsv4DecodeArgs& args) {
  const int64_t head_groups = (args.num_heads + 15) / 16;
  return dsv4::cluster_max_tokens(args.width, args.dtype) / (head_groups > 0 ? head_groups : 1);
}

Dsv4Kernel dsv4_chosen_kernel(const Dsv4DecodeArgs& args) { return dsv4::choose_kernel(args); }

}  // namespace sparse_decode
