// Small helpers shared by the CPU and GPU suites: seeds and output poisoning.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <cstdlib>
#include <random>
#include <string>

namespace sparse_decode::test {

// Every test case draws fresh random inputs from its own seed, printed on
// failure; SPARSE_DECODE_TEST_SEED=<seed> replays a failing case.
inline uint64_t fresh_seed() {
  if (const char* fixed = std::getenv("SPARSE_DECODE_TEST_SEED")) return std::strtoull(fixed, nullptr, 10);
  std::random_device device;
  return (uint64_t{device()} << 32) ^ device();
}

inline std::string seed_message(uint64_t seed) {
  return "seed " + std::to_string(seed) + " (replay with SPARSE_DECODE_TEST_SEED=" + std::to_string(seed) + ")";
}

// Output poison: BF16 NaN (0xFFFF) in out, a NaN with a recognizable payload
// in lse, so that any element a call forgets to write fails the checks.
inline constexpr uint16_t kOutPoison = 0xFFFF;
inline constexpr uint32_t kLsePoisonBits = 0x7FBADBADu;

}  // namespace sparse_decode::test
