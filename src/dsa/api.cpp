// dsa_decode: validation, then the CPU backend for host memory or the GPU
// kernels for device memory (src/dsa/kernels/, docs/kernels/dsa.md).
#include "sparse_decode/dsa_decode.h"

#include <cstdint>

#include "common/validation.h"
#include "dsa/dispatch.h"
#include "reference/dsa_reference.h"

namespace sparse_decode {

namespace {

// What supports() adds to validate().
Status device_status(const DsaDecodeArgs& args) {
  if (args.memory == MemorySpace::kHost || args.num_rows == 0) return Status::Ok();
  return dsa::kernels_support(args);
}

}  // namespace

Status supports(const DsaDecodeArgs& args) {
  if (Status status = validate(args); !status.ok()) return status;
  return device_status(args);
}

size_t workspace_size(const DsaDecodeArgs& args) {
  if (args.memory == MemorySpace::kHost || args.splits <= 1 || args.num_rows <= 0) return 0;
  // Per (row, split, head): 192 float32 normalized outputs, then one float32
  // log-sum-exp in a second array; 192 * 4 bytes keep the second 16-byte aligned.
  const size_t entries = static_cast<size_t>(args.num_rows) * static_cast<size_t>(args.splits) *
                         static_cast<size_t>(args.num_heads > 0 ? args.num_heads : 0);
  const size_t bytes = entries * (kDsaHeadDim + 1) * sizeof(float);
  return (bytes + 15) / 16 * 16;
}

Status dsa_decode(const DsaDecodeArgs& args, void* workspace, size_t workspace_bytes, CUstream_st* stream) {
  if (Status status = validate(args); !status.ok()) return status;
  if (args.num_rows == 0) return Status::Ok();
  if (args.memory == MemorySpace::kDevice) {
    const size_t needed = workspace_size(args);
    if (workspace_bytes < needed) {
      return validation::invalid("workspace_bytes: expected >= workspace_size(args) = ", needed, ", got ",
                                 workspace_bytes);
    }
    if (needed > 0 && (workspace == nullptr || !validation::aligned16(workspace))) {
      return validation::invalid("workspace: expected a non-null 16-byte aligned pointer");
    }
  }
  if (Status status = device_status(args); !status.ok()) return status;
  if (args.memory == MemorySpace::kDevice) return dsa::launch(args, workspace, stream);
  reference::dsa_decode_host(args);
  return Status::Ok();
}

}  // namespace sparse_decode
