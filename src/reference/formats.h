// Bit-exact decoding and round-to-nearest-even encoding of the number formats
// the library reads: FP8 E4M3 (the "fn" variant: no infinities, NaN = S.1111.111),
// BF16, FP16 (IEEE binary16) and UE8M0 scales.
#pragma once

#include <cstdint>

namespace sparse_decode::reference {

double decode_e4m3(uint8_t bits);    // exact; NaN for 0x7F and 0xFF
double decode_bf16(uint16_t bits);   // exact
double decode_f16(uint16_t bits);    // exact (IEEE binary16)
double decode_ue8m0(uint8_t bits);   // 2^(bits - 127); NaN for 0xFF

uint8_t encode_e4m3(double value);   // nearest even, saturating at +-448, NaN -> 0x7F
uint16_t encode_bf16(double value);  // nearest even, overflow to +-inf
uint16_t encode_f16(double value);   // nearest even, overflow to +-inf, NaN -> 0x7E00

}  // namespace sparse_decode::reference
