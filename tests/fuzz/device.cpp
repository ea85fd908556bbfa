#include "fuzz/device.h"

#include <cuda_runtime_api.h>

#include <algorithm>
#include <stdexcept>
#include <string>

namespace sparse_decode::fuzz {
namespace {

void check(cudaError_t status, const char* what) {
  if (status != cudaSuccess) throw std::runtime_error(std::string(what) + ": " + cudaGetErrorString(status));
}

}  // namespace

bool cuda_available(std::string* why) {
  int count = 0;
  const cudaError_t status = cudaGetDeviceCount(&count);
  if (status != cudaSuccess) {
    if (why) *why = cudaGetErrorString(status);
    return false;
  }
  if (count == 0) {
    if (why) *why = "no CUDA device";
    return false;
  }
  return true;
}

CudaDevice::CudaDevice() {
  cudaStream_t s = nullptr;
  check(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), "cudaStreamCreate");
  stream_ = s;
}

CudaDevice::~CudaDevice() {
  if (base_) cudaFree(base_);
  if (stream_) cudaStreamDestroy(static_cast<cudaStream_t>(stream_));
}

void CudaDevice::reserve(size_t bytes) {
  if (bytes <= capacity_) return;
  if (base_) check(cudaFree(base_), "cudaFree");
  base_ = nullptr;
  capacity_ = 0;
  const size_t grown = std::max<size_t>(bytes, 64u << 20);
  check(cudaMalloc(reinterpret_cast<void**>(&base_), grown), "cudaMalloc");
  capacity_ = grown;
}

void CudaDevice::upload(const Arena& arena) {
  reserve(arena.size());
  // The workspace's contents are ignored by the calls: poison it anyway.
  check(cudaMemsetAsync(base_, 0xFF, arena.size(), static_cast<cudaStream_t>(stream_)), "poison");
  for (auto [begin, end] : arena.compared_ranges()) {
    check(cudaMemcpyAsync(base_ + begin, arena.image().data() + begin, end - begin, cudaMemcpyHostToDevice,
                          static_cast<cudaStream_t>(stream_)),
          "upload");
  }
  check(cudaStreamSynchronize(static_cast<cudaStream_t>(stream_)), "upload");
}

std::string CudaDevice::download(const Arena& arena, std::vector<uint8_t>& after) {
  const cudaError_t kernel = cudaStreamSynchronize(static_cast<cudaStream_t>(stream_));
  if (kernel != cudaSuccess) return std::string("the call failed on the device: ") + cudaGetErrorString(kernel);
  after.assign(arena.size(), 0);
  for (auto [begin, end] : arena.compared_ranges()) {
    check(cudaMemcpy(after.data() + begin, base_ + begin, end - begin, cudaMemcpyDeviceToHost), "download");
  }
  return {};
}

void HostDevice::reserve(size_t bytes) {
  // The CPU backend writes in place: the mirror must not move once a case has its base.
  if (bytes > mirror_.size()) mirror_.assign(std::max<size_t>(bytes, 64u << 20), 0);
}

void HostDevice::upload(const Arena& arena) {
  reserve(arena.size());
  for (auto [begin, end] : arena.compared_ranges()) {
    std::copy(arena.image().begin() + static_cast<std::ptrdiff_t>(begin),
              arena.image().begin() + static_cast<std::ptrdiff_t>(end), mirror_.begin() + static_cast<std::ptrdiff_t>(begin));
  }
}

std::string HostDevice::download(const Arena& arena, std::vector<uint8_t>& after) {
  after.assign(arena.size(), 0);
  for (auto [begin, end] : arena.compared_ranges()) {
    std::copy(mirror_.begin() + static_cast<std::ptrdiff_t>(begin), mirror_.begin() + static_cast<std::ptrdiff_t>(end),
              after.begin() + static_cast<std::ptrdiff_t>(begin));
  }
  return {};
}

}  // namespace sparse_decode::fuzz
