// The FP16 gate of dsa_decode (seed 002 accepts gate.dtype float16; the
// sigmoid is rounded to the gate's dtype): the binary16 codec of
// src/reference/formats.cpp against the compiler's _Float16, and the
// reference's gate and output against an independent computation.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "reference/dsa_reference.h"
#include "reference/formats.h"
#include "support/test_support.h"
#include "testing/dsa_problem.h"

namespace sparse_decode {
namespace {

double f16_value(uint16_t bits) {
  _Float16 h;
  std::memcpy(&h, &bits, 2);
  return static_cast<double>(h);
}

uint16_t f16_bits(double value) {
  const _Float16 h = static_cast<_Float16>(value);  // one rounding, to nearest even
  uint16_t bits;
  std::memcpy(&bits, &h, 2);
  return bits;
}

TEST(Float16Codec, DecodesEveryCodeAsTheCompilerDoes) {
  for (uint32_t code = 0; code < 0x10000; ++code) {
    const uint16_t bits = static_cast<uint16_t>(code);
    const double want = f16_value(bits), got = reference::decode_f16(bits);
    if (std::isnan(want)) {
      ASSERT_TRUE(std::isnan(got)) << code;
      continue;
    }
    ASSERT_EQ(got, want) << code;
    ASSERT_EQ(std::signbit(got), std::signbit(want)) << code;
    ASSERT_EQ(reference::encode_f16(got), bits) << "round trip of " << code;
  }
  EXPECT_EQ(reference::encode_f16(std::numeric_limits<double>::quiet_NaN()) & 0x7C00, 0x7C00);
}

// Random magnitudes over the whole range (subnormals, the overflow edge),
// and every tie between two neighbouring codes: nearest even, as the compiler.
TEST(Float16Codec, EncodesAsTheCompilerDoes) {
  const uint64_t seed = test::fresh_seed();
  SCOPED_TRACE(test::seed_message(seed));
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> exponent(-30.0, 17.0), mantissa(1.0, 2.0);
  for (int i = 0; i < 200000; ++i) {
    const double value = (rng() & 1 ? -1.0 : 1.0) * std::ldexp(mantissa(rng), static_cast<int>(exponent(rng)));
    ASSERT_EQ(reference::encode_f16(value), f16_bits(value)) << value;
  }
  for (uint32_t code = 0; code < 0x7BFF; ++code) {
    const double low = reference::decode_f16(static_cast<uint16_t>(code));
    const double high = reference::decode_f16(static_cast<uint16_t>(code + 1));
    const double tie = (low + high) / 2;  // exact in double
    ASSERT_EQ(reference::encode_f16(tie), f16_bits(tie)) << code;
    ASSERT_EQ(reference::encode_f16(-tie), f16_bits(-tie)) << code;
  }
  for (double edge : {65504.0, 65519.0, 65520.0, 70000.0, 1e300, std::ldexp(1.0, -25), std::ldexp(1.5, -25),
                      std::ldexp(1.0, -24), std::ldexp(1.0, -14), 0.0, -0.0}) {
    EXPECT_EQ(reference::encode_f16(edge), f16_bits(edge)) << edge;
  }
}

// With an FP16 gate every active row's output is the ungated output times
// the sigmoid of the FP16 gate value, rounded to FP16 (checked with the
// compiler's _Float16, not the reference's codec).
TEST(DsaReference, Float16GateIsTheSigmoidRoundedToFloat16) {
  for (bool strided : {false, true}) {
    const uint64_t seed = test::fresh_seed();
    SCOPED_TRACE(test::seed_message(seed));
    testing::DsaProblemConfig c;
    c.requests = 3, c.query_len = 2, c.groups = 2, c.heads = 5, c.block_size = 8, c.regions = 4, c.max_blocks = 8;
    c.cache_dtype = DType::kBFloat16, c.gate = true, c.gate_dtype = DsaGateDType::kFloat16, c.strided = strided;
    c.seed = seed;
    const testing::DsaProblem p = testing::make_dsa_problem(c);
    DsaDecodeArgs a = p.host_args(nullptr);
    ASSERT_EQ(a.gate_dtype, DsaGateDType::kFloat16);
    const reference::DsaResult gated = reference::dsa_decode(a);
    a.gate = nullptr;
    const reference::DsaResult plain = reference::dsa_decode(a);
    a.gate = p.gate.data();
    int64_t checked = 0, below_one = 0;
    for (int64_t r = 0; r < a.num_rows; ++r) {
      if (!p.active[r] || gated.keys[r] == 0) continue;  // an inactive row's gate is NaN: never read
      for (int h = 0; h < a.num_heads; ++h) {
        const int64_t index = (r / a.num_groups) * a.gate_token_stride + (r % a.num_groups) * a.num_heads + h;
        uint16_t bits;
        std::memcpy(&bits, &p.gate[index * 2], 2);
        const double x = f16_value(bits);
        const double want = f16_value(f16_bits(1.0 / (1.0 + std::exp(-x))));
        ASSERT_EQ(reference::dsa_gate(a, r, h), want) << "row " << r << " head " << h;
        below_one += want < 1.0;
        const size_t begin = (static_cast<size_t>(r) * a.num_heads + h) * kDsaHeadDim;
        for (int d = 0; d < kDsaHeadDim; ++d) ASSERT_EQ(gated.out[begin + d], plain.out[begin + d] * want);
        ++checked;
      }
    }
    EXPECT_GT(checked, 0);
    EXPECT_GT(below_one, 0) << "every gate rounded to 1: the test proves little";
  }
}

}  // namespace
}  // namespace sparse_decode
