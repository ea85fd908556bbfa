// What the GPU suites share: the accuracy bound, the output poison, and a
// fixture that skips every test without a CUDA device.
#pragma once

#include <gtest/gtest.h>

#include <cuda_runtime_api.h>

#include <cstdint>
#include <string>
#include <vector>

#include "reference/formats.h"
#include "testing/device_buffer.h"

namespace sparse_decode::gpu_test {

inline constexpr double kMaxRelativeError = 3e-3;  // DESIGN.md "Accuracy"
inline constexpr uint8_t kPoisonByte = 0xFF;       // BF16 0xFFFF and float 0xFFFFFFFF are NaN
inline constexpr int32_t kCountStart = 7;          // the out-of-range counter is added to, never reset

class GpuTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string why;
    if (!testing::cuda_device_available(&why)) GTEST_SKIP() << "no CUDA device: " << why;
  }
};

// A host vector on the device; an empty one gives an empty buffer (null).
template <typename T>
testing::DeviceBuffer upload(const std::vector<T>& host) {
  return host.empty() ? testing::DeviceBuffer() : testing::DeviceBuffer(host);
}

// A call's outputs, downloaded: out [T, H, 512] BF16 bits, lse [T, H], the counter.
struct DeviceResult {
  std::vector<uint16_t> out;
  std::vector<float> lse;
  int32_t count = 0;
  std::vector<double> out_values() const {
    std::vector<double> values(out.size());
    for (size_t i = 0; i < out.size(); ++i) values[i] = reference::decode_bf16(out[i]);
    return values;
  }
};

// Poisons out and lse (NaN) and sets the counter to kCountStart.
inline void poison_outputs(testing::DeviceBuffer& out, testing::DeviceBuffer& lse, testing::DeviceBuffer& count) {
  out.fill_bytes(kPoisonByte);
  lse.fill_bytes(kPoisonByte);
  testing::check_cuda(
      static_cast<int>(cudaMemcpy(count.get(), &kCountStart, sizeof(kCountStart), cudaMemcpyHostToDevice)),
      "counter");
}

// Waits for the device, then downloads the outputs.
inline DeviceResult download_outputs(const testing::DeviceBuffer& out, const testing::DeviceBuffer& lse,
                                     const testing::DeviceBuffer& count) {
  testing::check_cuda(static_cast<int>(cudaDeviceSynchronize()), "kernel");
  DeviceResult r;
  r.out = out.download<uint16_t>();
  r.lse = lse.download<float>();
  count.download(&r.count, sizeof(r.count));
  return r;
}

}  // namespace sparse_decode::gpu_test
