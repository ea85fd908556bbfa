// Whether the current CUDA device can run this build's kernels (sm_90a).
#pragma once

#include <string>

#include "sparse_decode/status.h"

namespace sparse_decode {

// Ok on an sm_90 device; else NotSupported, its message starting with `prefix`.
Status hopper_device_status(const std::string& prefix);

}  // namespace sparse_decode
