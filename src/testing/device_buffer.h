// Owning device allocations for the tests, the demo and the benchmark, and a
// device-side copy of a synthetic problem.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "testing/dsv4_hca_problem.h"
#include "testing/dsv4_packed_problem.h"
#include "testing/dsv4_problem.h"

struct CUstream_st;

namespace sparse_decode::testing {

// Whether a CUDA device is present; `why` says why not.
bool cuda_device_available(std::string* why = nullptr);

// Throws std::runtime_error with the CUDA error string when `status` is an error.
void check_cuda(int status, const char* what);

class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  explicit DeviceBuffer(size_t bytes);
  DeviceBuffer(const void* host, size_t bytes);  // allocate and copy
  template <typename T>
  explicit DeviceBuffer(const std::vector<T>& host) : DeviceBuffer(host.data(), host.size() * sizeof(T)) {}
  ~DeviceBuffer();
  DeviceBuffer(DeviceBuffer&& other) noexcept;
  DeviceBuffer& operator=(DeviceBuffer&& other) noexcept;
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;

  void* get() const { return data_; }
  template <typename T>
  T* as() const { return static_cast<T*>(data_); }
  size_t bytes() const { return bytes_; }
  void fill_bytes(uint8_t value);                   // synchronous memset (legacy stream)
  void fill_bytes(uint8_t value, CUstream_st* stream);  // memset queued on `stream` (synchronize before use elsewhere)
  void download(void* host, size_t bytes) const;    // synchronous copy to the host
  template <typename T>
  std::vector<T> download() const {
    std::vector<T> host(bytes_ / sizeof(T));
    download(host.data(), host.size() * sizeof(T));
    return host;
  }

 private:
  void* data_ = nullptr;
  size_t bytes_ = 0;
};

// What a device problem's call writes: out [T, H, 512] BF16, lse [T, H] and
// the out-of-range counter (zeroed).
struct DeviceOutputs {
  DeviceOutputs(int64_t tokens, int32_t heads);
  DeviceBuffer out, lse, out_of_range_count;
};

// A problem's inputs on the device, plus its outputs.
struct Dsv4DeviceProblem : DeviceOutputs {
  explicit Dsv4DeviceProblem(const Dsv4Problem& problem);
  DeviceBuffer q, swa_kv, compressed_kv, indices, lens, sinks;
  Dsv4DecodeArgs args;  // device memory; lse and out_of_range_count set
};

// A packed problem's inputs on the device, plus its outputs.
struct Dsv4PackedDeviceProblem : DeviceOutputs {
  explicit Dsv4PackedDeviceProblem(const Dsv4PackedProblem& problem);
  DeviceBuffer q, swa_pool, extra_pool, swa_indices, swa_lens, extra_indices, extra_lens, sinks;
  Dsv4PackedDecodeArgs args;  // device memory; lse and out_of_range_count set
};

// An HCA problem's inputs on the device, plus its outputs: `hca` runs
// dsv4_decode_hca, `section1` dsv4_decode on the host-side expansion (the
// same q, pools, sinks and outputs).
struct Dsv4HcaDeviceProblem : DeviceOutputs {
  explicit Dsv4HcaDeviceProblem(const Dsv4HcaProblem& problem);
  Dsv4HcaExpansion expansion;
  DeviceBuffer q, swa_kv, compressed_kv, swa_rows, swa_lens, block_table, lens, hca_seq_lens, cum_seq_lens_q, sinks,
      expanded_indices, expanded_lens;
  Dsv4HcaDecodeArgs hca;   // device memory; lse and out_of_range_count set
  Dsv4DecodeArgs section1;  // the same
};

}  // namespace sparse_decode::testing
