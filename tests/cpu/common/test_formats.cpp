// Bit-exact number formats of src/reference/formats.h, checked exhaustively
// against definitions written here from the format specifications (not from
// the library's code): FP8 E4M3 "fn", BF16 and UE8M0.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "reference/formats.h"
#include "support/test_support.h"
#include "testing/dsv4_problem.h"

namespace sparse_decode::reference {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

// E4M3 fn: 1 sign bit, 4 exponent bits (bias 7), 3 mantissa bits; exponent 0
// is subnormal (m/8 * 2^-6); no infinities; only S.1111.111 is NaN.
double e4m3_definition(int bits) {
  const bool negative = bits & 0x80;
  const int exponent = (bits >> 3) & 0xF;
  const int mantissa = bits & 0x7;
  if (exponent == 15 && mantissa == 7) return kNaN;
  const double magnitude =
      exponent == 0 ? (mantissa / 8.0) * std::pow(2.0, -6) : (1.0 + mantissa / 8.0) * std::pow(2.0, exponent - 7);
  return negative ? -magnitude : magnitude;
}

// BF16: the upper half of an IEEE binary32 (8 exponent bits, bias 127, 7 mantissa bits).
double bf16_definition(int bits) {
  const bool negative = bits & 0x8000;
  const int exponent = (bits >> 7) & 0xFF;
  const int mantissa = bits & 0x7F;
  double magnitude;
  if (exponent == 255) {
    magnitude = mantissa == 0 ? kInf : kNaN;
  } else if (exponent == 0) {
    magnitude = (mantissa / 128.0) * std::pow(2.0, -126);
  } else {
    magnitude = (1.0 + mantissa / 128.0) * std::pow(2.0, exponent - 127);
  }
  return negative ? -magnitude : magnitude;
}

// Exact equality that also distinguishes -0 from +0 and treats NaN == NaN.
bool same_value(double a, double b) {
  if (std::isnan(a) || std::isnan(b)) return std::isnan(a) && std::isnan(b);
  return a == b && std::signbit(a) == std::signbit(b);
}

TEST(FormatE4M3, DecodeMatchesDefinitionForAll256Codes) {
  int nan_count = 0;
  for (int bits = 0; bits < 256; ++bits) {
    SCOPED_TRACE(::testing::Message() << "code 0x" << std::hex << bits);
    const double value = decode_e4m3(static_cast<uint8_t>(bits));
    EXPECT_TRUE(same_value(value, e4m3_definition(bits))) << value;
    nan_count += std::isnan(value);
    EXPECT_FALSE(std::isinf(value));
  }
  EXPECT_EQ(nan_count, 2);  // 0x7F and 0xFF only
}

TEST(FormatE4M3, DecodeLandmarks) {
  EXPECT_EQ(decode_e4m3(0x7E), 448.0);  // largest finite
  EXPECT_EQ(decode_e4m3(0xFE), -448.0);
  EXPECT_EQ(decode_e4m3(0x78), 256.0);                    // exponent 15 is finite in "fn"
  EXPECT_EQ(decode_e4m3(0x01), std::ldexp(1.0, -9));      // smallest subnormal
  EXPECT_EQ(decode_e4m3(0x07), 7 * std::ldexp(1.0, -9));  // largest subnormal
  EXPECT_EQ(decode_e4m3(0x08), std::ldexp(1.0, -6));      // smallest normal
  EXPECT_EQ(decode_e4m3(0x38), 1.0);
  EXPECT_EQ(decode_e4m3(0x00), 0.0);
  EXPECT_TRUE(std::signbit(decode_e4m3(0x80)) && decode_e4m3(0x80) == 0.0);  // -0
  EXPECT_TRUE(std::isnan(decode_e4m3(0x7F)));
  EXPECT_TRUE(std::isnan(decode_e4m3(0xFF)));
  // Codes 0..126 are the finite magnitudes in increasing order (encoders rely on it).
  for (int bits = 1; bits < 127; ++bits) EXPECT_LT(decode_e4m3(bits - 1), decode_e4m3(bits)) << bits;
}

TEST(FormatBF16, DecodeMatchesDefinitionForAll65536Patterns) {
  int nan_count = 0, inf_count = 0, subnormal_count = 0;
  for (int bits = 0; bits < 65536; ++bits) {
    const double value = decode_bf16(static_cast<uint16_t>(bits));
    const double expected = bf16_definition(bits);
    if (!same_value(value, expected)) {
      ADD_FAILURE() << "pattern 0x" << std::hex << bits << ": got " << value << ", expected " << expected;
    }
    nan_count += std::isnan(value);
    inf_count += std::isinf(value);
    subnormal_count += value != 0.0 && std::fabs(value) < std::ldexp(1.0, -126);
  }
  EXPECT_EQ(nan_count, 2 * 127);
  EXPECT_EQ(inf_count, 2);
  EXPECT_EQ(subnormal_count, 2 * 127);
  EXPECT_EQ(decode_bf16(0x3F80), 1.0);
  EXPECT_EQ(decode_bf16(0x0001), std::ldexp(1.0, -133));
  EXPECT_EQ(decode_bf16(0x7F7F), std::ldexp(255.0, 120));
}

TEST(FormatUE8M0, DecodeAll256) {
  for (int bits = 0; bits < 255; ++bits) {
    EXPECT_EQ(decode_ue8m0(static_cast<uint8_t>(bits)), std::pow(2.0, bits - 127)) << bits;
  }
  EXPECT_TRUE(std::isnan(decode_ue8m0(0xFF)));
  EXPECT_EQ(decode_ue8m0(127), 1.0);
  EXPECT_GT(decode_ue8m0(0), 0.0);  // 2^-127: no zero in UE8M0
}

TEST(FormatE4M3, EncodeRoundTripsEveryFiniteCode) {
  for (int bits = 0; bits < 256; ++bits) {
    if ((bits & 0x7F) == 0x7F) continue;  // NaN
    EXPECT_EQ(encode_e4m3(e4m3_definition(bits)), bits) << "code 0x" << std::hex << bits;
  }
}

TEST(FormatE4M3, EncodeTiesToEvenAndRoundsToNearest) {
  for (int low = 0; low < 126; ++low) {
    const double a = e4m3_definition(low), b = e4m3_definition(low + 1);
    const double middle = (a + b) / 2;  // exact in double
    const int even = low % 2 == 0 ? low : low + 1;
    SCOPED_TRACE(::testing::Message() << "between codes " << low << " and " << low + 1);
    EXPECT_EQ(encode_e4m3(middle), even);
    EXPECT_EQ(encode_e4m3(-middle), 0x80 | even);
    EXPECT_EQ(encode_e4m3(std::nextafter(middle, -kInf)), low);
    EXPECT_EQ(encode_e4m3(std::nextafter(middle, kInf)), low + 1);
    EXPECT_EQ(encode_e4m3(-std::nextafter(middle, kInf)), 0x80 | (low + 1));
  }
}

TEST(FormatE4M3, EncodeRandomValuesPickTheNearestCode) {
  const uint64_t seed = test::fresh_seed();
  SCOPED_TRACE(test::seed_message(seed));
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> log2_magnitude(-12.0, 9.5);
  for (int i = 0; i < 20000; ++i) {
    const double value = std::exp2(log2_magnitude(rng)) * (rng() & 1 ? -1 : 1);
    const int code = encode_e4m3(value);
    ASSERT_EQ(code & 0x80, value < 0 ? 0x80 : 0) << value;
    const double error = std::fabs(e4m3_definition(code) - value);
    for (int other = 0; other < 127; ++other) {
      const double other_error = std::fabs(std::copysign(e4m3_definition(other), value) - value);
      ASSERT_LE(error, other_error) << value << " -> code " << code << ", code " << other << " is nearer";
    }
  }
}

TEST(FormatE4M3, EncodeSaturatesAndMapsNaN) {
  for (double big : {448.0, 448.5, 463.99, 464.0, 480.0, 1e6, 1e300, kInf}) {
    EXPECT_EQ(encode_e4m3(big), 0x7E) << big;
    EXPECT_EQ(encode_e4m3(-big), 0xFE) << -big;
  }
  EXPECT_EQ(encode_e4m3(kNaN), 0x7F);
  EXPECT_EQ(encode_e4m3(-kNaN), 0x7F);
  // Below the smallest subnormal: half of it ties to the even code 0.
  EXPECT_EQ(encode_e4m3(std::ldexp(1.0, -10)), 0x00);
  EXPECT_EQ(encode_e4m3(std::nextafter(std::ldexp(1.0, -10), 1.0)), 0x01);
  EXPECT_EQ(encode_e4m3(1e-30), 0x00);
  EXPECT_EQ(encode_e4m3(-1e-30), 0x80);
  EXPECT_EQ(encode_e4m3(-0.0), 0x80);
}

TEST(FormatBF16, EncodeRoundTripsAll65536Patterns) {
  for (int bits = 0; bits < 65536; ++bits) {
    const double value = bf16_definition(bits);
    const uint16_t code = encode_bf16(value);
    if (std::isnan(value)) {
      if (!std::isnan(bf16_definition(code))) ADD_FAILURE() << "NaN 0x" << std::hex << bits << " -> 0x" << code;
    } else if (code != bits) {
      ADD_FAILURE() << "pattern 0x" << std::hex << bits << " -> 0x" << code;
    }
  }
}

TEST(FormatBF16, EncodeTiesToEvenAtEveryMidpoint) {
  // Every pair of consecutive positive finite values, subnormals included;
  // values one double ulp off the midpoint catch a double rounding through
  // float32 (a float cannot hold them).
  for (int low = 0; low < 0x7F7F; ++low) {
    const double a = bf16_definition(low), b = bf16_definition(low + 1);
    const double middle = (a + b) / 2;
    const int even = low % 2 == 0 ? low : low + 1;
    if (encode_bf16(middle) != even || encode_bf16(-middle) != (0x8000 | even) ||
        encode_bf16(std::nextafter(middle, 0.0)) != low || encode_bf16(std::nextafter(middle, kInf)) != low + 1) {
      ADD_FAILURE() << "wrong rounding between patterns 0x" << std::hex << low << " and 0x" << low + 1;
    }
  }
}

TEST(FormatBF16, EncodeOverflowAndSubnormals) {
  const double max = bf16_definition(0x7F7F);
  const double half_ulp_above = max + std::ldexp(1.0, 127 - 8);  // midpoint to 2^128: ties to even = inf
  EXPECT_EQ(encode_bf16(max), 0x7F7F);
  EXPECT_EQ(encode_bf16(std::nextafter(half_ulp_above, 0.0)), 0x7F7F);
  EXPECT_EQ(encode_bf16(half_ulp_above), 0x7F80);
  for (double big : {1e39, 1e300, kInf}) {
    EXPECT_EQ(encode_bf16(big), 0x7F80) << big;
    EXPECT_EQ(encode_bf16(-big), 0xFF80) << -big;
  }
  const double tiny = std::ldexp(1.0, -133);  // smallest subnormal
  EXPECT_EQ(encode_bf16(tiny), 0x0001);
  EXPECT_EQ(encode_bf16(tiny / 2), 0x0000);  // tie to even
  EXPECT_EQ(encode_bf16(0.75 * tiny), 0x0001);
  EXPECT_EQ(encode_bf16(1.5 * tiny), 0x0002);  // tie between 1 and 2 quanta
  EXPECT_EQ(encode_bf16(-1e-50), 0x8000);
  EXPECT_EQ(encode_bf16(1e-50), 0x0000);
  EXPECT_EQ(encode_bf16(std::ldexp(1.0, -126)), 0x0080);  // smallest normal
  EXPECT_TRUE(std::isnan(decode_bf16(encode_bf16(kNaN))));
  EXPECT_TRUE(std::isnan(decode_bf16(encode_bf16(-kNaN))));
}

TEST(FormatBF16, EncodeRandomValuesPickTheNearestPattern) {
  const uint64_t seed = test::fresh_seed();
  SCOPED_TRACE(test::seed_message(seed));
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> log2_magnitude(-136.0, 128.0);
  for (int i = 0; i < 100000; ++i) {
    const double value = std::exp2(log2_magnitude(rng)) * (rng() & 1 ? -1 : 1);
    const int code = encode_bf16(value);
    const int magnitude_code = code & 0x7FFF;
    ASSERT_EQ(code & 0x8000, value < 0 ? 0x8000 : 0) << value;
    if (magnitude_code == 0x7F80) {  // inf: only past the overflow midpoint
      ASSERT_GE(std::fabs(value), bf16_definition(0x7F7F) + std::ldexp(1.0, 119)) << value;
      continue;
    }
    ASSERT_LT(magnitude_code, 0x7F80) << value;
    // The neighbours of the chosen pattern are no nearer, and a tie picks the even one.
    const double error = std::fabs(std::fabs(value) - bf16_definition(magnitude_code));
    for (int neighbour : {magnitude_code - 1, magnitude_code + 1}) {
      if (neighbour < 0 || neighbour > 0x7F7F) continue;
      const double other = std::fabs(std::fabs(value) - bf16_definition(neighbour));
      ASSERT_TRUE(error < other || (error == other && magnitude_code % 2 == 0))
          << value << " -> 0x" << std::hex << code << ", 0x" << neighbour << " is nearer";
    }
  }
}

// The synthetic problems encode with their own fast E4M3 search: it must
// agree with encode_e4m3 (and BF16 with encode_bf16), midpoints included.
TEST(FormatEncodeElement, MatchesTheReferenceEncoders) {
  const uint64_t seed = test::fresh_seed();
  SCOPED_TRACE(test::seed_message(seed));
  std::mt19937_64 rng(seed);
  std::normal_distribution<double> normal(0.0, 4.0);
  std::vector<double> values;
  for (int i = 0; i < 20000; ++i) values.push_back(normal(rng));
  for (int low = 0; low < 126; ++low) values.push_back((e4m3_definition(low) + e4m3_definition(low + 1)) / 2);
  values.insert(values.end(), {500.0, -1e9, std::ldexp(1.0, -10), -std::ldexp(3.0, -11)});
  for (double value : values) {
    uint8_t fp8;
    uint16_t bf16;
    sparse_decode::testing::encode_element(DType::kFloat8E4M3, value, &fp8);
    sparse_decode::testing::encode_element(DType::kBFloat16, value, reinterpret_cast<uint8_t*>(&bf16));
    ASSERT_EQ(fp8, encode_e4m3(value)) << value;
    ASSERT_EQ(bf16, encode_bf16(value)) << value;
  }
}

}  // namespace
}  // namespace sparse_decode::reference
