#include "bench/bench_indices.h"

#include <algorithm>
#include <cstdio>
#include <numeric>
#include <random>
#include <stdexcept>

namespace sparse_decode::bench {
namespace {

// A shared-mode request's window: 128 rows and one more a query token.
constexpr int64_t kSwaWindowRows = kSwaColumns + kMaxQueryLen;
constexpr double kGiB = double(int64_t{1} << 30);

int64_t whole_pages(int64_t rows) { return (rows + kBenchPageSize - 1) / kBenchPageSize * kBenchPageSize; }

// The order in which requests take the disjoint SWA windows of a region.
std::vector<int64_t> shuffled_windows(int64_t swa_rows, int64_t window_rows, std::mt19937_64& rng) {
  std::vector<int64_t> windows(static_cast<size_t>(swa_rows / window_rows));
  if (windows.empty()) {
    throw std::runtime_error("SWA region too small for one window of " + std::to_string(window_rows) + " rows");
  }
  std::iota(windows.begin(), windows.end(), int64_t{0});
  std::shuffle(windows.begin(), windows.end(), rng);
  return windows;
}

std::vector<int32_t> shared_indices(const BenchShape& shape, int64_t swa_rows, int64_t compressed_rows,
                                    uint64_t seed) {
  const int32_t topk = shape.width - kSwaColumns;
  std::mt19937_64 rng(seed);
  const std::vector<int64_t> windows = shuffled_windows(swa_rows, kSwaWindowRows, rng);
  std::uniform_int_distribution<int64_t> any_row(0, std::max<int64_t>(compressed_rows - 1, 0));
  std::vector<int64_t> last_token_of_row(static_cast<size_t>(compressed_rows), -1);  // keeps a token's rows distinct

  const int64_t pages = compressed_rows / kBenchPageSize;
  std::uniform_int_distribution<int64_t> any_page(0, std::max<int64_t>(pages - 1, 0));
  std::vector<int64_t> last_token_of_page(static_cast<size_t>(pages), -1);

  std::vector<int32_t> indices(static_cast<size_t>(shape.tokens * shape.width));
  for (int64_t t = 0; t < shape.tokens; ++t) {
    int32_t* row = &indices[static_cast<size_t>(t * shape.width)];
    const int64_t request = t / kBenchQueryLen, in_request = t % kBenchQueryLen;
    const int64_t window_start = windows[static_cast<size_t>(request) % windows.size()] * kSwaWindowRows;
    for (int32_t c = 0; c < kSwaColumns; ++c) row[c] = static_cast<int32_t>(window_start + in_request + c);
    if (shape.page_aligned_topk) {
      for (int32_t k = 0; k < topk; k += kBenchPageSize) {
        int64_t page;
        do page = any_page(rng);
        while (last_token_of_page[static_cast<size_t>(page)] == t);
        last_token_of_page[static_cast<size_t>(page)] = t;
        for (int64_t j = 0; j < kBenchPageSize; ++j) {
          row[kSwaColumns + k + j] = static_cast<int32_t>(page * kBenchPageSize + j);
        }
      }
      continue;
    }
    for (int32_t k = 0; k < topk; ++k) {
      int64_t r;
      do r = any_row(rng);
      while (last_token_of_row[static_cast<size_t>(r)] == t);
      last_token_of_row[static_cast<size_t>(r)] = t;
      row[kSwaColumns + k] = static_cast<int32_t>(r);
    }
  }
  return indices;
}

// The first `count` entries of a random permutation of 0 .. n - 1 (a partial
// Fisher-Yates shuffle): `count` distinct draws in a random order.
std::vector<int32_t> draw_without_replacement(int64_t n, int64_t count, std::mt19937_64& rng) {
  std::vector<int32_t> pool(static_cast<size_t>(n));
  std::iota(pool.begin(), pool.end(), 0);
  for (int64_t i = 0; i < count; ++i) {
    std::uniform_int_distribution<int64_t> pick(i, n - 1);
    std::swap(pool[static_cast<size_t>(i)], pool[static_cast<size_t>(pick(rng))]);
  }
  pool.resize(static_cast<size_t>(count));
  return pool;
}

std::vector<int32_t> distinct_indices(const BenchShape& shape, int64_t swa_rows, int64_t compressed_rows,
                                      uint64_t seed) {
  const int64_t T = shape.tokens;
  const int32_t topk = shape.width - kSwaColumns;
  if (swa_rows < T * kSwaColumns) {
    throw std::runtime_error("distinct mode: the SWA region has " + std::to_string(swa_rows) +
                             " rows, fewer than T x 128 = " + std::to_string(T * kSwaColumns));
  }
  if (compressed_rows < T * topk) {
    throw std::runtime_error("distinct mode: the compressed region has " + std::to_string(compressed_rows) +
                             " rows, fewer than T x (W - 128) = " + std::to_string(T * topk));
  }
  std::mt19937_64 rng(seed);
  const std::vector<int64_t> windows = shuffled_windows(swa_rows, kSwaColumns, rng);
  const int32_t topk_pages = topk / static_cast<int32_t>(kBenchPageSize);
  const std::vector<int32_t> drawn =
      shape.page_aligned_topk ? draw_without_replacement(compressed_rows / kBenchPageSize, T * topk_pages, rng)
                              : draw_without_replacement(compressed_rows, T * topk, rng);

  std::vector<int32_t> indices(static_cast<size_t>(T * shape.width));
  for (int64_t t = 0; t < T; ++t) {
    int32_t* row = &indices[static_cast<size_t>(t * shape.width)];
    const int64_t window_start = windows[static_cast<size_t>(t)] * kSwaColumns;
    for (int32_t c = 0; c < kSwaColumns; ++c) row[c] = static_cast<int32_t>(window_start + c);
    if (shape.page_aligned_topk) {
      for (int32_t p = 0; p < topk_pages; ++p) {
        const int64_t page = drawn[static_cast<size_t>(t * topk_pages + p)];
        for (int64_t j = 0; j < kBenchPageSize; ++j) {
          row[kSwaColumns + p * kBenchPageSize + j] = static_cast<int32_t>(page * kBenchPageSize + j);
        }
      }
      continue;
    }
    std::copy_n(drawn.begin() + t * topk, topk, row + kSwaColumns);
  }
  return indices;
}

// Everything a distinct-mode run allocates on the device at T tokens and
// width W: the pools and the layers' q, out and indices.
double distinct_run_bytes(int64_t tokens, int32_t width, int32_t heads, int layers, int64_t row_bytes,
                          int64_t q_bytes_per_value, PoolBytes defaults) {
  const PoolBytes pools = pool_bytes_for(BenchMode::kDistinct, {tokens}, {width}, layers, row_bytes, defaults);
  const double per_layer = double(tokens) * (double(heads) * kHeadDim * (q_bytes_per_value + 2) + 4.0 * width);
  return double(pools.swa) + double(pools.compressed) + per_layer * layers;
}

}  // namespace

const char* mode_name(BenchMode mode) { return mode == BenchMode::kDistinct ? "distinct" : "shared"; }

std::vector<int32_t> make_layer_indices(const BenchShape& shape, int64_t swa_rows, int64_t compressed_rows,
                                        uint64_t seed) {
  const int32_t topk = shape.width - kSwaColumns;
  if (topk < 0) throw std::runtime_error("width " + std::to_string(shape.width) + " is under the 128 SWA columns");
  if (topk > compressed_rows) {
    throw std::runtime_error("compressed region has " + std::to_string(compressed_rows) + " rows, fewer than top-k " +
                             std::to_string(topk));
  }
  if (shape.page_aligned_topk && topk % kBenchPageSize != 0) {
    throw std::runtime_error("page-aligned top-k needs W - 128 a multiple of " + std::to_string(kBenchPageSize));
  }
  return shape.mode == BenchMode::kDistinct ? distinct_indices(shape, swa_rows, compressed_rows, seed)
                                            : shared_indices(shape, swa_rows, compressed_rows, seed);
}

RegionRows distinct_region_rows(const std::vector<int64_t>& tokens, const std::vector<int32_t>& widths) {
  RegionRows rows;
  for (int64_t t : tokens) {
    rows.swa = std::max(rows.swa, whole_pages(t * kSwaColumns));
    for (int32_t w : widths) rows.compressed = std::max(rows.compressed, whole_pages(t * (w - kSwaColumns)));
  }
  return rows;
}

PoolBytes pool_bytes_for(BenchMode mode, const std::vector<int64_t>& tokens, const std::vector<int32_t>& widths,
                         int layers, int64_t row_bytes, PoolBytes defaults) {
  if (mode == BenchMode::kShared) return defaults;
  const RegionRows rows = distinct_region_rows(tokens, widths);
  const auto bytes = [&](int64_t region_rows) { return static_cast<size_t>(region_rows * row_bytes * layers); };
  return PoolBytes{std::max(defaults.swa, bytes(rows.swa)), std::max(defaults.compressed, bytes(rows.compressed))};
}

std::string distinct_fit_problem(const std::vector<int64_t>& tokens, const std::vector<int32_t>& widths,
                                 const std::vector<int32_t>& heads, int layers, int64_t row_bytes,
                                 int64_t q_bytes_per_value, PoolBytes defaults, size_t available) {
  if (tokens.empty() || widths.empty() || heads.empty()) return {};
  const int64_t max_tokens = *std::max_element(tokens.begin(), tokens.end());
  const int32_t max_width = *std::max_element(widths.begin(), widths.end());
  const int32_t max_heads = *std::max_element(heads.begin(), heads.end());
  const double pools = [&] {
    const PoolBytes p = pool_bytes_for(BenchMode::kDistinct, tokens, widths, layers, row_bytes, defaults);
    return double(p.swa) + double(p.compressed);
  }();
  const double need = pools + double(max_tokens) * layers *
                                  (double(max_heads) * kHeadDim * (q_bytes_per_value + 2) + 4.0 * max_width);
  if (need <= double(available)) return {};
  // The largest T at the widest width that fits (the bytes grow with T).
  int64_t lo = 0, hi = max_tokens;
  while (lo < hi) {
    const int64_t mid = (lo + hi + 1) / 2;
    const double bytes = distinct_run_bytes(mid, max_width, max_heads, layers, row_bytes, q_bytes_per_value, defaults);
    if (bytes <= double(available)) {
      lo = mid;
    } else {
      hi = mid - 1;
    }
  }
  char text[512];
  std::snprintf(text, sizeof(text),
                "--mode distinct: T = %lld at width %d with %d layers needs %.1f GiB of distinct rows, q, out and "
                "indices, more than the %.1f GiB available; at width %d, %s (or use fewer --layers, or --mode shared)",
                static_cast<long long>(max_tokens), max_width, layers, need / kGiB, double(available) / kGiB, max_width,
                lo > 0 ? ("T <= " + std::to_string(lo) + " fits").c_str() : "no T fits");
  return text;
}

}  // namespace sparse_decode::bench
