#include "common/device_support.h"

#include <cuda_runtime_api.h>

#include <algorithm>

#include "common/per_device.h"

namespace sparse_decode {

Status cuda_status(int error, const char* what) {
  if (error == cudaSuccess) return Status::Ok();
  return Status::CudaError(std::string(what) + ": " + cudaGetErrorString(static_cast<cudaError_t>(error)));
}

namespace {

// major * 10 + minor of `device` (0: not known yet).
int compute_capability(int device) {
  static PerDeviceCache<int> cache;
  return cache.get(device, 0, [device] {
    int major = 0, minor = 0;
    cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device);
    cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device);
    return major * 10 + minor;
  });
}

}  // namespace

int64_t device_sm_count() {
  static PerDeviceCache<int> cache;
  const int device = current_device();
  if (device < 0) return 0;
  return cache.get(device, 0, [device] {
    int sms = 0;
    if (cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device) != cudaSuccess) {
      cudaGetLastError();
      return 0;
    }
    return sms;
  });
}

size_t split_launch_smem(size_t smem, int64_t ctas, bool pdl) {
  return pdl && ctas <= device_sm_count() ? std::max(smem, kSmAloneSmemBytes) : smem;
}

Status hopper_device_status(const std::string& prefix) {
  int device = 0;
  if (cudaGetDevice(&device) != cudaSuccess) {
    cudaGetLastError();
    return Status::NotSupported(prefix + "device memory: no CUDA device is available");
  }
  if (const int capability = compute_capability(device); capability != 90) {
    return Status::NotSupported(prefix + "device: the kernels are built for sm_90a (Hopper), the device is sm_" +
                                std::to_string(capability));
  }
  return Status::Ok();
}

Status launch_kernel(const void* kernel, const LaunchConfig& launch, void* params, const char* what) {
  void* kernel_args[] = {params};
  return cuda_status(cudaLaunchKernelExC(&launch.config, kernel, kernel_args), what);
}

}  // namespace sparse_decode
