// Shared by the validation suites (cpu/dsv4/test_validation.cpp,
// cpu/dsv4_packed/test_validation.cpp, cpu/dsv4_hca/test_validation.cpp): the
// poisoned outputs of a valid host call, and the check that one refusal is
// the same through validate(), supports() and the call, for host and device
// memory, and writes nothing.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "support/dsv4_checks.h"

namespace sparse_decode::test {

// out (BF16) and lse of tokens x heads rows, poisoned, and the counter at
// kCountStart: what a valid call's arguments point at.
struct PoisonedOutputs {
  PoisonedOutputs(int64_t tokens, int heads)
      : out(static_cast<size_t>(tokens) * heads * kHeadDim, kOutPoison),
        lse(static_cast<size_t>(tokens) * heads, lse_poison()) {}

  bool untouched() const {
    std::vector<uint32_t> bits(lse.size());
    std::memcpy(bits.data(), lse.data(), bits.size() * 4);
    return std::all_of(out.begin(), out.end(), [](uint16_t v) { return v == kOutPoison; }) &&
           std::all_of(bits.begin(), bits.end(), [](uint32_t v) { return v == kLsePoisonBits; }) &&
           count == kCountStart;
  }
  bool fully_written() const {
    return std::none_of(out.begin(), out.end(), [](uint16_t v) { return v == kOutPoison; }) &&
           std::none_of(lse.begin(), lse.end(), [](float v) { return std::isnan(v); });
  }

  std::vector<uint16_t> out;
  std::vector<float> lse;
  int32_t count = kCountStart;
};

// `args` (a broken valid call) is refused as InvalidArgument by validate(),
// supports() and `decode(args)`, with a message that contains `names` and
// "expected", for host and device memory alike (validation comes before any
// device query; the label "memory" keeps its broken memory space), and
// `outputs` stay untouched. Leaves args with the last memory space tried.
template <typename Args, typename Decode>
void expect_refused_everywhere(Args& args, const std::string& label, const std::string& names, Decode decode,
                               const PoisonedOutputs& outputs) {
  for (MemorySpace memory : {MemorySpace::kHost, MemorySpace::kDevice}) {
    if (label != "memory") args.memory = memory;
    SCOPED_TRACE(memory == MemorySpace::kHost ? "host memory" : "device memory");
    const Status statuses[] = {validate(args), supports(args), decode(args)};
    for (const Status& status : statuses) {
      EXPECT_EQ(status.code(), StatusCode::kInvalidArgument) << status.message();
      EXPECT_NE(status.message().find(names), std::string::npos) << "message: " << status.message();
      EXPECT_NE(status.message().find("expected"), std::string::npos) << "message: " << status.message();
    }
    EXPECT_TRUE(outputs.untouched()) << "a refused call wrote to out, lse or the counter";
  }
}

}  // namespace sparse_decode::test
