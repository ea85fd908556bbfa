// CUDA_CHECK(call): throws std::runtime_error naming the call and the CUDA
// error when `call` fails, so every runtime call of the harness is checked.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <vector>

#include "testing/device_buffer.h"

#define SPARSE_DECODE_CUDA_CHECK(call) \
  ::sparse_decode::testing::check_cuda(static_cast<int>(call), #call)

namespace sparse_decode::bench {

// `count` elements of device memory copied to the host (synchronous).
template <typename T>
std::vector<T> download(const void* device, size_t count) {
  std::vector<T> host(count);
  if (count) SPARSE_DECODE_CUDA_CHECK(cudaMemcpy(host.data(), device, count * sizeof(T), cudaMemcpyDeviceToHost));
  return host;
}

}  // namespace sparse_decode::bench
