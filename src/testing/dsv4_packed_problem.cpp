#include "testing/dsv4_packed_problem.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <iterator>
#include <numeric>
#include <random>
#include <unordered_set>

#include "reference/formats.h"
#include "testing/dsv4_problem.h"  // encode_element: fast E4M3 nearest even

namespace sparse_decode::testing {
namespace {

constexpr int kExtremeScales[] = {0, 2, 15, 150, 160};

// Every byte of a pool NaN: data rows E4M3 0x7F and BF16 0x7FC0, scale rows
// and the gap between pages 0xFF (UE8M0 NaN, and E4M3 NaN too).
std::vector<uint8_t> nan_pool(int64_t pages, int64_t page_size, int64_t page_stride) {
  std::vector<uint8_t> pool(static_cast<size_t>(pages * page_stride), uint8_t{0xFF});
  for (int64_t p = 0; p < pages; ++p) {
    for (int64_t j = 0; j < page_size; ++j) {
      uint8_t* data = &pool[p * page_stride + j * kPackedDataBytes];
      std::fill_n(data, kPackedFp8Dims, uint8_t{0x7F});
      for (int i = kPackedFp8Dims; i < kPackedDataBytes; i += 2) data[i] = 0xC0, data[i + 1] = 0x7F;
    }
  }
  return pool;
}

// A live row. Group k (tiles 0..6, then the BF16 tail) has the magnitude
// 2^(s - 127) * 112 with s = group_scales[k] + a jitter of -1..1, so that the
// quantizer picks a scale byte near s (amax near 3 sigma = 336 < 448).
void random_row(const Dsv4PackedProblemConfig& c, const std::array<int, kPackedTiles + 1>& group_scales,
                std::mt19937_64& rng, uint8_t* data, uint8_t* scales) {
  std::normal_distribution<double> normal(0.0, 1.0);
  std::uniform_real_distribution<double> uniform(0.0, 1.0);
  double values[kHeadDim];
  for (int group = 0; group <= kPackedTiles; ++group) {
    int s = group_scales[group] + static_cast<int>(rng() % 3) - 1;
    if (uniform(rng) < c.extreme_fraction) s = kExtremeScales[rng() % std::size(kExtremeScales)];
    const double sigma = std::ldexp(112.0, s - 127);
    for (int d = group * kPackedTileDims; d < (group + 1) * kPackedTileDims; ++d) values[d] = sigma * normal(rng);
  }
  quantize_packed_row(values, data, scales);
}

}  // namespace

void quantize_packed_row(const double* values, uint8_t* data, uint8_t* scales) {
  for (int k = 0; k < kPackedTiles; ++k) {
    double amax = 0.0;
    for (int d = 0; d < kPackedTileDims; ++d) amax = std::max(amax, std::fabs(values[k * kPackedTileDims + d]));
    // ceil(log2(amax / 448)), exactly: frexp gives amax / 448 = m * 2^e, m in [0.5, 1).
    int exponent = -127;
    if (amax > 0.0) {
      const double m = std::frexp(amax / 448.0, &exponent);
      if (m == 0.5) --exponent;
    }
    const int byte = std::clamp(127 + exponent, 0, 254);
    scales[k] = static_cast<uint8_t>(byte);
    for (int d = 0; d < kPackedTileDims; ++d) {
      const int dim = k * kPackedTileDims + d;
      encode_element(DType::kFloat8E4M3, std::ldexp(values[dim], 127 - byte), &data[dim]);  // saturates at 448
    }
  }
  for (int d = kPackedFp8Dims; d < kHeadDim; ++d) {
    encode_element(DType::kBFloat16, values[d], &data[kPackedFp8Dims + 2 * (d - kPackedFp8Dims)]);
  }
}

Dsv4PackedDecodeArgs Dsv4PackedProblem::host_args(void* out, float* lse) const {
  const auto& c = config;
  Dsv4PackedDecodeArgs args;
  set_contiguous_host_args(args, c.tokens, c.heads, q.data(), sinks, out, lse);
  args.swa.pool = {swa_pool.data(), swa_pages, c.page_size, page_stride()};
  args.swa.indices = swa_indices.data();
  args.swa.width = c.swa_width;
  args.swa.indices_stride = swa_stride();
  args.swa.lens = swa_lens.empty() ? nullptr : swa_lens.data();
  if (has_extra()) {
    args.extra.pool = {extra_pool.data(), extra_pages, extra_page_size(), extra_page_stride()};
    args.extra.indices = extra_indices.data();
    args.extra.width = c.extra_width;
    args.extra.indices_stride = extra_stride();
    args.extra.lens = extra_lens.data();
  }
  args.softmax_scale = softmax_scale;
  return args;
}

void Dsv4PackedProblem::fill_row(reference::PackedSegmentId segment, int64_t row, uint64_t seed) {
  std::mt19937_64 rng(seed);
  const bool extra = segment == reference::PackedSegmentId::kExtra;
  const PackedPool pool = extra ? PackedPool{extra_pool.data(), extra_pages, extra_page_size(), extra_page_stride()}
                                 : PackedPool{swa_pool.data(), swa_pages, config.page_size, page_stride()};
  // The pool's bytes are this problem's own (non-const) vectors.
  auto* data = const_cast<uint8_t*>(reference::packed_row_data(pool, row));
  auto* scales = const_cast<uint8_t*>(reference::packed_row_scales(pool, row));
  random_row(config, group_scales, rng, data, scales);
}

Dsv4PackedProblem make_dsv4_packed_problem(const Dsv4PackedProblemConfig& config) {
  Dsv4PackedProblem p;
  p.config = config;
  const auto& c = config;
  std::mt19937_64 rng(c.seed);
  std::normal_distribution<double> normal(0.0, 1.0);
  std::uniform_real_distribution<double> uniform(0.0, 1.0);
  const int64_t ps = c.page_size, T = c.tokens;
  const int32_t q_len = std::max(1, c.q_len);

  // Group levels evenly over [scale_min, scale_max] from a random offset (so
  // that every byte of the range is drawn by some seed), in random order.
  const double offset = uniform(rng);
  for (int k = 0; k <= kPackedTiles; ++k) {
    p.group_scales[k] = c.scale_min + static_cast<int>((c.scale_max - c.scale_min + 1) * (k + offset) / 8);
  }
  std::shuffle(p.group_scales.begin(), p.group_scales.end(), rng);

  p.q.resize(static_cast<size_t>(T) * c.heads * kHeadDim);
  for (auto& v : p.q) v = reference::encode_bf16(normal(rng));

  // SWA: the positions of each request's windows, [window, seq_len), mapped page by
  // page through its own block table of distinct random physical pages.
  struct Request {
    int64_t begin, end;           // tokens [begin, end)
    int64_t start = 0;            // position of the request's first token
    int64_t window = 0;           // first position its windows name
    std::vector<int64_t> pages;   // physical page of logical page window / ps + i
  };
  std::vector<Request> requests;
  int64_t live_pages = 0;
  for (int64_t begin = 0; begin < T; begin += q_len) {
    Request r{begin, std::min(T, begin + q_len)};
    const int64_t n = r.end - r.begin;
    const bool short_request = uniform(rng) < c.short_fraction;
    const int64_t seq_len = short_request ? n + static_cast<int64_t>(rng() % std::max<int64_t>(1, c.swa_width - n))
                                          : c.swa_width + n + static_cast<int64_t>(rng() % 4000);
    r.start = seq_len - n;
    r.window = std::max<int64_t>(0, r.start - c.swa_width + 1);
    r.pages.resize((seq_len - 1) / ps - r.window / ps + 1);
    live_pages += static_cast<int64_t>(r.pages.size());
    requests.push_back(std::move(r));
  }
  // A third more pages than the windows need, never assigned: masked
  // columns name their NaN rows.
  p.swa_pages = live_pages + std::max<int64_t>(1, live_pages / 3);
  std::vector<int64_t> order(p.swa_pages);
  std::iota(order.begin(), order.end(), 0);
  std::shuffle(order.begin(), order.end(), rng);
  size_t next_page = 0;
  for (auto& r : requests) {
    for (auto& page : r.pages) page = order[next_page++];
  }
  auto dead_swa_row = [&]() {
    const int64_t page = order[live_pages + rng() % (p.swa_pages - live_pages)];
    return static_cast<int32_t>(page * ps + static_cast<int64_t>(rng() % ps));
  };

  p.swa_indices.assign(static_cast<size_t>(T * p.swa_stride()), -1);
  if (c.swa_lens) p.swa_lens.assign(T, 0);
  std::vector<int32_t> swa_live;  // rows named by active columns
  for (const auto& r : requests) {
    for (int64_t t = r.begin; t < r.end; ++t) {
      const int64_t position = r.start + (t - r.begin);
      const int64_t filled = std::min<int64_t>(position + 1, c.swa_width);
      if (c.swa_lens) p.swa_lens[t] = static_cast<int32_t>(filled);
      int32_t* row = &p.swa_indices[static_cast<size_t>(t * p.swa_stride())];
      for (int64_t col = c.swa_width; col < p.swa_stride(); ++col) row[col] = dead_swa_row();  // never read
      for (int32_t col = 0; col < c.swa_width; ++col) {
        if (col < filled) {
          const int64_t pos = position - filled + 1 + col;
          row[col] = static_cast<int32_t>(r.pages[pos / ps - r.window / ps] * ps + pos % ps);
          swa_live.push_back(row[col]);
        } else if (c.swa_lens && uniform(rng) < 0.5) {
          row[col] = dead_swa_row();  // past lens: never read
        }
      }
    }
  }

  std::vector<int32_t> extra_live;
  if (p.has_extra()) {
    const int64_t eps = p.extra_page_size();
    p.extra_pages = std::max<int64_t>(2, (c.extra_rows + eps - 1) / eps);
    const int64_t live_rows = (p.extra_pages - std::max<int64_t>(1, p.extra_pages / 4)) * eps;
    const int64_t rows = p.extra_pages * eps;
    p.extra_indices.assign(static_cast<size_t>(T * p.extra_stride()), -1);
    p.extra_lens.assign(T, 0);
    for (int64_t t = 0; t < T; ++t) {
      const int32_t len = std::max(1, c.extra_width / 2 + static_cast<int32_t>(rng() % (c.extra_width / 2 + 1)));
      p.extra_lens[t] = len;
      int32_t* row = &p.extra_indices[static_cast<size_t>(t * p.extra_stride())];
      for (int64_t col = c.extra_width; col < p.extra_stride(); ++col) {
        row[col] = static_cast<int32_t>(live_rows + rng() % (rows - live_rows));  // a NaN row, never read
      }
      std::unordered_set<int32_t> chosen;
      for (int32_t col = 0; col < c.extra_width; ++col) {
        if (col >= len) {  // past lens: -1 or a NaN row, never read
          if (uniform(rng) < 0.5) row[col] = static_cast<int32_t>(live_rows + rng() % (rows - live_rows));
          continue;
        }
        int32_t r;
        do r = static_cast<int32_t>(rng() % live_rows);
        while (!chosen.insert(r).second && chosen.size() < static_cast<size_t>(live_rows));
        if (uniform(rng) < c.hole_fraction) continue;  // a -1 hole
        row[col] = r;
        extra_live.push_back(r);
      }
    }
  }

  p.swa_pool = nan_pool(p.swa_pages, ps, p.page_stride());
  if (p.has_extra()) p.extra_pool = nan_pool(p.extra_pages, p.extra_page_size(), p.extra_page_stride());
  std::vector<double> norms;  // of the live rows, for the softmax scale
  auto fill = [&](reference::PackedSegmentId segment, std::vector<int32_t>& live) {
    std::sort(live.begin(), live.end());
    live.erase(std::unique(live.begin(), live.end()), live.end());
    for (int32_t r : live) p.fill_row(segment, r, rng());
    const bool extra = segment == reference::PackedSegmentId::kExtra;
    const PackedPool pool = extra ? PackedPool{p.extra_pool.data(), p.extra_pages, p.extra_page_size(),
                                               p.extra_page_stride()}
                                  : PackedPool{p.swa_pool.data(), p.swa_pages, ps, p.page_stride()};
    double row[kHeadDim];
    for (int32_t r : live) {
      reference::decode_packed_row(pool, r, row);
      double sum = 0.0;
      for (double v : row) sum += v * v;
      norms.push_back(std::sqrt(sum));
    }
  };
  fill(reference::PackedSegmentId::kSwa, swa_live);
  fill(reference::PackedSegmentId::kExtra, extra_live);

  p.sinks = draw_sinks(c.sinks, c.heads, rng, normal);
  // q ~ N(0, 1) gives q.k ~ N(0, |k|^2): scores with a standard deviation of
  // 1 for a row of the median norm, larger for the rows with larger tiles, so
  // that the softmax is neither uniform nor one-hot.
  double median = 1.0;
  if (!norms.empty()) {
    std::nth_element(norms.begin(), norms.begin() + norms.size() / 2, norms.end());
    median = norms[norms.size() / 2] > 0.0 ? norms[norms.size() / 2] : 1.0;
  }
  p.softmax_scale = static_cast<float>(1.0 / median);
  return p;
}

}  // namespace sparse_decode::testing
