#include "testing/dsv4_hca_problem.h"

#include <algorithm>
#include <climits>
#include <cmath>
#include <numeric>
#include <random>

#include "testing/dsv4_problem.h"

namespace sparse_decode::testing {
namespace {

constexpr uint8_t kFp8Nan = 0x7F;

// Token t's request among `cum` (request-major), or -1.
int32_t request_of(const Dsv4HcaProblem& p, int64_t t) {
  if (p.cum_seq_lens_q.empty()) return static_cast<int32_t>(t / p.config.q_len);
  for (int32_t b = 0; b < p.num_requests; ++b) {
    if (t >= p.cum_seq_lens_q[b] && t < p.cum_seq_lens_q[b + 1]) return b;
  }
  return -1;
}

}  // namespace

KvPool Dsv4HcaProblem::swa_pool() const {
  return {swa_kv.data(), config.swa_rows / config.swa_page_size, config.swa_page_size, swa_page_stride(), kHeadDim};
}

KvPool Dsv4HcaProblem::compressed_pool() const {
  return {compressed_kv.data(), config.compressed_pages, config.page_size, compressed_page_stride(), kHeadDim};
}

Dsv4HcaDecodeArgs Dsv4HcaProblem::host_args(void* out, float* lse) const {
  const auto& c = config;
  Dsv4HcaDecodeArgs args;
  set_contiguous_host_args(args, c.tokens, c.heads, q.data(), sinks, out, lse);
  args.swa_kv = swa_pool();
  args.compressed_kv = compressed_pool();
  args.swa_rows = swa_rows.data();
  args.swa_rows_stride = kSwaColumns;
  args.swa_lens = swa_lens.data();
  args.block_table = block_table.data();
  args.max_pages = c.max_pages;
  args.block_table_stride = c.max_pages;
  args.lens = lens.data();
  args.hca_seq_lens = hca_seq_lens.data();
  args.num_requests = num_requests;
  if (c.varlen) {
    args.cum_seq_lens_q = cum_seq_lens_q.data();
    args.max_q_len = c.q_len;
  } else {
    args.q_len = c.q_len;
  }
  args.bmm1_scale = bmm1_scale;
  args.bmm2_scale = bmm2_scale;
  return args;
}

void Dsv4HcaProblem::fill_row(bool compressed, int64_t row, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<double> normal(0.0, 1.0);
  const KvPool pool = compressed ? compressed_pool() : swa_pool();
  uint8_t* bytes = (compressed ? compressed_kv : swa_kv).data() + (row / pool.page_size) * pool.page_stride +
                   (row % pool.page_size) * pool.row_stride;
  for (int d = 0; d < kHeadDim; ++d) encode_element(DType::kFloat8E4M3, normal(rng), bytes + d);
}

void Dsv4HcaProblem::set_window(int32_t window, uint64_t seed) {
  std::mt19937_64 rng(seed);
  for (auto& w : swa_lens) w = window;
  for (int64_t t = 0; t < config.tokens; ++t) {
    for (int32_t col = 0; col < std::clamp(window, 0, kSwaColumns); ++col) {
      int32_t& row = swa_rows[t * kSwaColumns + col];
      if (row < 0 || row >= config.swa_rows) row = static_cast<int32_t>(rng() % config.swa_rows);
      fill_row(false, row, rng());
    }
  }
}

void Dsv4HcaProblem::make_table_live(uint64_t seed) {
  std::mt19937_64 rng(seed);
  const auto& c = config;
  for (int64_t t = 0; t < c.tokens; ++t) {
    for (int64_t k = 0; k < c.max_pages; ++k) {
      int32_t& page = block_table[t * c.max_pages + k];
      if (page < 0 || page >= c.compressed_pages) page = static_cast<int32_t>(rng() % c.compressed_pages);
      for (int64_t s = 0; s < c.page_size; ++s) fill_row(true, page * c.page_size + s, rng());
    }
  }
}

Dsv4HcaProblem make_dsv4_hca_problem(const Dsv4HcaProblemConfig& config) {
  Dsv4HcaProblem p;
  p.config = config;
  const auto& c = config;
  std::mt19937_64 rng(c.seed);
  std::normal_distribution<double> normal(0.0, 1.0);
  std::uniform_real_distribution<double> uniform(0.0, 1.0);
  auto below = [&](int64_t n) { return static_cast<int64_t>(rng() % static_cast<uint64_t>(n)); };

  // Requests: uniform q_len, or lengths 1..q_len that add up to T.
  std::vector<int64_t> begin = {0};
  while (begin.back() < c.tokens) {
    const int64_t left = c.tokens - begin.back();
    begin.push_back(begin.back() + (c.varlen ? 1 + below(std::min<int64_t>(c.q_len, left)) : c.q_len));
  }
  p.num_requests = static_cast<int32_t>(begin.size() - 1);
  if (c.varlen) p.cum_seq_lens_q.assign(begin.begin(), begin.end());

  p.q.resize(static_cast<size_t>(c.tokens) * c.heads * kHeadDim);
  for (auto& byte : p.q) encode_element(DType::kFloat8E4M3, normal(rng), &byte);
  p.swa_kv.assign(static_cast<size_t>(c.swa_rows / c.swa_page_size * p.swa_page_stride()), kFp8Nan);
  p.compressed_kv.assign(static_cast<size_t>(c.compressed_pages * p.compressed_page_stride()), kFp8Nan);
  const int64_t swa_live = c.swa_rows * 3 / 4;
  const int64_t live_pages = std::min(c.compressed_pages, std::max<int64_t>(c.max_pages, c.compressed_pages * 3 / 4));
  const int64_t capacity = int64_t{c.max_pages} * c.page_size;

  // Garbage for entries no active column reads: -1 and other negatives,
  // past the pool, INT32_MAX, or a NaN row / page.
  auto garbage = [&](int64_t live, int64_t end) -> int32_t {
    switch (below(5)) {
      case 0: return -1;
      case 1: return static_cast<int32_t>(end + below(100));
      case 2: return INT32_MAX;
      case 3: return live < end ? static_cast<int32_t>(live + below(end - live)) : -1;
      default: return INT32_MIN + static_cast<int32_t>(below(100));
    }
  };

  p.swa_rows.resize(static_cast<size_t>(c.tokens) * kSwaColumns);
  p.swa_lens.resize(c.tokens);
  p.block_table.resize(static_cast<size_t>(c.tokens) * c.max_pages);
  p.lens.resize(c.tokens);
  p.hca_seq_lens.resize(p.num_requests);
  std::vector<uint8_t> swa_used(c.swa_rows, 0), compressed_used(c.compressed_pages * c.page_size, 0);
  std::vector<int32_t> pages(live_pages);
  for (int32_t b = 0; b < p.num_requests; ++b) {
    const int64_t backing = below(capacity + 1);
    p.hca_seq_lens[b] = static_cast<int32_t>(kSwaColumns + backing);
    std::iota(pages.begin(), pages.end(), 0);
    std::shuffle(pages.begin(), pages.end(), rng);  // the request's pages: the first max_pages
    const int64_t window_start = below(swa_live);
    const int64_t q_len = begin[b + 1] - begin[b];
    for (int64_t i = 0; i < q_len; ++i) {
      const int64_t t = begin[b] + i;
      // Causal: later tokens of a request see more of it; some see a random prefix.
      int64_t slots = uniform(rng) < 0.5 ? below(backing + 1) : std::max<int64_t>(0, backing - (q_len - 1 - i));
      p.lens[t] = static_cast<int32_t>(kSwaColumns + slots);
      if (uniform(rng) < c.odd_lens) {
        slots = 0;
        p.lens[t] = uniform(rng) < 0.5 ? static_cast<int32_t>(below(kSwaColumns + 8)) - 8  // below 128
                                       : static_cast<int32_t>(kSwaColumns + backing + 1 + below(64));
        if (p.lens[t] > kSwaColumns) slots = backing;  // past the footprint: hca_seq_lens bounds it
      }
      const int32_t window = uniform(rng) < c.short_window ? static_cast<int32_t>(below(kSwaColumns + 1)) : 128;
      p.swa_lens[t] = window;
      int32_t* rows = &p.swa_rows[t * kSwaColumns];
      for (int32_t col = 0; col < kSwaColumns; ++col) {
        if (col >= window) {
          rows[col] = garbage(swa_live, c.swa_rows);
        } else if (uniform(rng) < c.hole_fraction) {
          rows[col] = -1;
        } else {
          rows[col] = static_cast<int32_t>((window_start + i + col) % swa_live);  // the ring wraps around
          swa_used[rows[col]] = 1;
        }
      }
      int32_t* table = &p.block_table[t * c.max_pages];
      const int64_t needed = (slots + c.page_size - 1) / c.page_size;
      for (int64_t k = 0; k < c.max_pages; ++k) {
        if (k >= needed) {
          table[k] = garbage(live_pages, c.compressed_pages);
        } else {
          table[k] = uniform(rng) < c.hole_fraction ? -1 : pages[k];
        }
      }
      for (int64_t j = 0; j < slots; ++j) {
        const int32_t page = table[j / c.page_size];
        if (page >= 0) compressed_used[page * c.page_size + j % c.page_size] = 1;
      }
    }
  }

  const KvPool compressed = p.compressed_pool();
  for (int64_t r = 0; r < c.swa_rows; ++r) {
    if (swa_used[r]) p.fill_row(false, r, rng());
  }
  for (int64_t r = 0; r < compressed.rows(); ++r) {
    if (compressed_used[r]) p.fill_row(true, r, rng());
  }

  p.sinks = draw_sinks(c.sinks, c.heads, rng, normal);
  p.bmm1_scale = static_cast<float>(1.0 / std::sqrt(double{kHeadDim}));
  p.bmm2_scale = static_cast<float>(0.5 + uniform(rng));
  return p;
}

Dsv4HcaExpansion expand_to_section1(const Dsv4HcaProblem& p) {
  const auto& c = p.config;
  Dsv4HcaExpansion e;
  e.width = static_cast<int32_t>((kSwaColumns + c.max_pages * c.page_size + 3) / 4 * 4);
  e.indices.assign(static_cast<size_t>(c.tokens) * e.width, -1);
  e.lens.resize(c.tokens);
  for (int64_t t = 0; t < c.tokens; ++t) {
    int32_t* row = &e.indices[t * e.width];
    const int32_t window = std::clamp(p.swa_lens[t], 0, kSwaColumns);
    std::copy_n(&p.swa_rows[t * kSwaColumns], window, row);
    const int32_t b = request_of(p, t);
    int64_t slots = 0;
    if (b >= 0) {
      slots = std::min<int64_t>({int64_t{p.lens[t]} - kSwaColumns, int64_t{p.hca_seq_lens[b]} - kSwaColumns,
                                 int64_t{c.max_pages} * c.page_size});
      slots = std::max<int64_t>(slots, 0);
    }
    for (int64_t j = 0; j < slots; ++j) {
      const int64_t page = p.block_table[t * c.max_pages + j / c.page_size];
      const int64_t index = page * c.page_size + j % c.page_size;
      row[kSwaColumns + j] = page < 0 ? -1 : static_cast<int32_t>(std::min<int64_t>(index, INT32_MAX));
    }
    e.lens[t] = static_cast<int32_t>(kSwaColumns + slots);
  }
  return e;
}

Dsv4DecodeArgs Dsv4HcaExpansion::args(const Dsv4HcaProblem& p, void* out, float* lse) const {
  const Dsv4HcaDecodeArgs hca = p.host_args(out, lse);
  Dsv4DecodeArgs a;
  a.memory = MemorySpace::kHost;
  a.dtype = DType::kFloat8E4M3;
  a.num_tokens = hca.num_tokens;
  a.num_heads = hca.num_heads;
  a.q = hca.q;
  a.q_token_stride = hca.q_token_stride;
  a.q_head_stride = hca.q_head_stride;
  a.swa_kv = hca.swa_kv;
  a.compressed_kv = hca.compressed_kv;
  a.indices = indices.data();
  a.width = width;
  a.indices_stride = width;
  a.lens = lens.data();
  a.sinks = hca.sinks;
  a.bmm1_scale.value = hca.bmm1_scale;
  a.bmm2_scale.value = hca.bmm2_scale;
  a.out = out;
  a.out_token_stride = hca.out_token_stride;
  a.out_head_stride = hca.out_head_stride;
  a.lse = lse;
  a.lse_token_stride = hca.lse_token_stride;
  return a;
}

}  // namespace sparse_decode::testing
