// Bit-exact decoding and round-to-nearest-even encoding of the number formats
// the library reads: FP8 E4M3 (the "fn" variant: no infinities, NaN = S.1111.111),
// BF16, FP16 (IEEE binary16) and UE8M0 scales.
#pragma once

#include <array>
#include <cstdint>
#include <cstring>
#include <limits>

namespace sparse_decode::reference {

namespace format_tables {

// 2^e, exact: a product of powers of two.
constexpr double pow2(int e) {
  double value = 1.0;
  for (; e > 0; --e) value *= 2.0;
  for (; e < 0; ++e) value /= 2.0;
  return value;
}

// E4M3 "fn" from its bit fields: subnormals m/8 * 2^-6, normals (1 + m/8) * 2^(e - 7).
constexpr double e4m3_value(int code) {
  const int exponent = (code >> 3) & 0xF, mantissa = code & 0x7;
  if (exponent == 0xF && mantissa == 0x7) return std::numeric_limits<double>::quiet_NaN();
  const double magnitude = exponent == 0 ? mantissa * pow2(-9) : (8 + mantissa) * pow2(exponent - 10);
  return code & 0x80 ? -magnitude : magnitude;
}

constexpr std::array<double, 256> e4m3_values() {
  std::array<double, 256> values{};
  for (int code = 0; code < 256; ++code) values[code] = e4m3_value(code);
  return values;
}

constexpr std::array<double, 256> ue8m0_values() {
  std::array<double, 256> values{};
  for (int code = 0; code < 255; ++code) values[code] = pow2(code - 127);
  values[255] = std::numeric_limits<double>::quiet_NaN();
  return values;
}

// Inline, by table: the references decode every element of every row they
// read (the packed rows scale each E4M3 element by a UE8M0 byte).
inline constexpr std::array<double, 256> kE4m3 = e4m3_values();
inline constexpr std::array<double, 256> kUe8m0 = ue8m0_values();

}  // namespace format_tables

inline double decode_e4m3(uint8_t bits) { return format_tables::kE4m3[bits]; }  // exact; NaN for 0x7F and 0xFF
inline double decode_ue8m0(uint8_t bits) { return format_tables::kUe8m0[bits]; }  // 2^(bits - 127); NaN for 0xFF

inline double decode_bf16(uint16_t bits) {  // exact
  const uint32_t word = static_cast<uint32_t>(bits) << 16;
  float value;
  std::memcpy(&value, &word, sizeof(value));
  return value;
}

double decode_f16(uint16_t bits);    // exact (IEEE binary16)

uint8_t encode_e4m3(double value);   // nearest even, saturating at +-448, NaN -> 0x7F
uint16_t encode_bf16(double value);  // nearest even, overflow to +-inf
uint16_t encode_f16(double value);   // nearest even, overflow to +-inf, NaN -> 0x7E00

}  // namespace sparse_decode::reference
