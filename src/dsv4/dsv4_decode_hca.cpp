// dsv4_decode_hca: validation, then the CPU backend for host memory. Device
// memory is refused as not supported: there is no GPU kernel yet
// (docs/hca_layout.md says what it will need).
#include "sparse_decode/dsv4_decode_hca.h"

#include "reference/dsv4_hca_reference.h"

namespace sparse_decode {

Status supports(const Dsv4HcaDecodeArgs& args) {
  if (Status status = validate(args); !status.ok()) return status;
  if (args.memory == MemorySpace::kHost) return Status::Ok();
  // At any T, so that a caller probing with an empty batch learns it too.
  return Status::NotSupported(
      "dsv4_decode_hca: device memory is not served by this build (no GPU kernel for SPEC section 3 yet); "
      "host memory runs the CPU backend");
}

size_t workspace_size(const Dsv4HcaDecodeArgs&) { return 0; }

Status dsv4_decode_hca(const Dsv4HcaDecodeArgs& args, void*, size_t, CUstream_st*) {
  if (Status status = supports(args); !status.ok()) return status;
  if (args.num_tokens > 0) reference::dsv4_decode_hca_host(args);
  return Status::Ok();
}

}  // namespace sparse_decode
