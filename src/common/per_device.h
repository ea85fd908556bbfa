// Host state kept once per CUDA device: kernel attributes belong to a
// device's context, and occupancy queries are not free.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <mutex>

#include "sparse_decode/status.h"

namespace sparse_decode {

inline constexpr int kMaxCachedDevices = 64;

// The current device (-1 without one; the CUDA error is cleared).
int current_device();

// Set-up that must run once for each device: the first call on a device
// runs it, later calls return its outcome.
class OncePerDevice {
 public:
  using Setup = int (*)();  // returns a cudaError_t
  OncePerDevice(Setup setup, const char* what) : setup_(setup), what_(what) {}
  Status run();

 private:
  Setup setup_;
  const char* what_;
  std::once_flag once_[kMaxCachedDevices];
  int error_[kMaxCachedDevices] = {};
};

// kKeys values a device, each computed once by the caller's query; a result
// of 0 means "not known" and is computed again at the next call (no device
// yet, a failed query). Devices past kMaxCachedDevices are never cached.
template <class T, size_t kKeys = 1>
class PerDeviceCache {
 public:
  template <class Query>
  T get(int device, size_t key, Query&& query) {
    if (device < 0 || device >= kMaxCachedDevices) return query();
    std::atomic<T>& slot = values_[device][key];
    if (const T known = slot.load(std::memory_order_relaxed); known != T{}) return known;
    const T value = query();
    slot.store(value, std::memory_order_relaxed);
    return value;
  }

 private:
  std::atomic<T> values_[kMaxCachedDevices][kKeys] = {};
};

}  // namespace sparse_decode
