#include "common/per_device.h"

#include <cuda_runtime_api.h>

#include "common/device_support.h"

namespace sparse_decode {

int current_device() {
  int device = 0;
  if (cudaGetDevice(&device) != cudaSuccess) {
    cudaGetLastError();
    return -1;
  }
  return device;
}

Status OncePerDevice::run() {
  int device = 0;
  int error = cudaGetDevice(&device);
  if (error == cudaSuccess) {
    if (device < kMaxCachedDevices) {
      std::call_once(once_[device], [this, device] { error_[device] = setup_(); });
      error = error_[device];
    } else {
      error = setup_();
    }
  }
  return cuda_status(error, what_);
}

}  // namespace sparse_decode
