// dsv4_decode_packed: validation, then the CPU backend for host memory or the
// packed-row GPU kernels for device memory (docs/kernels/packed.md).
#include "sparse_decode/dsv4_decode_packed.h"

#include "common/validation.h"
#include "dsv4_packed/dispatch.h"
#include "dsv4_packed/launch.h"
#include "reference/dsv4_packed_reference.h"

namespace sparse_decode {

Status supports(const Dsv4PackedDecodeArgs& args) {
  if (Status status = validate(args); !status.ok()) return status;
  if (args.memory == MemorySpace::kHost) return Status::Ok();
  // Device checks run for T = 0 too: a caller that probes with an empty
  // batch learns whether this machine serves device memory.
  return dsv4_packed::kernels_support(args);
}

// The split paths' shares (kAuto's small batches, or a forced kSplit or
// kSplitH64); the other kernels combine in distributed shared memory and
// need none.
size_t workspace_size(const Dsv4PackedDecodeArgs& args) {
  if (!validate(args).ok() || args.memory == MemorySpace::kHost) return 0;
  return dsv4_packed::is_split(dsv4_packed::choose_kernel(args)) ? dsv4_packed::split_workspace_bytes(args) : 0;
}

Status dsv4_decode_packed(const Dsv4PackedDecodeArgs& args, void* workspace, size_t workspace_bytes,
                          CUstream_st* stream) {
  if (Status status = supports(args); !status.ok()) return status;
  if (args.memory == MemorySpace::kDevice && dsv4_packed::is_split(args.kernel) && args.num_tokens > 0 &&
      !dsv4_packed::split_workspace_fits(args, workspace, workspace_bytes)) {
    return validation::workspace_too_small("the split path", dsv4_packed::split_workspace_bytes(args), workspace,
                                           workspace_bytes);
  }
  if (args.num_tokens == 0) return Status::Ok();
  if (args.memory == MemorySpace::kHost) {
    reference::dsv4_decode_packed_host(args);
    return Status::Ok();
  }
  return dsv4_packed::launch(args, workspace, workspace_bytes, stream);
}

}  // namespace sparse_decode
