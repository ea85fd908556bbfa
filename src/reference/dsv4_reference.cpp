#include "reference/dsv4_reference.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>
#include <limits>

#include "reference/formats.h"
#include "reference/parallel.h"
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
  if (args.lens &&
      column >= args.lens[token_offset(token, args.lens_token_stride, args.lens_request_stride, args.q_len)]) {
    return state;
  }
  const int32_t index =
      args.indices[token_offset(token, args.indices_stride, args.indices_request_stride, args.q_len) + column];
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
    const int64_t q_offset =
        token_offset(t, args.q_token_stride, args.q_request_stride, args.q_len) + h * args.q_head_stride;
    for (int d = 0; d < kHeadDim; ++d) q[d] = element(args.q, args.dtype, q_offset + d);
  };
  return attend_tokens(args.num_tokens, args.num_heads, args.width, scalar(args.bmm1_scale), scalar(args.bmm2_scale),
                       args.sinks, args.sink_term, gather, load_q);
}

double lse_with_sink(double lse, double sink) {
  if (sink == -std::numeric_limits<double>::infinity()) return lse;
  if (lse == -std::numeric_limits<double>::infinity() || sink == std::numeric_limits<double>::infinity()) return sink;
  const double m = std::max(lse, sink);
  return m + std::log(std::exp(lse - m) + std::exp(sink - m));
}

Dsv4Result attend_tokens(int64_t tokens, int heads, int64_t width, double bmm1, double bmm2, const float* sinks,
                         SinkTerm sink_term, const std::function<int64_t(int64_t token, std::vector<double>& kv)>& gather,
                         const std::function<void(int64_t token, int head, double* q)>& load_q) {
  const double inf = std::numeric_limits<double>::infinity();
  if (sink_term == SinkTerm::kNone) sinks = nullptr;
  Dsv4Result result;
  result.out.assign(static_cast<size_t>(tokens) * heads * kHeadDim, 0.0);
  result.lse.assign(static_cast<size_t>(tokens) * heads, -inf);
  std::atomic<int64_t> out_of_range{0};
  const double work = 2.0 * tokens * heads * width * kHeadDim;
  for_blocks(tokens, work, [&](int64_t first, int64_t last) {
    std::vector<double> q(kHeadDim), kv;
    int64_t block_out_of_range = 0;
    for (int64_t t = first; t < last; ++t) {
      // Decode the token's active rows once; every head reads them.
      kv.clear();
      block_out_of_range += gather(t, kv);
      const size_t active = kv.size() / kHeadDim;
      for (int h = 0; h < heads && active > 0; ++h) {
        load_q(t, h, q.data());
        const double sink = sinks ? sinks[h] : -inf;
        const size_t row = static_cast<size_t>(t) * heads + h;
        result.lse[row] = attend(q.data(), kv.data(), active, bmm1, bmm2, sink, &result.out[row * kHeadDim]);
      }
      // A token without rows keeps zeros and lse = -inf, with or without a sink,
      // but for the rank of a merge that adds the sink: lse = sink.
      if (sink_term != SinkTerm::kInOutputAndLse || sinks == nullptr) continue;
      for (int h = 0; h < heads; ++h) {
        double& lse = result.lse[static_cast<size_t>(t) * heads + h];
        lse = lse_with_sink(lse, sinks[h]);
      }
    }
    out_of_range += block_out_of_range;
  });
  result.out_of_range = out_of_range.load();
  return result;
}

double attend(const double* q, const double* kv, size_t rows, double bmm1, double bmm2, double sink, double* out) {
  const double inf = std::numeric_limits<double>::infinity();
  if (rows == 0) return -inf;  // zeros and lse = -inf, with or without a sink
  // Rows go kRowBlock at a time: their dot products and output terms are
  // independent chains, each summed in the order of one row at a time (the
  // same bits), which a CPU overlaps.
  constexpr size_t kRowBlock = 4;
  std::vector<double> score(rows, 0.0);
  size_t c = 0;
  for (; c + kRowBlock <= rows; c += kRowBlock) {
    const double* k = kv + c * kHeadDim;
    double dot[kRowBlock] = {};
    for (int d = 0; d < kHeadDim; ++d) {
      for (size_t i = 0; i < kRowBlock; ++i) dot[i] += q[d] * k[i * kHeadDim + d];
    }
    for (size_t i = 0; i < kRowBlock; ++i) score[c + i] = bmm1 * dot[i];
  }
  for (; c < rows; ++c) {
    double dot = 0.0;
    for (int d = 0; d < kHeadDim; ++d) dot += q[d] * kv[c * kHeadDim + d];
    score[c] = bmm1 * dot;
  }
  double max_score = -inf;
  for (c = 0; c < rows; ++c) max_score = std::max(max_score, score[c]);
  // Normalize by the score maximum alone: the same value as SPEC's
  // m = max(scores, sink), and a sink of +inf gives the limit 0, not NaN.
  double sum = 0.0;
  for (c = 0; c < rows; ++c) sum += (score[c] = std::exp(score[c] - max_score));
  const double denominator = sum + std::exp(sink - max_score);
  for (c = 0; c + kRowBlock <= rows; c += kRowBlock) {
    const double* k = kv + c * kHeadDim;
    double weight[kRowBlock];
    for (size_t i = 0; i < kRowBlock; ++i) weight[i] = bmm2 * score[c + i] / denominator;
    for (int d = 0; d < kHeadDim; ++d) {
      double o = out[d];
      for (size_t i = 0; i < kRowBlock; ++i) o += weight[i] * k[i * kHeadDim + d];
      out[d] = o;
    }
  }
  for (; c < rows; ++c) {
    const double weight = bmm2 * score[c] / denominator;
    for (int d = 0; d < kHeadDim; ++d) out[d] += weight * kv[c * kHeadDim + d];
  }
  return max_score + std::log(sum);
}

void write_host_outputs(const Dsv4Result& result, int64_t tokens, int heads, const HostOutputs& outputs) {
  auto* out_bits = static_cast<uint16_t*>(outputs.out);
  for (int64_t t = 0; t < tokens; ++t) {
    uint16_t* out_token =
        out_bits + token_offset(t, outputs.out_token_stride, outputs.out_request_stride, outputs.q_len);
    float* lse_token = outputs.lse ? outputs.lse + token_offset(t, outputs.lse_token_stride,
                                                                outputs.lse_request_stride, outputs.q_len)
                                   : nullptr;
    for (int h = 0; h < heads; ++h) {
      const size_t row = static_cast<size_t>(t) * heads + h;
      const double* src = &result.out[row * kHeadDim];
      uint16_t* dst = out_token + h * outputs.out_head_stride;
      for (int d = 0; d < kHeadDim; ++d) dst[d] = encode_bf16(src[d]);
      if (lse_token) lse_token[h] = static_cast<float>(result.lse[row]);
    }
  }
  if (outputs.out_of_range_count) *outputs.out_of_range_count += static_cast<int32_t>(result.out_of_range);
}

void dsv4_decode_host(const Dsv4DecodeArgs& args) {
  write_host_outputs(dsv4_decode(args), args.num_tokens, args.num_heads, host_outputs(args));
}

}  // namespace sparse_decode::reference
