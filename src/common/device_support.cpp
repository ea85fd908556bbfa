#include "common/device_support.h"

#include <cuda_runtime_api.h>

namespace sparse_decode {

Status hopper_device_status(const std::string& prefix) {
  int device = 0;
  if (cudaGetDevice(&device) != cudaSuccess) {
    cudaGetLastError();
    return Status::NotSupported(prefix + "device memory: no CUDA device is available");
  }
  int major = 0, minor = 0;
  cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device);
  cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device);
  if (major != 9 || minor != 0) {
    return Status::NotSupported(prefix + "device: the kernels are built for sm_90a (Hopper), the device is sm_" +
                                std::to_string(major * 10 + minor));
  }
  return Status::Ok();
}

Status OncePerDevice::run() {
  int device = 0;
  int error = cudaGetDevice(&device);
  if (error == cudaSuccess) {
    if (device < kMaxDevices) {
      std::call_once(once_[device], [this, device] { error_[device] = setup_(); });
      error = error_[device];
    } else {
      error = setup_();
    }
  }
  if (error == cudaSuccess) return Status::Ok();
  return Status::CudaError(std::string(what_) + ": " + cudaGetErrorString(static_cast<cudaError_t>(error)));
}

}  // namespace sparse_decode
