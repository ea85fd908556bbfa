#include "cuda_device.h"

#include <cuda_runtime_api.h>

namespace sparse_decode::cli {
namespace {

// "13.0" of 13000.
std::string cuda_version(int version) {
  return std::to_string(version / 1000) + "." + std::to_string(version % 1000 / 10);
}

}  // namespace

bool find_cuda_device(std::string* why) {
  int count = 0;
  const cudaError_t status = cudaGetDeviceCount(&count);
  cudaGetLastError();
  if (status == cudaSuccess && count > 0) return true;
  const std::string call = std::string("cudaGetDeviceCount: ") + cudaGetErrorName(status);
  int driver = 0, runtime = 0;
  cudaDriverGetVersion(&driver);
  cudaRuntimeGetVersion(&runtime);
  if (status == cudaSuccess) {
    *why = "no CUDA device found (cudaGetDeviceCount: 0 devices)";
  } else if (driver == 0) {
    // The runtime reports a missing driver as an insufficient one
    // (cudaErrorInsufficientDriver), which would suggest an upgrade.
    *why = "no CUDA device found (no CUDA driver is installed: cudaDriverGetVersion gives 0)";
  } else if (status == cudaErrorInsufficientDriver) {
    *why = "the CUDA driver (CUDA " + cuda_version(driver) + ") is older than this program's runtime (CUDA " +
           cuda_version(runtime) + "): a newer driver would let the GPU run it (" + call + ")";
  } else if (status == cudaErrorNoDevice) {
    *why = "no CUDA device found (" + call + ")";
  } else {
    *why = "no usable CUDA device (" + call + ": " + cudaGetErrorString(status) + ")";
  }
  return false;
}

}  // namespace sparse_decode::cli
