#include "reference/dsa_reference.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "reference/formats.h"
#include "reference/parallel.h"

namespace sparse_decode::reference {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

// K [keys, 192] and V [keys, 192] of a row's keys, decoded exactly and scaled.
struct DecodedKeys {
  std::vector<double> k, v;
  size_t count() const { return k.size() / kDsaHeadDim; }
};

DecodedKeys decode_keys(const DsaDecodeArgs& a, int64_t row, const std::vector<DsaKey>& keys) {
  const bool fp8 = a.cache_dtype == DType::kFloat8E4M3;
  const double k_scale = fp8 ? double{*a.k_scale} : 1.0;
  const double v_scale = fp8 ? double{*a.v_scale} : 1.0;
  const int64_t group = row % a.num_groups;
  auto element = [&](int64_t offset) {
    if (fp8) return decode_e4m3(static_cast<const uint8_t*>(a.cache)[offset]);
    return decode_bf16(static_cast<const uint16_t*>(a.cache)[offset]);
  };
  DecodedKeys decoded;
  decoded.k.reserve(keys.size() * kDsaHeadDim);
  decoded.v.reserve(keys.size() * kDsaHeadDim);
  for (const DsaKey& key : keys) {
    const int64_t base =
        key.page * a.cache_page_stride + group * a.cache_group_stride + int64_t{key.slot} * a.cache_slot_stride;
    for (int d = 0; d < kDsaHeadDim; ++d) decoded.k.push_back(element(base + d) * k_scale);
    for (int d = 0; d < kDsaHeadDim; ++d) decoded.v.push_back(element(base + kDsaHeadDim + d) * v_scale);
  }
  return decoded;
}

std::vector<double> decode_q(const DsaDecodeArgs& a, int64_t row, int head) {
  const auto* bits = static_cast<const uint16_t*>(a.q) + row * a.q_row_stride + head * a.q_head_stride;
  std::vector<double> q(kDsaHeadDim);
  for (int d = 0; d < kDsaHeadDim; ++d) q[d] = decode_bf16(bits[d]);
  return q;
}

// Softmax of scale * q . K over the keys `which` (indices into `keys`):
// writes the normalized output to out [192] and returns the natural-log sum
// of exp of the scores; no key: out = 0 and -inf.
double attend(const std::vector<double>& q, const DecodedKeys& keys, const std::vector<size_t>& which,
              double scale, double* out) {
  std::fill(out, out + kDsaHeadDim, 0.0);
  if (which.empty()) return -kInf;
  // Keys go kKeyBlock at a time: independent chains, each summed in the
  // order of one key at a time (the same bits), which a CPU overlaps.
  constexpr size_t kKeyBlock = 4;
  const size_t n = which.size();
  std::vector<double> score(n);
  size_t i = 0;
  for (; i + kKeyBlock <= n; i += kKeyBlock) {
    const double* k[kKeyBlock];
    for (size_t j = 0; j < kKeyBlock; ++j) k[j] = &keys.k[which[i + j] * kDsaHeadDim];
    double dot[kKeyBlock] = {};
    for (int d = 0; d < kDsaHeadDim; ++d) {
      for (size_t j = 0; j < kKeyBlock; ++j) dot[j] += q[d] * k[j][d];
    }
    for (size_t j = 0; j < kKeyBlock; ++j) score[i + j] = scale * dot[j];
  }
  for (; i < n; ++i) {
    const double* k = &keys.k[which[i] * kDsaHeadDim];
    double dot = 0.0;
    for (int d = 0; d < kDsaHeadDim; ++d) dot += q[d] * k[d];
    score[i] = scale * dot;
  }
  double max_score = -kInf;
  for (double s : score) max_score = std::max(max_score, s);
  double sum = 0.0;
  for (double& s : score) sum += (s = std::exp(s - max_score));
  for (i = 0; i + kKeyBlock <= n; i += kKeyBlock) {
    const double* v[kKeyBlock];
    double weight[kKeyBlock];
    for (size_t j = 0; j < kKeyBlock; ++j) {
      v[j] = &keys.v[which[i + j] * kDsaHeadDim];
      weight[j] = score[i + j] / sum;
    }
    for (int d = 0; d < kDsaHeadDim; ++d) {
      double o = out[d];
      for (size_t j = 0; j < kKeyBlock; ++j) o += weight[j] * v[j][d];
      out[d] = o;
    }
  }
  for (; i < n; ++i) {
    const double* v = &keys.v[which[i] * kDsaHeadDim];
    const double weight = score[i] / sum;
    for (int d = 0; d < kDsaHeadDim; ++d) out[d] += weight * v[d];
  }
  return max_score + std::log(sum);
}

bool row_active(const DsaDecodeArgs& a, int64_t row) { return a.active[row] != 0; }

// The shared frame of both computations: inactive rows stay zero; `row_fn`
// fills an active row's [heads, 192] (gate not applied yet).
template <typename RowFn>
DsaResult run_rows(const DsaDecodeArgs& a, RowFn row_fn) {
  const int64_t rows = a.num_rows;
  const int heads = a.num_heads;
  DsaResult result;
  result.out.assign(static_cast<size_t>(rows) * heads * kDsaHeadDim, 0.0);
  result.active.assign(rows, 0);
  result.keys.assign(rows, 0);
  // Rows on the machine's threads (each row alone: the same bits).
  const double work = 2.0 * rows * heads * a.num_regions * a.block_size * 2 * kDsaHeadDim;
  for_blocks(rows, work, [&](int64_t first, int64_t last) {
    for (int64_t r = first; r < last; ++r) {
      if (!row_active(a, r)) continue;  // nothing of the row is read
      result.active[r] = 1;
      const std::vector<DsaKey> keys = dsa_visible_keys(a, r);
      result.keys[r] = static_cast<int64_t>(keys.size());
      if (keys.empty()) continue;  // zeros, whatever the gate
      double* out = &result.out[static_cast<size_t>(r) * heads * kDsaHeadDim];
      row_fn(r, keys, decode_keys(a, r, keys), out);
      for (int h = 0; h < heads; ++h) {
        const double gate = dsa_gate(a, r, h);
        for (int d = 0; d < kDsaHeadDim; ++d) out[h * kDsaHeadDim + d] *= gate;
      }
    }
  });
  return result;
}

}  // namespace

std::vector<DsaKey> dsa_visible_keys(const DsaDecodeArgs& a, int64_t row) {
  std::vector<DsaKey> keys;
  const int64_t request = row / (int64_t{a.num_groups} * a.query_len);
  const int64_t position = a.positions[row];
  const int32_t* table = a.block_table + request * a.block_table_stride;
  const int32_t* regions = a.regions + row * a.regions_stride;
  for (int32_t c = 0; c < a.num_regions; ++c) {
    const int32_t region = regions[c];
    if (region < 0 || region >= a.max_blocks) continue;
    const int64_t first = int64_t{region} * a.block_size;
    if (first > position) continue;  // no visible key: the table entry is not read
    const int64_t page = table[region];
    if (page < 0 || page >= a.num_pages) continue;
    const int64_t visible = std::min<int64_t>(a.block_size, position - first + 1);
    for (int32_t slot = 0; slot < visible; ++slot) keys.push_back({c, page, slot, first + slot});
  }
  return keys;
}

double dsa_gate(const DsaDecodeArgs& a, int64_t row, int head) {
  if (a.gate == nullptr) return 1.0;
  const int64_t token = row / a.num_groups;
  const int64_t offset = token * a.gate_token_stride + (row % a.num_groups) * a.num_heads + head;
  const auto* bits = static_cast<const uint16_t*>(a.gate);
  const double x = a.gate_dtype == DsaGateDType::kFloat32   ? static_cast<const float*>(a.gate)[offset]
                   : a.gate_dtype == DsaGateDType::kFloat16 ? decode_f16(bits[offset])
                                                            : decode_bf16(bits[offset]);
  const double sigmoid = 1.0 / (1.0 + std::exp(-x));
  if (a.gate_dtype == DsaGateDType::kFloat32) return static_cast<float>(sigmoid);
  if (a.gate_dtype == DsaGateDType::kFloat16) return decode_f16(encode_f16(sigmoid));
  return decode_bf16(encode_bf16(sigmoid));
}

DsaResult dsa_decode(const DsaDecodeArgs& a) {
  return run_rows(a, [&](int64_t r, const std::vector<DsaKey>& keys, const DecodedKeys& decoded, double* out) {
    std::vector<size_t> all(keys.size());
    for (size_t i = 0; i < all.size(); ++i) all[i] = i;
    for (int h = 0; h < a.num_heads; ++h) attend(decode_q(a, r, h), decoded, all, a.scale, out + h * kDsaHeadDim);
  });
}

DsaResult dsa_decode_split_combine(const DsaDecodeArgs& a) {
  const int splits = a.splits;
  return run_rows(a, [&](int64_t r, const std::vector<DsaKey>& keys, const DecodedKeys& decoded, double* out) {
    std::vector<std::vector<size_t>> parts(splits);
    for (size_t i = 0; i < keys.size(); ++i) parts[keys[i].column % splits].push_back(i);
    std::vector<double> partial(static_cast<size_t>(splits) * kDsaHeadDim), lse(splits);
    for (int h = 0; h < a.num_heads; ++h) {
      const std::vector<double> q = decode_q(a, r, h);
      double max_lse = -kInf;
      for (int s = 0; s < splits; ++s) {
        double* part = &partial[static_cast<size_t>(s) * kDsaHeadDim];
        lse[s] = static_cast<float>(attend(q, decoded, parts[s], a.scale, part));
        for (int d = 0; d < kDsaHeadDim; ++d) part[d] = static_cast<float>(part[d]);
        max_lse = std::max(max_lse, lse[s]);
      }
      double total = 0.0;
      double* o = out + h * kDsaHeadDim;
      for (int s = 0; s < splits; ++s) {
        if (lse[s] == -kInf) continue;  // an empty split weighs nothing
        const double weight = std::exp(lse[s] - max_lse);
        total += weight;
        for (int d = 0; d < kDsaHeadDim; ++d) o[d] += weight * partial[static_cast<size_t>(s) * kDsaHeadDim + d];
      }
      for (int d = 0; d < kDsaHeadDim; ++d) o[d] /= total;
    }
  });
}

void dsa_decode_host(const DsaDecodeArgs& a) {
  const DsaResult result = dsa_decode(a);
  auto* out = static_cast<uint16_t*>(a.out);
  for (int64_t r = 0; r < a.num_rows; ++r) {
    if (!result.active[r] && !a.clear_inactive) continue;  // left untouched
    for (int h = 0; h < a.num_heads; ++h) {
      const double* src = &result.out[(static_cast<size_t>(r) * a.num_heads + h) * kDsaHeadDim];
      uint16_t* dst = out + r * a.out_row_stride + h * a.out_head_stride;
      for (int d = 0; d < kDsaHeadDim; ++d) dst[d] = encode_bf16(src[d]);
    }
  }
}

}  // namespace sparse_decode::reference
