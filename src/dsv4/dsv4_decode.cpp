// dsv4_decode: validation, then the CPU backend for host memory or the GPU
// kernels for device memory.
#include "sparse_decode/dsv4_decode.h"

#include "dsv4/small_batch.h"
#include "reference/dsv4_reference.h"

namespace sparse_decode {

Status supports(const Dsv4DecodeArgs& args) {
  if (Status status = validate(args); !status.ok()) return status;
  if (args.memory == MemorySpace::kHost || args.num_tokens == 0) return Status::Ok();
  return dsv4::small_batch_supports(args);
}

size_t workspace_size(const Dsv4DecodeArgs&) { return 0; }

Status dsv4_decode(const Dsv4DecodeArgs& args, void*, size_t, CUstream_st* stream) {
  if (Status status = supports(args); !status.ok()) return status;
  if (args.num_tokens == 0) return Status::Ok();
  if (args.memory == MemorySpace::kHost) {
    reference::dsv4_decode_host(args);
    return Status::Ok();
  }
  return dsv4::launch_small_batch(args, stream);
}

int64_t dsv4_small_batch_max_tokens(const Dsv4DecodeArgs& args) {
  return dsv4::small_batch_max_tokens(args.width);
}

}  // namespace sparse_decode
