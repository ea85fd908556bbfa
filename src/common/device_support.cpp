#include "common/device_support.h"

#include <cuda_runtime_api.h>

#include <algorithm>
#include <atomic>

#include "common/launch_config.h"

namespace sparse_decode {

Status cuda_status(int error, const char* what) {
  if (error == cudaSuccess) return Status::Ok();
  return Status::CudaError(std::string(what) + ": " + cudaGetErrorString(static_cast<cudaError_t>(error)));
}

namespace {

constexpr int kMaxCachedDevices = 64;

// query(device), queried once a device (a result of 0 is queried again).
template <class Query>
int cached_per_device(std::atomic<int> (&cache)[kMaxCachedDevices], int device, Query query) {
  if (device < kMaxCachedDevices) {
    if (const int known = cache[device].load(std::memory_order_relaxed); known != 0) return known;
  }
  const int value = query(device);
  if (device < kMaxCachedDevices) cache[device].store(value, std::memory_order_relaxed);
  return value;
}

// major * 10 + minor of `device` (0: not known yet).
int compute_capability(int device) {
  static std::atomic<int> cache[kMaxCachedDevices] = {};
  return cached_per_device(cache, device, [](int d) {
    int major = 0, minor = 0;
    cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, d);
    cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, d);
    return major * 10 + minor;
  });
}

}  // namespace

int64_t device_sm_count() {
  static std::atomic<int> cache[kMaxCachedDevices] = {};
  int device = 0;
  if (cudaGetDevice(&device) != cudaSuccess) {
    cudaGetLastError();
    return 0;
  }
  return cached_per_device(cache, device, [](int d) {
    int sms = 0;
    if (cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, d) != cudaSuccess) {
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
  return cuda_status(error, what_);
}

Status launch_kernel(const void* kernel, int64_t ctas, int threads, size_t smem, bool pdl, CUstream_st* stream,
                     void* params, const char* what) {
  LaunchConfig launch(ctas, threads, smem, pdl, stream);
  void* kernel_args[] = {params};
  return cuda_status(cudaLaunchKernelExC(&launch.config, kernel, kernel_args), what);
}

}  // namespace sparse_decode
