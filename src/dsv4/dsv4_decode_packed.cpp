// dsv4_decode_packed: validation, then the CPU backend for host memory or the
// packed-row GPU kernel for device memory (docs/kernels/packed.md).
#include "sparse_decode/dsv4_decode_packed.h"

#include "dsv4/packed_launch.h"
#include "reference/dsv4_packed_reference.h"

namespace sparse_decode {

Status supports(const Dsv4PackedDecodeArgs& args) {
  if (Status status = validate(args); !status.ok()) return status;
  if (args.memory == MemorySpace::kHost) return Status::Ok();
  // Device checks run for T = 0 too: a caller that probes with an empty
  // batch learns whether this machine serves device memory.
  return dsv4::packed_supports(args);
}

// The kernel combines its partial results in distributed shared memory: no scratch.
size_t workspace_size(const Dsv4PackedDecodeArgs&) { return 0; }

Status dsv4_decode_packed(const Dsv4PackedDecodeArgs& args, void*, size_t, CUstream_st* stream) {
  if (Status status = supports(args); !status.ok()) return status;
  if (args.num_tokens == 0) return Status::Ok();
  if (args.memory == MemorySpace::kHost) {
    reference::dsv4_decode_packed_host(args);
    return Status::Ok();
  }
  return dsv4::launch_packed(args, stream);
}

}  // namespace sparse_decode
