// Test-side helpers for dsv4_decode_hca: the public host call with poisoned
// outputs, exact comparison of two fp64 results, and the full check of a
// synthetic problem against section 1 on its expansion.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#include "dsv4_checks.h"
#include "reference/dsv4_hca_reference.h"
#include "reference/dsv4_reference.h"
#include "sparse_decode/dsv4_decode_hca.h"
#include "testing/dsv4_hca_problem.h"

namespace sparse_decode::test {

inline HostOutput run_hca_host(const Dsv4HcaDecodeArgs& args) {
  return run_host_call(args, [](const Dsv4HcaDecodeArgs& a) { return dsv4_decode_hca(a, nullptr, 0, nullptr); });
}

// Bitwise the same doubles: both sides feed the same rows in the same order
// to the same softmax, so nothing may differ, not even by rounding.
inline void expect_same_result(const reference::Dsv4Result& got, const reference::Dsv4Result& want,
                               const char* what) {
  ASSERT_EQ(got.out.size(), want.out.size()) << what;
  ASSERT_EQ(got.lse.size(), want.lse.size()) << what;
  for (size_t i = 0; i < want.lse.size(); ++i) {
    ASSERT_TRUE(std::memcmp(&got.lse[i], &want.lse[i], sizeof(double)) == 0)
        << what << ": lse[" << i << "] = " << got.lse[i] << ", expected " << want.lse[i];
  }
  for (size_t i = 0; i < want.out.size(); ++i) {
    ASSERT_TRUE(std::memcmp(&got.out[i], &want.out[i], sizeof(double)) == 0)
        << what << ": out[" << i / kHeadDim << " (token * H + head), " << i % kHeadDim << "] = " << got.out[i]
        << ", expected " << want.out[i];
  }
  EXPECT_EQ(got.out_of_range, want.out_of_range) << what;
}

// Tokens whose every head got lse = -inf (nothing active).
inline int64_t empty_tokens(const reference::Dsv4Result& r, int heads) {
  int64_t empty = 0;
  for (size_t t = 0; t * heads < r.lse.size(); ++t) empty += std::isinf(r.lse[t * heads]) && r.lse[t * heads] < 0;
  return empty;
}

// The HCA reference equals section 1's on the expansion; the public host
// call writes it as BF16 (3e-3), float lse and the counter, every element
// finite. Returns the reference result.
inline reference::Dsv4Result check_hca_problem(const testing::Dsv4HcaProblem& p) {
  const Dsv4HcaDecodeArgs args = p.host_args(nullptr, nullptr);
  const testing::Dsv4HcaExpansion expansion = testing::expand_to_section1(p);
  const Dsv4DecodeArgs section1 = expansion.args(p, nullptr, nullptr);
  const reference::Dsv4Result ref = reference::dsv4_decode_hca(args);
  expect_same_result(ref, reference::dsv4_decode(section1), "HCA reference vs section 1 on the expansion");

  const int64_t T = args.num_tokens;
  const int H = args.num_heads;
  expect_host_matches(run_hca_host(args), ref, T, H, ref.out_of_range);
  return ref;
}

}  // namespace sparse_decode::test
