// Test-side oracle and comparisons for dsv4_decode: a literal transcription of
// SPEC section 1 (independent of src/reference/dsv4_reference.cpp), a runner
// for the public host-memory call with poisoned outputs, tolerant
// comparisons that report the (token, head) that fails, and the steps the
// reference tests share (small problems, the full check, bad indices).
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "reference/dsv4_reference.h"
#include "reference/formats.h"
#include "sparse_decode/dsv4_decode.h"
#include "support/test_support.h"
#include "testing/dsv4_problem.h"

namespace sparse_decode::test {

inline constexpr double kInf = std::numeric_limits<double>::infinity();

inline double load(DType dtype, const void* base, int64_t offset) {
  return dtype == DType::kFloat8E4M3 ? reference::decode_e4m3(static_cast<const uint8_t*>(base)[offset])
                                     : reference::decode_bf16(static_cast<const uint16_t*>(base)[offset]);
}

inline int64_t row_offset(const KvPool& pool, int64_t row) {
  return (row / pool.page_size) * pool.page_stride + (row % pool.page_size) * pool.row_stride;
}

inline std::vector<double> kv_row(const Dsv4DecodeArgs& a, bool compressed, int64_t row) {
  const KvPool& pool = compressed ? a.compressed_kv : a.swa_kv;
  std::vector<double> values(kHeadDim);
  for (int d = 0; d < kHeadDim; ++d) values[d] = load(a.dtype, pool.data, row_offset(pool, row) + d);
  return values;
}

inline std::vector<double> q_row(const Dsv4DecodeArgs& a, int64_t t, int h) {
  std::vector<double> values(kHeadDim);
  for (int d = 0; d < kHeadDim; ++d) values[d] = load(a.dtype, a.q, t * a.q_token_stride + h * a.q_head_stride + d);
  return values;
}

inline double dot(const std::vector<double>& x, const std::vector<double>& y) {
  double sum = 0.0;
  for (size_t i = 0; i < x.size(); ++i) sum += x[i] * y[i];
  return sum;
}

// KV position of token t: p = seq_lens[b] - q_len_b + i.
inline int64_t brute_position(const Dsv4DecodeArgs& a, int64_t t) {
  if (a.cum_seq_lens_q) {
    for (int b = 0; b < a.num_requests; ++b) {
      if (t >= a.cum_seq_lens_q[b] && t < a.cum_seq_lens_q[b + 1]) {
        return a.seq_lens[b] - (a.cum_seq_lens_q[b + 1] - a.cum_seq_lens_q[b]) + (t - a.cum_seq_lens_q[b]);
      }
    }
    ADD_FAILURE() << "token " << t << " is in no request";
    return -1;
  }
  return a.seq_lens[t / a.q_len] - a.q_len + t % a.q_len;
}

struct Expected {
  std::vector<double> out, lse;  // [T, H, 512], [T, H]
  int64_t out_of_range = 0;
  int64_t masked_in_range = 0;  // columns with an in-range index that are masked (they may hold NaN)
};

// SPEC section 1, written as plainly as possible: m = max(scores, sink).
inline Expected brute_force(const Dsv4DecodeArgs& a) {
  const int64_t T = a.num_tokens;
  const int H = a.num_heads;
  Expected e;
  e.out.assign(static_cast<size_t>(T) * H * kHeadDim, 0.0);
  e.lse.assign(static_cast<size_t>(T) * H, -kInf);
  const double bmm1 = a.bmm1_scale.device ? *a.bmm1_scale.device : a.bmm1_scale.value;
  const double bmm2 = a.bmm2_scale.device ? *a.bmm2_scale.device : a.bmm2_scale.value;
  for (int64_t t = 0; t < T; ++t) {
    std::vector<std::vector<double>> rows;
    for (int c = 0; c < a.width; ++c) {
      const int32_t index = a.indices[t * a.indices_stride + c];
      const bool swa = c < kSwaColumns;
      const int64_t pool_rows =
          swa ? a.swa_kv.pages * a.swa_kv.page_size : a.compressed_kv.pages * a.compressed_kv.page_size;
      bool active = index >= 0 && (a.lens == nullptr || c < a.lens[t]);
      if (active && swa && a.seq_lens) active = c < std::min<int64_t>(128, brute_position(a, t) + 1);
      if (!active) {
        e.masked_in_range += index >= 0 && index < pool_rows;
        continue;
      }
      if (index >= pool_rows) {
        ++e.out_of_range;
        continue;
      }
      rows.push_back(kv_row(a, !swa, index));
    }
    if (rows.empty()) continue;
    for (int h = 0; h < H; ++h) {
      const std::vector<double> q = q_row(a, t, h);
      std::vector<double> s;
      for (const auto& k : rows) s.push_back(bmm1 * dot(q, k));
      const double sink = a.sinks ? a.sinks[h] : -kInf;
      const double m = std::max(*std::max_element(s.begin(), s.end()), sink);
      double denominator = std::exp(sink - m), sum_exp = 0.0;
      for (double score : s) denominator += std::exp(score - m), sum_exp += std::exp(score);
      double* out = &e.out[(static_cast<size_t>(t) * H + h) * kHeadDim];
      for (size_t c = 0; c < rows.size(); ++c) {
        for (int d = 0; d < kHeadDim; ++d) out[d] += bmm2 * std::exp(s[c] - m) * rows[c][d] / denominator;
      }
      e.lse[static_cast<size_t>(t) * H + h] = std::log(sum_exp);
    }
  }
  return e;
}

// The public call with host memory, contiguous out/lse poisoned beforehand
// and the counter starting from a non-zero value (the call adds to it).
inline constexpr int32_t kCountStart = 1000;
struct HostOutput {
  std::vector<uint16_t> out;  // BF16 bits
  std::vector<float> lse;
  int32_t count = kCountStart;
  std::vector<double> out_values() const {
    std::vector<double> values(out.size());
    for (size_t i = 0; i < out.size(); ++i) values[i] = reference::decode_bf16(out[i]);
    return values;
  }
};

inline float lse_poison() {
  float value;
  std::memcpy(&value, &kLsePoisonBits, sizeof(value));
  return value;
}

// A strided call's out and lse hold the contiguous result `expected` at the
// strided places and the poison everywhere else (padding is never written);
// the counter matches.
inline void expect_strided_outputs(const HostOutput& expected, int64_t T, int H, const std::vector<uint16_t>& out,
                                   int64_t out_token_stride, int64_t out_head_stride, const std::vector<float>& lse,
                                   int64_t lse_token_stride, int32_t count) {
  std::vector<uint16_t> out_expected(out.size(), kOutPoison);
  std::vector<uint32_t> lse_expected(lse.size(), kLsePoisonBits), lse_bits(lse.size());
  for (int64_t t = 0; t < T; ++t) {
    for (int h = 0; h < H; ++h) {
      std::copy_n(&expected.out[(t * H + h) * kHeadDim], kHeadDim, &out_expected[t * out_token_stride + h * out_head_stride]);
      std::memcpy(&lse_expected[t * lse_token_stride + h], &expected.lse[t * H + h], 4);
    }
  }
  std::memcpy(lse_bits.data(), lse.data(), lse.size() * 4);
  EXPECT_TRUE(out == out_expected) << "strided out differs from the contiguous run, or padding was written";
  EXPECT_TRUE(lse_bits == lse_expected) << "strided lse differs from the contiguous run, or padding was written";
  EXPECT_EQ(count, expected.count);
}

// `decode(args)` (a public call: dsv4_decode, dsv4_decode_packed,
// dsv4_decode_hca) with host memory: contiguous out/lse poisoned beforehand,
// the counter starting from kCountStart (the call adds to it).
template <typename Args, typename Decode>
HostOutput run_host_call(Args args, Decode decode) {
  const int64_t T = args.num_tokens;
  const int H = args.num_heads;
  HostOutput r;
  r.out.assign(static_cast<size_t>(T) * H * kHeadDim, kOutPoison);
  r.lse.assign(static_cast<size_t>(T) * H, lse_poison());
  args.memory = MemorySpace::kHost;
  args.out = r.out.data();
  args.out_token_stride = int64_t{H} * kHeadDim;
  args.out_head_stride = kHeadDim;
  args.lse = r.lse.data();
  args.lse_token_stride = H;
  args.out_of_range_count = &r.count;
  const Status status = decode(args);
  EXPECT_TRUE(status.ok()) << status.message();
  return r;
}

inline HostOutput run_host(const Dsv4DecodeArgs& args) {
  return run_host_call(args, [](const Dsv4DecodeArgs& a) { return dsv4_decode(a, nullptr, 0, nullptr); });
}

// Per (token, head): |got - want| / |want| <= tolerance in L2, and exact
// zeros where `want` is all zero. Reports the first few failing rows.
inline void expect_rows_close(const std::vector<double>& got, const std::vector<double>& want, int64_t T, int H,
                              double tolerance, const char* what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  int failures = 0;
  for (int64_t t = 0; t < T && failures < 8; ++t) {
    for (int h = 0; h < H && failures < 8; ++h) {
      const size_t base = (static_cast<size_t>(t) * H + h) * kHeadDim;
      double error = 0.0, norm = 0.0;
      for (int d = 0; d < kHeadDim; ++d) {
        error += (got[base + d] - want[base + d]) * (got[base + d] - want[base + d]);
        norm += want[base + d] * want[base + d];
      }
      const bool ok = norm == 0.0 ? error == 0.0 : std::sqrt(error / norm) <= tolerance;  // NaN fails
      if (!ok) {
        ++failures;
        ADD_FAILURE() << what << ": token " << t << " head " << h << ": relative L2 error " << std::sqrt(error / norm)
                      << " > " << tolerance << " (|want| = " << std::sqrt(norm) << ", got[0] = " << got[base]
                      << ", want[0] = " << want[base] << ")";
      }
    }
  }
}

template <typename Lse>
void expect_lse_close(const std::vector<Lse>& got, const std::vector<double>& want, double tolerance,
                      const char* what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  int failures = 0;
  for (size_t i = 0; i < want.size() && failures < 8; ++i) {
    const double g = got[i];
    const bool ok =
        std::isinf(want[i]) ? g == want[i] : std::fabs(g - want[i]) <= tolerance * std::max(1.0, std::fabs(want[i]));
    if (!ok) ++failures, ADD_FAILURE() << what << ": lse[" << i << "] = " << g << ", expected " << want[i];
  }
}

// The CPU backend computes in double and rounds once to BF16 (8 significant
// bits): every element of `got` is within half an ulp of `want`, at most
// 2^-8 |want|, plus 1e-9 of its row's largest |want| (the double sums of the
// backend and of `want` differ in order: a value that cancels to 0 in one
// may leave 1e-17 in the other). An element bound, not a norm: a norm over
// a few large elements could pass or fail by chance.
inline void expect_bf16_rounding_of(const std::vector<double>& got, const std::vector<double>& want,
                                    const char* what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  int failures = 0;
  for (size_t row = 0; row < want.size() && failures < 8; row += kHeadDim) {
    double largest = 0.0;
    for (int d = 0; d < kHeadDim; ++d) largest = std::max(largest, std::fabs(want[row + d]));
    for (int d = 0; d < kHeadDim && failures < 8; ++d) {
      const size_t i = row + d;
      const double bound = std::ldexp(std::fabs(want[i]), -8) * (1.0 + 1e-9) + 1e-9 * largest + 1e-40;
      if (!(std::fabs(got[i] - want[i]) <= bound)) {  // NaN fails
        ++failures;
        ADD_FAILURE() << what << ": element " << i << " (token-major [T, H, 512]): got " << got[i] << ", want "
                      << want[i] << ", more than BF16 rounding away";
      }
    }
  }
}

// The public host call's output against the reference `ref`: every element
// written and finite, out within BF16 rounding of it, lse (1e-6), and the
// counter advanced by `out_of_range`.
inline void expect_host_matches(const HostOutput& host, const reference::Dsv4Result& ref, int64_t T, int H,
                                int64_t out_of_range) {
  const std::vector<double> values = host.out_values();
  EXPECT_TRUE(std::all_of(values.begin(), values.end(), [](double v) { return std::isfinite(v); }))
      << "NaN/inf in out: a masked NaN row leaked or an element was not written";
  expect_bf16_rounding_of(values, ref.out, "host BF16 out vs reference");
  expect_lse_close(host.lse, ref.lse, 1e-6, "host lse vs reference");
  EXPECT_EQ(host.count, kCountStart + out_of_range);
}

// ---------------------------------------------------------------------------
// Shared steps of the reference tests.

inline testing::Dsv4ProblemConfig small_config(uint64_t seed, DType dtype = DType::kFloat8E4M3, int heads = 16,
                                               int width = 384, int64_t tokens = 4) {
  testing::Dsv4ProblemConfig c;
  c.seed = seed;
  c.dtype = dtype;
  c.heads = heads;
  c.width = width;
  c.tokens = tokens;
  c.q_len = static_cast<int32_t>(tokens);
  c.swa_rows = 1024;  // small pools keep the reference fast; 3/4 live, 1/4 NaN
  c.compressed_rows = 2048;
  return c;
}

inline const char* dtype_name(DType dtype) { return dtype == DType::kFloat8E4M3 ? "fp8" : "bf16"; }

// Reference vs the literal softmax (1e-12), the public host call vs the
// reference (BF16: 3e-3), every output written and finite, the counter.
inline Expected check_problem(const Dsv4DecodeArgs& args) {
  const int64_t T = args.num_tokens;
  const int H = args.num_heads;
  const reference::Dsv4Result ref = reference::dsv4_decode(args);
  Expected brute = brute_force(args);
  expect_rows_close(ref.out, brute.out, T, H, 1e-12, "reference vs brute force");
  expect_lse_close(ref.lse, brute.lse, 1e-12, "reference lse vs brute force");
  EXPECT_EQ(ref.out_of_range, brute.out_of_range);

  const HostOutput host = run_host(args);
  expect_host_matches(host, ref, T, H, brute.out_of_range);

  // Deterministic: a second run gives the same bits.
  const HostOutput again = run_host(args);
  EXPECT_TRUE(again.out == host.out) << "two runs differ";
  return brute;
}

// Points a few columns of every token past their pool: some inside lens
// (counted), some beyond (not counted); an SWA column may get an index that
// is valid for the compressed pool only. Returns the expected count.
inline int64_t inject_out_of_range(testing::Dsv4Problem& p, std::mt19937_64& rng) {
  const auto& c = p.config;
  int64_t counted = 0;
  for (int64_t t = 0; t < c.tokens; ++t) {
    for (int k = 0; k < 4; ++k) {
      const int32_t column = static_cast<int32_t>(rng() % c.width);
      int32_t& index = p.indices[t * c.width + column];
      const bool swa = column < kSwaColumns;
      const int64_t rows = swa ? c.swa_rows : c.compressed_rows;
      const bool was_out_of_range = index >= rows;
      switch (rng() % 3) {
        case 0:
          index = static_cast<int32_t>(rows + rng() % 100);
          break;
        case 1:
          index = INT32_MAX;
          break;
        default:
          index = static_cast<int32_t>(swa ? c.swa_rows + rng() % (c.compressed_rows - c.swa_rows) : rows);
      }
      if (!was_out_of_range && (p.lens.empty() || column < p.lens[t])) ++counted;
    }
  }
  return counted;
}

// Number of SWA columns that only seq_lens masks (so the case tests it).
inline int64_t masked_by_seq_lens(const Dsv4DecodeArgs& a) {
  int64_t masked = 0;
  for (int64_t t = 0; t < a.num_tokens; ++t) {
    const int64_t limit = std::min<int64_t>(kSwaColumns, brute_position(a, t) + 1);
    for (int c = static_cast<int>(std::max<int64_t>(limit, 0)); c < kSwaColumns; ++c) {
      masked += (a.lens == nullptr || c < a.lens[t]) && a.indices[t * a.indices_stride + c] >= 0;
    }
  }
  return masked;
}

}  // namespace sparse_decode::test
