// The device mirror of a case's arena: one allocation, grown as needed, and
// one stream for the calls.
#pragma once

#include <string>
#include <vector>

#include "fuzz/fuzz.h"

namespace sparse_decode::fuzz {

// Whether a CUDA device is present (why not, in `why`).
bool cuda_available(std::string* why);

class CudaDevice : public Device {
 public:
  CudaDevice();
  ~CudaDevice() override;
  CudaDevice(const CudaDevice&) = delete;
  CudaDevice& operator=(const CudaDevice&) = delete;

  bool host_memory() const override { return false; }
  uint8_t* base() override { return base_; }
  void upload(const Arena& arena) override;
  std::string download(const Arena& arena, std::vector<uint8_t>& after) override;
  void* stream() override { return stream_; }
  void reserve(size_t bytes) override;

 private:
  uint8_t* base_ = nullptr;
  size_t capacity_ = 0;
  void* stream_ = nullptr;
};

// The CPU backend as the device: the arena mirrored in host memory.
class HostDevice : public Device {
 public:
  bool host_memory() const override { return true; }
  void reserve(size_t bytes) override;
  uint8_t* base() override { return mirror_.data(); }
  void upload(const Arena& arena) override;
  std::string download(const Arena& arena, std::vector<uint8_t>& after) override;
  void* stream() override { return nullptr; }

 private:
  std::vector<uint8_t> mirror_;
};

}  // namespace sparse_decode::fuzz
