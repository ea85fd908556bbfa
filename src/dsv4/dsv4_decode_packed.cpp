// dsv4_decode_packed: validation, then the CPU backend for host memory. The
// GPU kernels for the packed layout are not written yet (issue #7), so device
// memory is refused as not supported, after validation and before anything
// is launched or written.
#include "sparse_decode/dsv4_decode_packed.h"

#include "reference/dsv4_packed_reference.h"

namespace sparse_decode {

Status supports(const Dsv4PackedDecodeArgs& args) {
  if (Status status = validate(args); !status.ok()) return status;
  if (args.memory == MemorySpace::kHost) return Status::Ok();
  // Refused even for T = 0 (a no-op): a caller that probes supports() with
  // an empty batch must not be told that device memory is served.
  return Status::NotSupported(
      "dsv4_decode_packed: device memory: the GPU kernels for the packed layout are not built yet (issue #7); "
      "host memory runs the CPU backend");
}

size_t workspace_size(const Dsv4PackedDecodeArgs&) { return 0; }

Status dsv4_decode_packed(const Dsv4PackedDecodeArgs& args, void*, size_t, CUstream_st*) {
  if (Status status = supports(args); !status.ok()) return status;
  if (args.num_tokens == 0) return Status::Ok();
  reference::dsv4_decode_packed_host(args);
  return Status::Ok();
}

}  // namespace sparse_decode
