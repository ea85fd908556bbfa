#include "reference/merge_reference.h"

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>

#include "reference/formats.h"

namespace sparse_decode::reference {
namespace {

double partial_element(const MergeStatesArgs& a, int r, int64_t offset) {
  if (a.partial_dtype == MergeDType::kFloat32) return static_cast<const float*>(a.partial_of(r))[offset];
  return decode_bf16(static_cast<const uint16_t*>(a.partial_of(r))[offset]);
}

}  // namespace

MergeResult merge_states(const MergeStatesArgs& a) {
  const double inf = std::numeric_limits<double>::infinity();
  const int64_t T = a.num_tokens;
  const int H = a.num_heads, D = a.head_dim, R = a.num_ranks;
  MergeResult result;
  result.out.assign(static_cast<size_t>(T) * H * D, 0.0);
  result.lse.assign(static_cast<size_t>(T) * H, -inf);
  std::vector<double> lse(R), weight(R);
  for (int64_t t = 0; t < T; ++t) {
    for (int h = 0; h < H; ++h) {
      const size_t row = static_cast<size_t>(t) * H + h;
      double max = -inf;
      bool any = false, invalid = false;
      for (int r = 0; r < R; ++r) {
        lse[r] = a.lse_of(r)[t * a.lse_token_stride + h * a.lse_head_stride];
        if (lse[r] == -inf) continue;
        any = true;
        invalid |= std::isnan(lse[r]) || lse[r] == inf;
        max = std::max(max, lse[r]);
      }
      if (!any) continue;  // zeros, lse -inf
      double* out = &result.out[row * D];
      if (invalid) {
        for (int d = 0; d < D; ++d) out[d] = std::numeric_limits<double>::quiet_NaN();
        result.lse[row] = std::numeric_limits<double>::quiet_NaN();
        continue;
      }
      double total = 0.0;
      for (int r = 0; r < R; ++r) total += lse[r] == -inf ? 0.0 : (weight[r] = std::exp(lse[r] - max));
      for (int d = 0; d < D; ++d) out[d] = -0.0;
      const int64_t offset = t * a.partial_token_stride + h * a.partial_head_stride;
      for (int r = 0; r < R; ++r) {
        if (lse[r] == -inf) continue;
        const double w = weight[r] / total;
        for (int d = 0; d < D; ++d) out[d] += w * partial_element(a, r, offset + d);
      }
      result.lse[row] = max + std::log(total);
    }
  }
  return result;
}

void merge_states_host(const MergeStatesArgs& a) {
  const MergeResult result = merge_states(a);
  const int H = a.num_heads, D = a.head_dim;
  for (int64_t t = 0; t < a.num_tokens; ++t) {
    for (int h = 0; h < H; ++h) {
      const size_t row = static_cast<size_t>(t) * H + h;
      const double* src = &result.out[row * D];
      const int64_t offset = t * a.out_token_stride + h * a.out_head_stride;
      if (a.out_dtype == MergeDType::kFloat32) {
        float* dst = static_cast<float*>(a.out) + offset;
        for (int d = 0; d < D; ++d) dst[d] = static_cast<float>(src[d]);
      } else {
        uint16_t* dst = static_cast<uint16_t*>(a.out) + offset;
        for (int d = 0; d < D; ++d) dst[d] = encode_bf16(src[d]);
      }
      if (a.out_lse) {
        a.out_lse[t * a.out_lse_token_stride + h * a.out_lse_head_stride] = static_cast<float>(result.lse[row]);
      }
    }
  }
}

}  // namespace sparse_decode::reference
