// The current CUDA device: whether it runs this build's kernels (sm_90a),
// its SMs, and the launch of a kernel on it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "common/launch.h"
#include "sparse_decode/status.h"

namespace sparse_decode {

// Ok on an sm_90 device; else NotSupported, its message starting with `prefix`.
// The device's compute capability is read once a device (it is on every
// call's path).
Status hopper_device_status(const std::string& prefix);

// The current device's SMs (0 without a device); read once a device.
int64_t device_sm_count();

// Dynamic shared memory that keeps a CTA alone on its SM (two such CTAs do
// not fit an SM's 228 KiB, each with its 1 KiB reserve): a split kernel
// launched early under PDL asks for it when its grid fits one CTA an SM,
// so that CTAs still resident from the previous kernel cannot pack two of
// its CTAs onto one SM while other SMs idle (docs/kernels/split.md).
inline constexpr size_t kSmAloneSmemBytes = 228 * 1024 / 2;
static_assert(2 * (kSmAloneSmemBytes + 1024) > 228 * 1024, "two CTAs with this much shared memory exceed an SM");

// The dynamic shared memory a split kernel of `ctas` CTAs that needs `smem`
// launches with: at least kSmAloneSmemBytes under PDL when the grid fits
// one CTA an SM, else `smem`.
size_t split_launch_smem(size_t smem, int64_t ctas, bool pdl);

// Ok, or CudaError "what: <CUDA's message>" for `error` (a cudaError_t).
Status cuda_status(int error, const char* what);

// Launches `kernel` (one parameter struct at `params`) as `launch` says;
// the result as cuda_status(..., what). Every kernel of the library starts here.
Status launch_kernel(const void* kernel, const LaunchConfig& launch, void* params, const char* what);

}  // namespace sparse_decode
