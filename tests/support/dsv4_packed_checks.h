// Test-side oracle and steps for dsv4_decode_packed (SPEC section 2): the
// packed bytes read with definitions written here from the format
// specifications, a literal softmax over both segments (independent of
// src/reference/), the public host call with poisoned outputs, and the full
// check that the reference tests share. Comparisons come from dsv4_checks.h.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "support/dsv4_checks.h"
#include "reference/dsv4_packed_reference.h"
#include "sparse_decode/dsv4_decode_packed.h"
#include "testing/dsv4_packed_problem.h"

namespace sparse_decode::test {

// E4M3 fn: exponent bias 7, exponent 0 subnormal (m/8 * 2^-6), S.1111.111 NaN.
inline double literal_e4m3(uint8_t bits) {
  const int exponent = (bits >> 3) & 0xF, mantissa = bits & 0x7;
  if (exponent == 15 && mantissa == 7) return std::numeric_limits<double>::quiet_NaN();
  const double magnitude = exponent == 0 ? (mantissa / 8.0) * std::pow(2.0, -6)
                                         : (1.0 + mantissa / 8.0) * std::pow(2.0, exponent - 7);
  return (bits & 0x80) ? -magnitude : magnitude;
}

// BF16: sign, 8 exponent bits (bias 127), 7 mantissa bits.
inline double literal_bf16(uint16_t bits) {
  const int exponent = (bits >> 7) & 0xFF, mantissa = bits & 0x7F;
  double magnitude;
  if (exponent == 255) {
    magnitude = mantissa == 0 ? kInf : std::numeric_limits<double>::quiet_NaN();
  } else if (exponent == 0) {
    magnitude = (mantissa / 128.0) * std::pow(2.0, -126);
  } else {
    magnitude = (1.0 + mantissa / 128.0) * std::pow(2.0, exponent - 127);
  }
  return (bits & 0x8000) ? -magnitude : magnitude;
}

// UE8M0: 2^(byte - 127); 0xFF is NaN.
inline double literal_ue8m0(uint8_t bits) {
  return bits == 0xFF ? std::numeric_limits<double>::quiet_NaN() : std::pow(2.0, bits - 127);
}

// SPEC section 2, word for word: page r / page_size, slot r % page_size;
// 576 data bytes at page + slot * 576, 8 scale bytes at page + page_size *
// 576 + slot * 8; dims 0..447 E4M3 times the scale of tile d / 64, dims
// 448..511 little-endian BF16.
inline std::vector<double> literal_packed_row(const PackedPool& pool, int64_t row) {
  const uint8_t* page = pool.data + (row / pool.page_size) * pool.page_stride;
  const int64_t slot = row % pool.page_size;
  const uint8_t* data = page + slot * 576;
  const uint8_t* scale = page + pool.page_size * 576 + slot * 8;
  std::vector<double> values(512);
  for (int d = 0; d < 448; ++d) values[d] = literal_e4m3(data[d]) * literal_ue8m0(scale[d / 64]);
  for (int d = 448; d < 512; ++d) {
    const int byte = 448 + 2 * (d - 448);
    values[d] = literal_bf16(static_cast<uint16_t>(data[byte] | (data[byte + 1] << 8)));
  }
  return values;
}

inline std::vector<double> packed_q_row(const Dsv4PackedDecodeArgs& a, int64_t t, int h) {
  const auto* q = static_cast<const uint16_t*>(a.q) + t * a.q_token_stride + h * a.q_head_stride;
  std::vector<double> values(512);
  for (int d = 0; d < 512; ++d) values[d] = literal_bf16(q[d]);
  return values;
}

// The segments of a call: the SWA one, then the extra one if any field of it is set.
inline std::vector<const PackedSegment*> packed_segments(const Dsv4PackedDecodeArgs& a) {
  std::vector<const PackedSegment*> segments = {&a.swa};
  if (a.extra.given()) segments.push_back(&a.extra);
  return segments;
}

// SPEC section 2 as plainly as possible: section 1's formulas with
// bmm1 = softmax_scale, bmm2 = 1, m = max(scores, sink).
inline Expected packed_brute_force(const Dsv4PackedDecodeArgs& a) {
  const int64_t T = a.num_tokens;
  const int H = a.num_heads;
  Expected e;
  e.out.assign(static_cast<size_t>(T) * H * 512, 0.0);
  e.lse.assign(static_cast<size_t>(T) * H, -kInf);
  for (int64_t t = 0; t < T; ++t) {
    std::vector<std::vector<double>> rows;
    for (const PackedSegment* segment : packed_segments(a)) {
      const int64_t pool_rows = segment->pool.pages * segment->pool.page_size;
      for (int c = 0; c < segment->width; ++c) {
        const int32_t index = segment->indices[t * segment->indices_stride + c];
        const bool in_lens = segment->lens == nullptr || c < segment->lens[t];
        if (!in_lens || index < 0) {
          e.masked_in_range += index >= 0 && index < pool_rows;
          continue;
        }
        if (index >= pool_rows) {
          ++e.out_of_range;
          continue;
        }
        rows.push_back(literal_packed_row(segment->pool, index));
      }
    }
    if (rows.empty()) continue;
    for (int h = 0; h < H; ++h) {
      const std::vector<double> q = packed_q_row(a, t, h);
      std::vector<double> s;
      for (const auto& k : rows) s.push_back(double{a.softmax_scale} * dot(q, k));
      const double sink = a.sinks ? a.sinks[h] : -kInf;
      const double m = std::max(*std::max_element(s.begin(), s.end()), sink);
      // lse = log(sum exp(s)), taken around the largest score so that the
      // scores of extreme scale bytes (10^6 and more) do not overflow exp.
      const double top = *std::max_element(s.begin(), s.end());
      double denominator = std::exp(sink - m), sum_exp = 0.0;
      for (double score : s) denominator += std::exp(score - m), sum_exp += std::exp(score - top);
      double* out = &e.out[(static_cast<size_t>(t) * H + h) * 512];
      for (size_t c = 0; c < rows.size(); ++c) {
        for (int d = 0; d < 512; ++d) out[d] += std::exp(s[c] - m) * rows[c][d] / denominator;
      }
      e.lse[static_cast<size_t>(t) * H + h] = top + std::log(sum_exp);
    }
  }
  return e;
}

// Per (token, head, 64-dim scale tile): relative L2 error <= tolerance, exact
// zeros where `want` is all zero. The groups of a packed row differ in
// magnitude by up to 2^30 (their scale bytes), so a row-wide norm would hide
// every error in the small ones.
inline void expect_scale_tiles_close(const std::vector<double>& got, const std::vector<double>& want, int H,
                                double tolerance, const char* what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  int failures = 0;
  for (size_t base = 0; base < want.size() && failures < 8; base += kPackedTileDims) {
    double error = 0.0, norm = 0.0;
    for (int d = 0; d < kPackedTileDims; ++d) {
      error += (got[base + d] - want[base + d]) * (got[base + d] - want[base + d]);
      norm += want[base + d] * want[base + d];
    }
    const bool ok = norm == 0.0 ? error == 0.0 : std::sqrt(error / norm) <= tolerance;  // NaN fails
    if (!ok) {
      ++failures;
      const size_t row = base / kHeadDim;
      ADD_FAILURE() << what << ": token " << row / H << " head " << row % H << " dims " << base % kHeadDim << "..+63"
                    << ": relative L2 error " << std::sqrt(error / norm) << " > " << tolerance;
    }
  }
}

// The public call with host memory (run_host_call).
inline HostOutput run_packed_host(const Dsv4PackedDecodeArgs& args) {
  return run_host_call(args,
                       [](const Dsv4PackedDecodeArgs& a) { return dsv4_decode_packed(a, nullptr, 0, nullptr); });
}

// Reference vs the literal softmax (1e-12), the public host call vs the
// reference (BF16: 3e-3), every output written and finite, the counter, and
// bitwise the same output on a second run.
inline Expected check_packed_problem(const Dsv4PackedDecodeArgs& args) {
  const int64_t T = args.num_tokens;
  const int H = args.num_heads;
  const reference::Dsv4Result ref = reference::dsv4_decode_packed(args);
  Expected brute = packed_brute_force(args);
  expect_rows_close(ref.out, brute.out, T, H, 1e-12, "reference vs brute force");
  expect_scale_tiles_close(ref.out, brute.out, H, 1e-12, "reference vs brute force, by scale tile");
  expect_lse_close(ref.lse, brute.lse, 1e-12, "reference lse vs brute force");
  EXPECT_EQ(ref.out_of_range, brute.out_of_range);

  const HostOutput host = run_packed_host(args);
  const std::vector<double> values = host.out_values();
  EXPECT_TRUE(std::all_of(values.begin(), values.end(), [](double v) { return std::isfinite(v); }))
      << "NaN/inf in out: a masked NaN row leaked or an element was not written";
  expect_bf16_rounding_of(values, ref.out, "host BF16 out vs reference");
  expect_lse_close(host.lse, ref.lse, 1e-6, "host lse vs reference");
  EXPECT_EQ(host.count, kCountStart + brute.out_of_range);

  const HostOutput again = run_packed_host(args);
  EXPECT_TRUE(again.out == host.out) << "two runs differ";
  return brute;
}

// A small problem: small pools keep the two references fast.
inline testing::Dsv4PackedProblemConfig packed_config(uint64_t seed, int heads = 16, int64_t tokens = 4,
                                                      int32_t extra_width = 256, int64_t page_size = 64) {
  testing::Dsv4PackedProblemConfig c;
  c.seed = seed;
  c.heads = heads;
  c.tokens = tokens;
  c.q_len = static_cast<int32_t>(std::min<int64_t>(tokens, 4));
  c.extra_width = extra_width;
  c.page_size = page_size;
  c.extra_rows = 1024;
  return c;
}

}  // namespace sparse_decode::test
