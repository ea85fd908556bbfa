#include "reference/formats.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

namespace sparse_decode::reference {

double decode_f16(uint16_t bits) {
  const int exponent = (bits >> 10) & 0x1F;
  const int mantissa = bits & 0x3FF;
  double magnitude;
  if (exponent == 0x1F) {
    magnitude = mantissa ? std::numeric_limits<double>::quiet_NaN() : std::numeric_limits<double>::infinity();
  } else {
    magnitude = exponent == 0 ? std::ldexp(mantissa, -24) : std::ldexp(1024 + mantissa, exponent - 25);
  }
  return bits & 0x8000 ? -magnitude : magnitude;
}

uint8_t encode_e4m3(double value) {
  if (std::isnan(value)) return 0x7F;
  const uint8_t sign = std::signbit(value) ? 0x80 : 0x00;
  const double x = std::fabs(value);
  // The 127 finite magnitudes (codes 0x00..0x7E) increase with the code: the
  // nearest by binary search, ties to the even code, saturating at 448.
  const auto first = format_tables::kE4m3.begin(), end = first + 0x7F;
  const auto above = std::lower_bound(first, end, x);
  if (above == first) return sign;
  if (above == end) return sign | 0x7E;
  const int high = static_cast<int>(above - first), low = high - 1;
  const double d_high = *above - x, d_low = x - *(above - 1);
  const int best = d_high < d_low ? high : d_low < d_high ? low : (high % 2 == 0 ? high : low);
  return static_cast<uint8_t>(sign | best);
}

uint16_t encode_bf16(double value) {
  uint64_t bits;
  std::memcpy(&bits, &value, sizeof(bits));
  const int biased_exponent = static_cast<int>((bits >> 52) & 0x7FF);
  if (biased_exponent >= 1023 - 126 && biased_exponent < 0x7FF) {
    // A normal BF16 result (|value| >= 2^-126, finite): the 52-bit mantissa
    // rounded to 7 bits, nearest even, on the bits (a carry into the
    // exponent gives the right power of two); the double then converts to
    // float exactly, or to +-inf past its range. The same bits as the
    // general path below, without its ldexp.
    bits = (bits + 0x0FFFFFFFFFFFull + ((bits >> 45) & 1)) & ~((uint64_t{1} << 45) - 1);
    double rounded_bits;
    std::memcpy(&rounded_bits, &bits, sizeof(rounded_bits));
    const float single = static_cast<float>(rounded_bits);
    uint32_t word;
    std::memcpy(&word, &single, sizeof(word));
    return static_cast<uint16_t>(word >> 16);
  }
  double rounded = value;
  if (std::isfinite(value) && value != 0.0) {
    // Round the magnitude once, to 8 significant bits (or to the subnormal
    // quantum 2^-133), so that no double rounding through float32 happens.
    int exponent;
    std::frexp(std::fabs(value), &exponent);
    const int quantum = std::max(exponent - 8, -133);
    const double units = std::nearbyint(std::ldexp(std::fabs(value), -quantum));
    rounded = std::copysign(std::ldexp(units, quantum), value);
  }
  const float single = static_cast<float>(rounded);  // exact, or +-inf past the range
  uint32_t word;
  std::memcpy(&word, &single, sizeof(word));
  if (std::isnan(single)) return static_cast<uint16_t>((word >> 16) | 0x40);
  return static_cast<uint16_t>(word >> 16);
}

uint16_t encode_f16(double value) {
  if (std::isnan(value)) return 0x7E00;
  const uint16_t sign = std::signbit(value) ? 0x8000 : 0x0000;
  const double magnitude = std::fabs(value);
  if (magnitude == 0.0) return sign;
  // Round once to 11 significant bits, or to the subnormal quantum 2^-24.
  int exponent;
  std::frexp(magnitude, &exponent);
  const int quantum = std::max(exponent - 11, -24);
  const double rounded = std::ldexp(std::nearbyint(std::ldexp(magnitude, -quantum)), quantum);
  if (rounded >= 65520.0) return sign | 0x7C00;  // past the largest finite value 65504: +-inf
  if (rounded < std::ldexp(1.0, -14)) return sign | static_cast<uint16_t>(std::ldexp(rounded, 24));  // subnormal
  std::frexp(rounded, &exponent);  // rounding may carry into the next binade
  const uint16_t field = static_cast<uint16_t>(exponent - 1 + 15);
  const uint16_t mantissa = static_cast<uint16_t>(std::ldexp(rounded, 11 - exponent) - 1024);
  return sign | static_cast<uint16_t>(field << 10) | mantissa;
}

}  // namespace sparse_decode::reference
