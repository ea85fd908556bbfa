// Whether the current CUDA device can run this build's kernels (sm_90a).
#pragma once

#include <cstddef>
#include <cstdint>
#include <mutex>
#include <string>

#include "sparse_decode/status.h"

struct CUstream_st;

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

// Launches `kernel` (one parameter struct at `params`) on `ctas` x `threads`
// with `smem` bytes of dynamic shared memory, as a programmatic dependent
// launch when `pdl`; the result as cuda_status(..., what).
Status launch_kernel(const void* kernel, int64_t ctas, int threads, size_t smem, bool pdl, CUstream_st* stream,
                     void* params, const char* what);

// Set-up that must run once for each device (kernel attributes belong to a
// device's context): the first call on a device runs it, later calls return
// its outcome.
class OncePerDevice {
 public:
  using Setup = int (*)();  // returns a cudaError_t
  OncePerDevice(Setup setup, const char* what) : setup_(setup), what_(what) {}
  Status run();

 private:
  static constexpr int kMaxDevices = 64;
  Setup setup_;
  const char* what_;
  std::once_flag once_[kMaxDevices];
  int error_[kMaxDevices] = {};
};

}  // namespace sparse_decode
