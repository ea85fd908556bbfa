#include "testing/dsv4_problem.h"

#include <algorithm>
#include <array>
#include <cstring>
#include <random>
#include <unordered_set>

#include "reference/formats.h"

namespace sparse_decode::testing {
namespace {

void fill_nan(std::vector<uint8_t>& bytes, DType dtype) {
  if (dtype == DType::kFloat8E4M3) {
    std::fill(bytes.begin(), bytes.end(), uint8_t{0x7F});
  } else {
    for (size_t i = 0; i + 1 < bytes.size(); i += 2) bytes[i] = 0xC0, bytes[i + 1] = 0x7F;
  }
}

}  // namespace

void encode_element(DType dtype, double value, uint8_t* bytes) {
  if (dtype == DType::kFloat8E4M3) {
    bytes[0] = reference::encode_e4m3(value);
  } else {
    const uint16_t bits = reference::encode_bf16(value);
    std::memcpy(bytes, &bits, 2);
  }
}

std::vector<float> draw_sinks(bool draw, int heads, std::mt19937_64& rng, std::normal_distribution<double>& normal) {
  std::vector<float> sinks;
  if (draw) {
    sinks.resize(heads);
    for (auto& s : sinks) s = static_cast<float>(normal(rng));
  }
  return sinks;
}

Dsv4DecodeArgs Dsv4Problem::host_args(void* out, float* lse) const {
  const auto& c = config;
  Dsv4DecodeArgs args;
  set_contiguous_host_args(args, c.tokens, c.heads, q.data(), sinks, out, lse);
  args.dtype = c.dtype;
  args.swa_kv = {swa_kv.data(), c.swa_rows / c.page_size, c.page_size, page_stride(), c.row_stride};
  args.compressed_kv = {compressed_kv.data(), c.compressed_rows / c.page_size, c.page_size, page_stride(),
                        c.row_stride};
  args.indices = indices.data();
  args.width = c.width;
  args.indices_stride = c.width;
  args.lens = lens.empty() ? nullptr : lens.data();
  args.bmm1_scale.value = bmm1_scale;
  args.bmm2_scale.value = bmm2_scale;
  return args;
}

void Dsv4Problem::fill_row(bool compressed, int64_t row, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<double> normal(0.0, 1.0);
  auto& pool = compressed ? compressed_kv : swa_kv;
  const int64_t offset = (row / config.page_size) * page_stride() + (row % config.page_size) * config.row_stride;
  for (int d = 0; d < kHeadDim; ++d) {
    encode_element(config.dtype, normal(rng), &pool[(offset + d) * element_bytes()]);
  }
}

Dsv4Problem make_dsv4_problem(const Dsv4ProblemConfig& config) {
  Dsv4Problem p;
  p.config = config;
  const auto& c = config;
  std::mt19937_64 rng(c.seed);
  std::normal_distribution<double> normal(0.0, 1.0);
  const int64_t bytes = p.element_bytes();

  p.q.resize(static_cast<size_t>(c.tokens) * c.heads * kHeadDim * bytes);
  for (size_t i = 0; i < p.q.size() / bytes; ++i) encode_element(c.dtype, normal(rng), &p.q[i * bytes]);

  const int64_t stride = p.page_stride();
  p.swa_kv.resize(static_cast<size_t>(c.swa_rows / c.page_size * stride * bytes));
  p.compressed_kv.resize(static_cast<size_t>(c.compressed_rows / c.page_size * stride * bytes));
  fill_nan(p.swa_kv, c.dtype);
  fill_nan(p.compressed_kv, c.dtype);

  // Rows [0, live) may be active; rows [live, rows) stay NaN and are named
  // only by masked columns.
  const int64_t swa_live = c.swa_rows * 3 / 4;
  const int64_t compressed_live = c.compressed_rows * 3 / 4;
  std::uniform_real_distribution<double> uniform(0.0, 1.0);
  auto poison_index = [&](int64_t live, int64_t rows) -> int32_t {
    if (uniform(rng) < 0.5) return -1;
    return static_cast<int32_t>(live + static_cast<int64_t>(uniform(rng) * (rows - live)) % (rows - live));
  };

  p.indices.assign(static_cast<size_t>(c.tokens) * c.width, -1);
  if (c.lens) p.lens.resize(c.tokens);
  std::vector<uint8_t> swa_used(c.swa_rows, 0), compressed_used(c.compressed_rows, 0);
  const int32_t topk = c.width - kSwaColumns;
  // A request's windows start at consecutive rows, one a token; past `span`
  // tokens (long requests in small pools) they start over.
  const int64_t span = std::min<int64_t>(std::max(kMaxQueryLen, c.q_len), swa_live - kSwaColumns);
  int64_t window_start = 0;
  for (int64_t t = 0; t < c.tokens; ++t) {
    const int32_t in_request = static_cast<int32_t>(t % std::max(1, c.q_len));
    if (in_request == 0) {
      window_start = static_cast<int64_t>(uniform(rng) * (swa_live - kSwaColumns - span));
    }
    const int32_t len = c.lens ? c.width / 2 + static_cast<int32_t>(uniform(rng) * (c.width / 2 + 1)) : c.width;
    if (c.lens) p.lens[t] = std::min(len, c.width);
    int32_t* row = &p.indices[static_cast<size_t>(t) * c.width];
    for (int32_t col = 0; col < kSwaColumns; ++col) {
      if (col < len) {
        row[col] = static_cast<int32_t>(window_start + in_request % span + col);
        swa_used[row[col]] = 1;
      } else {
        row[col] = poison_index(swa_live, c.swa_rows);
      }
    }
    // Distinct scattered top-k rows.
    std::unordered_set<int32_t> chosen;
    for (int32_t k = 0; k < topk; ++k) {
      const int32_t col = kSwaColumns + k;
      if (col >= len) {
        row[col] = poison_index(compressed_live, c.compressed_rows);
        continue;
      }
      int32_t r;
      do {
        r = static_cast<int32_t>(uniform(rng) * compressed_live) % static_cast<int32_t>(compressed_live);
      } while (!chosen.insert(r).second && chosen.size() < static_cast<size_t>(compressed_live));
      if (uniform(rng) < c.hole_fraction) {
        row[col] = -1;
      } else {
        row[col] = r;
        compressed_used[r] = 1;
      }
    }
  }

  auto fill_used = [&](std::vector<uint8_t>& pool, const std::vector<uint8_t>& used) {
    for (size_t r = 0; r < used.size(); ++r) {
      if (!used[r]) continue;
      const int64_t offset = (r / c.page_size) * stride + (r % c.page_size) * c.row_stride;
      for (int d = 0; d < kHeadDim; ++d) encode_element(c.dtype, normal(rng), &pool[(offset + d) * bytes]);
    }
  };
  fill_used(p.swa_kv, swa_used);
  fill_used(p.compressed_kv, compressed_used);

  p.sinks = draw_sinks(c.sinks, c.heads, rng, normal);
  // Scores with a standard deviation near 1 for N(0, 1) data over 512 dims.
  p.bmm1_scale = static_cast<float>(1.0 / std::sqrt(double{kHeadDim}));
  p.bmm2_scale = static_cast<float>(0.5 + uniform(rng));
  return p;
}

}  // namespace sparse_decode::testing
