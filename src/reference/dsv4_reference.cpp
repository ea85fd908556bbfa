#include "reference/dsv4_reference.h"

#include <cmath>
#include <cstring>
#include <limits>

#include "reference/formats.h"
#include "reference/requests.h"

namespace sparse_decode::reference {
namespace {

double element(const void* base, DType dtype, int64_t offset) {
  if (dtype == DType::kFloat8E4M3) return decode_e4m3(static_cast<const uint8_t*>(base)[offset]);
  return decode_bf16(static_cast<const uint16_t*>(base)[offset]);
}

double scalar(const ScalarArg& arg) { return arg.device ? *arg.device : arg.value; }

// Position of `token` in its request's KV sequence, or -1 when no request holds it.
int64_t token_position(const Dsv4DecodeArgs& args, int64_t token) {
  const TokenRequest r = locate_token(token, args.num_requests, args.cum_seq_lens_q, args.q_len);
  if (r.request < 0) return -1;
  return int64_t{args.seq_lens[r.request]} - r.q_len + r.index;
}

}  // namespace

ColumnState dsv4_column(const Dsv4DecodeArgs& args, int64_t token, int32_t column) {
  ColumnState state;
  if (args.lens && column >= args.lens[token]) return state;
  const int32_t index = args.indices[token * args.indices_stride + column];
  if (index < 0) return state;
  if (column < kSwaColumns && args.seq_lens) {
    const int64_t position = token_position(args, token);
    if (column >= std::min<int64_t>(kSwaColumns, position + 1)) return state;
  }
  state.pool = column < kSwaColumns ? &args.swa_kv : &args.compressed_kv;
  if (index >= state.pool->rows()) {
    state.out_of_range = true;
    state.pool = nullptr;
    return state;
  }
  state.active = true;
  state.row = index;
  return state;
}

Dsv4Result dsv4_decode(const Dsv4DecodeArgs& args) {
  auto gather = [&](int64_t t, std::vector<double>& kv) {
    int64_t out_of_range = 0;
    for (int32_t c = 0; c < args.width; ++c) {
      const ColumnState column = dsv4_column(args, t, c);
      out_of_range += column.out_of_range;
      if (!column.active) continue;
      const KvPool& pool = *column.pool;
      const int64_t offset =
          (column.row / pool.page_size) * pool.page_stride + (column.row % pool.page_size) * pool.row_stride;
      for (int d = 0; d < kHeadDim; ++d) kv.push_back(element(pool.data, args.dtype, offset + d));
    }
    return out_of_range;
  };
  auto load_q = [&](int64_t t, int h, double* q) {
    const int64_t q_offset = t * args.q_token_stride + h * args.q_head_stride;
    for (int d = 0; d < kHeadDim; ++d) q[d] = element(args.q, args.dtype, q_offset + d);
  };
  return attend_tokens(args.num_tokens, args.num_heads, scalar(args.bmm1_scale), scalar(args.bmm2_scale), args.sinks,
                       gather, load_q);
}

Dsv4Result attend_tokens(int64_t tokens, int heads, double bmm1, double bmm2, const float* sinks,
                         const std::function<int64_t(int64_t token, std::vector<double>& kv)>& gather,
                         const std::function<void(int64_t token, int head, double* q)>& load_q) {
  const double inf = std::numeric_limits<double>::infinity();
  Dsv4Result result;
  result.out.assign(static_cast<size_t>(tokens) * heads * kHeadDim, 0.0);
  result.lse.assign(static_cast<size_t>(tokens) * heads, -inf);

  std::vector<double> q(kHeadDim), kv;
  for (int64_t t = 0; t < tokens; ++t) {
    // Decode the token's active rows once; every head reads them.
    kv.clear();
    result.out_of_range += gather(t, kv);
    const size_t active = kv.size() / kHeadDim;
    if (active == 0) continue;  // zeros and lse = -inf, with or without a sink

    for (int h = 0; h < heads; ++h) {
      load_q(t, h, q.data());
      const double sink = sinks ? sinks[h] : -inf;
      const size_t row = static_cast<size_t>(t) * heads + h;
      result.lse[row] = attend(q.data(), kv.data(), active, bmm1, bmm2, sink, &result.out[row * kHeadDim]);
    }
  }
  return result;
}

double attend(const double* q, const double* kv, size_t rows, double bmm1, double bmm2, double sink, double* out) {
  const double inf = std::numeric_limits<double>::infinity();
  if (rows == 0) return -inf;  // zeros and lse = -inf, with or without a sink
  std::vector<double> score(rows, 0.0);
  double max_score = -inf;
  for (size_t c = 0; c < rows; ++c) {
    double dot = 0.0;
    for (int d = 0; d < kHeadDim; ++d) dot += q[d] * kv[c * kHeadDim + d];
    score[c] = bmm1 * dot;
    max_score = std::max(max_score, score[c]);
  }
  // Normalize by the score maximum alone: the same value as SPEC's
  // m = max(scores, sink), and a sink of +inf gives the limit 0, not NaN.
  double sum = 0.0;
  for (size_t c = 0; c < rows; ++c) sum += (score[c] = std::exp(score[c] - max_score));
  const double denominator = sum + std::exp(sink - max_score);
  for (size_t c = 0; c < rows; ++c) {
    const double weight = bmm2 * score[c] / denominator;
    for (int d = 0; d < kHeadDim; ++d) out[d] += weight * kv[c * kHeadDim + d];
  }
  return max_score + std::log(sum);
}

void write_host_outputs(const Dsv4Result& result, int64_t tokens, int heads, void* out, int64_t out_token_stride,
                        int64_t out_head_stride, float* lse, int64_t lse_token_stride, int32_t* out_of_range_count) {
  auto* out_bits = static_cast<uint16_t*>(out);
  for (int64_t t = 0; t < tokens; ++t) {
    for (int h = 0; h < heads; ++h) {
      const size_t row = static_cast<size_t>(t) * heads + h;
      const double* src = &result.out[row * kHeadDim];
      uint16_t* dst = out_bits + t * out_token_stride + h * out_head_stride;
      for (int d = 0; d < kHeadDim; ++d) dst[d] = encode_bf16(src[d]);
      if (lse) lse[t * lse_token_stride + h] = static_cast<float>(result.lse[row]);
    }
  }
  if (out_of_range_count) *out_of_range_count += static_cast<int32_t>(result.out_of_range);
}

void dsv4_decode_host(const Dsv4DecodeArgs& args) {
  write_host_outputs(dsv4_decode(args), args.num_tokens, args.num_heads, args.out, args.out_token_stride,
                     args.out_head_stride, args.lse, args.lse_token_stride, args.out_of_range_count);
}

}  // namespace sparse_decode::reference
