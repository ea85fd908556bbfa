// Whether a CUDA device is there for the demo's GPU path, and when not, what
// was found: no driver, no device, or a driver older than the runtime.
#pragma once

#include <string>

namespace sparse_decode::cli {

// True when cudaGetDeviceCount finds a device. Otherwise `why` says what was
// found, e.g. "no CUDA device found (cudaGetDeviceCount: cudaErrorNoDevice)".
bool find_cuda_device(std::string* why);

}  // namespace sparse_decode::cli
