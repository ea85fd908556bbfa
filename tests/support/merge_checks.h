// What the merge_states suites share (cpu/merge/, gpu/merge/): random merge
// cases over host vectors (partials with padded strides, lse with empty
// ranks, a token empty on every rank, NaN in every partial that no merge may
// use), a literal transcription of SPEC section 5 as the test-side oracle,
// and the comparisons.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "reference/formats.h"
#include "sparse_decode/merge_states.h"
#include "support/test_support.h"

namespace sparse_decode::test {

inline constexpr double kMergeInf = std::numeric_limits<double>::infinity();

struct MergeCaseConfig {
  int ranks = 4;
  int64_t tokens = 5;
  int heads = 16;
  int head_dim = kHeadDim;
  MergeDType partial_dtype = MergeDType::kBFloat16;
  MergeDType out_dtype = MergeDType::kBFloat16;
  double empty_fraction = 0.25;  // (rank, token, head) entries with lse = -inf and NaN partials
  bool empty_token = true;       // one token empty on every rank (T >= 2)
  bool stacked = false;          // partial_base / lse_base instead of the pointer lists
  int64_t head_pad = 8;          // elements between heads past head_dim (a multiple of 8)
  double lse_spread = 6.0;       // lse drawn uniformly in [-spread, spread] around lse_center
  double lse_center = 0.0;
  uint64_t seed = 1;
};

struct MergeCase {
  MergeCaseConfig config;
  std::vector<uint8_t> partials;  // [R, T, H, head_stride] elements of partial_dtype; padding NaN
  std::vector<float> lses;        // [R, T, H]
  int64_t head_stride = 0, token_stride = 0, rank_stride = 0;  // of the partials, elements

  int64_t element_bytes() const { return config.partial_dtype == MergeDType::kFloat32 ? 4 : 2; }
  int64_t out_elements() const { return config.tokens * config.heads * config.head_dim; }
  int64_t lse_index(int r, int64_t t, int h) const { return (r * config.tokens + t) * config.heads + h; }
  double partial(int r, int64_t t, int h, int d) const {
    const int64_t i = r * rank_stride + t * token_stride + h * head_stride + d;
    if (config.partial_dtype == MergeDType::kFloat32) {
      float v;
      std::memcpy(&v, &partials[i * 4], 4);
      return v;
    }
    uint16_t bits;
    std::memcpy(&bits, &partials[i * 2], 2);
    return reference::decode_bf16(bits);
  }
  void set_partial(int r, int64_t t, int h, int d, double value) {
    const int64_t i = r * rank_stride + t * token_stride + h * head_stride + d;
    if (config.partial_dtype == MergeDType::kFloat32) {
      const float v = static_cast<float>(value);
      std::memcpy(&partials[i * 4], &v, 4);
    } else {
      const uint16_t bits = reference::encode_bf16(value);
      std::memcpy(&partials[i * 2], &bits, 2);
    }
  }

  // Arguments over `partial_base` and `lse_base` (this case's vectors, or
  // device copies of them), writing a contiguous out [T, H, D] and out_lse
  // [T, H] (may be null). The pointer lists (when not stacked) live in
  // this object: it must outlive the call.
  MergeStatesArgs args(const void* partial_base, const float* lse_base, void* out, float* out_lse,
                       MemorySpace memory) {
    const MergeCaseConfig& c = config;
    MergeStatesArgs a;
    a.memory = memory;
    a.num_ranks = c.ranks;
    a.num_tokens = c.tokens;
    a.num_heads = c.heads;
    a.head_dim = c.head_dim;
    a.partial_dtype = c.partial_dtype;
    a.partial_token_stride = token_stride;
    a.partial_head_stride = head_stride;
    a.lse_token_stride = c.heads;
    a.lse_head_stride = 1;
    if (c.stacked) {
      a.partial_base = partial_base;
      a.partial_rank_stride = rank_stride;
      a.lse_base = lse_base;
      a.lse_rank_stride = c.tokens * c.heads;
    } else {
      // One pair of lists a memory space: host_args() must not repoint the
      // lists of device arguments made before it.
      std::vector<const void*>& partial_list = partial_lists_[memory == MemorySpace::kHost];
      std::vector<const float*>& lse_list = lse_lists_[memory == MemorySpace::kHost];
      partial_list.clear();
      lse_list.clear();
      for (int r = 0; r < c.ranks; ++r) {
        partial_list.push_back(static_cast<const char*>(partial_base) + r * rank_stride * element_bytes());
        lse_list.push_back(lse_base + r * c.tokens * c.heads);
      }
      a.partials = partial_list.data();
      a.lses = lse_list.data();
    }
    a.out_dtype = c.out_dtype;
    a.out = out;
    a.out_token_stride = int64_t{c.heads} * c.head_dim;
    a.out_head_stride = c.head_dim;
    a.out_lse = out_lse;
    a.out_lse_token_stride = c.heads;
    a.out_lse_head_stride = 1;
    return a;
  }
  MergeStatesArgs host_args(void* out, float* out_lse) {
    return args(partials.data(), lses.data(), out, out_lse, MemorySpace::kHost);
  }

 private:
  std::vector<const void*> partial_lists_[2];  // [device, host]
  std::vector<const float*> lse_lists_[2];
};

inline MergeCase make_merge_case(const MergeCaseConfig& c) {
  MergeCase m;
  m.config = c;
  m.head_stride = c.head_dim + c.head_pad;
  m.token_stride = c.heads * m.head_stride;
  m.rank_stride = c.tokens * m.token_stride;
  std::mt19937_64 rng(c.seed);
  std::uniform_real_distribution<double> uniform(0.0, 1.0);
  std::normal_distribution<double> normal(0.0, 1.0);
  m.partials.assign(static_cast<size_t>(c.ranks * m.rank_stride * m.element_bytes()), 0);
  m.lses.assign(static_cast<size_t>(c.ranks * c.tokens * c.heads), 0.0f);
  const int64_t empty_token = c.empty_token && c.tokens >= 2 ? static_cast<int64_t>(rng() % c.tokens) : -1;
  const double nan = std::numeric_limits<double>::quiet_NaN();
  for (int r = 0; r < c.ranks; ++r) {
    for (int64_t t = 0; t < c.tokens; ++t) {
      for (int h = 0; h < c.heads; ++h) {
        const bool empty = t == empty_token || uniform(rng) < c.empty_fraction;
        m.lses[m.lse_index(r, t, h)] =
            empty ? -std::numeric_limits<float>::infinity()
                  : static_cast<float>(c.lse_center + c.lse_spread * (2.0 * uniform(rng) - 1.0));
        for (int64_t d = 0; d < m.head_stride; ++d) {
          const bool pad = d >= c.head_dim;
          m.set_partial(r, t, h, static_cast<int>(d), empty || pad ? nan : normal(rng));
        }
      }
    }
  }
  return m;
}

// SPEC section 5 as written: L = log(sum_r exp(lse_r)) (shifted by the
// largest lse so that it cannot overflow), out = sum_r exp(lse_r - L) out_r
// over the non-empty ranks; zeros and -inf where every rank is empty.
struct MergeExpected {
  std::vector<double> out, lse;  // [T, H, D], [T, H]
};
inline MergeExpected brute_merge(const MergeCase& m) {
  const MergeCaseConfig& c = m.config;
  MergeExpected e;
  e.out.assign(static_cast<size_t>(m.out_elements()), 0.0);
  e.lse.assign(static_cast<size_t>(c.tokens * c.heads), -kMergeInf);
  for (int64_t t = 0; t < c.tokens; ++t) {
    for (int h = 0; h < c.heads; ++h) {
      double shift = -kMergeInf;
      for (int r = 0; r < c.ranks; ++r) shift = std::max<double>(shift, m.lses[m.lse_index(r, t, h)]);
      if (shift == -kMergeInf) continue;
      double sum = 0.0;
      for (int r = 0; r < c.ranks; ++r) sum += std::exp(m.lses[m.lse_index(r, t, h)] - shift);
      const double L = shift + std::log(sum);
      e.lse[t * c.heads + h] = L;
      for (int r = 0; r < c.ranks; ++r) {
        const double l = m.lses[m.lse_index(r, t, h)];
        if (l == -kMergeInf) continue;
        for (int d = 0; d < c.head_dim; ++d) {
          e.out[(t * c.heads + h) * c.head_dim + d] += std::exp(l - L) * m.partial(r, t, h, d);
        }
      }
    }
  }
  return e;
}

// An output of out_dtype decoded to doubles.
inline std::vector<double> decode_output(const std::vector<uint8_t>& bytes, MergeDType dtype) {
  const size_t n = bytes.size() / (dtype == MergeDType::kFloat32 ? 4 : 2);
  std::vector<double> values(n);
  for (size_t i = 0; i < n; ++i) {
    if (dtype == MergeDType::kFloat32) {
      float v;
      std::memcpy(&v, &bytes[i * 4], 4);
      values[i] = v;
    } else {
      uint16_t bits;
      std::memcpy(&bits, &bytes[i * 2], 2);
      values[i] = reference::decode_bf16(bits);
    }
  }
  return values;
}

// Relative L2 error of `got` against `expected`, and the count of
// non-finite values in got.
struct MergeComparison {
  double relative_error = 0.0;
  int64_t non_finite = 0;
};
inline MergeComparison compare(const std::vector<double>& got, const std::vector<double>& expected) {
  MergeComparison c;
  double err2 = 0.0, ref2 = 0.0;
  for (size_t i = 0; i < got.size(); ++i) {
    if (!std::isfinite(got[i])) ++c.non_finite;
    err2 += (got[i] - expected[i]) * (got[i] - expected[i]);
    ref2 += expected[i] * expected[i];
  }
  c.relative_error = ref2 > 0 ? std::sqrt(err2 / ref2) : std::sqrt(err2);
  return c;
}

// Elements of (token, head) rows that every rank leaves empty but that are
// not +0.0, and lse entries of those rows that are not -inf.
inline int64_t nonzero_in_empty_rows(const MergeCase& m, const std::vector<uint8_t>& out_bytes,
                                     const std::vector<float>& out_lse) {
  const MergeCaseConfig& c = m.config;
  const int64_t bytes = c.out_dtype == MergeDType::kFloat32 ? 4 : 2;
  int64_t bad = 0;
  for (int64_t t = 0; t < c.tokens; ++t) {
    for (int h = 0; h < c.heads; ++h) {
      bool empty = true;
      for (int r = 0; r < c.ranks; ++r) empty &= m.lses[m.lse_index(r, t, h)] == -kMergeInf;
      if (!empty) continue;
      const int64_t row = (t * c.heads + h) * c.head_dim * bytes;
      for (int64_t i = 0; i < c.head_dim * bytes; ++i) bad += out_bytes[row + i] != 0;
      if (!out_lse.empty()) bad += out_lse[t * c.heads + h] != -std::numeric_limits<float>::infinity();
    }
  }
  return bad;
}

}  // namespace sparse_decode::test
