#include "testing/dsa_problem.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <random>

#include "reference/dsa_reference.h"
#include "reference/formats.h"
#include "testing/dsv4_problem.h"  // encode_element

namespace sparse_decode::testing {
namespace {

constexpr uint16_t kBf16Nan = 0x7FC0;
constexpr uint8_t kFp8Nan = 0x7F;

}  // namespace

DsaDecodeArgs DsaProblem::host_args(void* out) const {
  const auto& c = config;
  DsaDecodeArgs a;
  a.memory = MemorySpace::kHost;
  a.num_rows = rows();
  a.num_groups = c.groups;
  a.num_heads = c.heads;
  a.q = q.data();
  a.q_row_stride = q_row_stride;
  a.q_head_stride = q_head_stride;
  a.out = out;
  a.out_row_stride = int64_t{c.heads} * kDsaHeadDim;
  a.out_head_stride = kDsaHeadDim;
  a.cache_dtype = c.cache_dtype;
  a.cache = cache.data();
  a.num_pages = pages;
  a.block_size = c.block_size;
  a.cache_page_stride = page_stride;
  a.cache_group_stride = group_stride;
  a.cache_slot_stride = slot_stride;
  a.k_scale = &k_scale;
  a.v_scale = &v_scale;
  a.block_table = block_table.data();
  a.num_requests = c.requests;
  a.max_blocks = c.max_blocks;
  a.block_table_stride = block_table_stride;
  a.query_len = c.query_len;
  a.regions = regions.data();
  a.num_regions = c.regions;
  a.regions_stride = regions_stride;
  a.positions = positions.data();
  a.active = active.data();
  a.clear_inactive = c.clear_inactive;
  a.scale = scale;
  a.splits = c.splits;
  a.gate = gate.empty() ? nullptr : gate.data();
  a.gate_dtype = c.gate_dtype;
  a.gate_token_stride = gate_token_stride;
  return a;
}

void DsaProblem::fill_slot(int64_t page, int32_t group, int32_t slot, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<double> normal(0.0, 1.0);
  const int64_t base = page * page_stride + int64_t{group} * group_stride + int64_t{slot} * slot_stride;
  for (int d = 0; d < kDsaSlotDim; ++d) {
    encode_element(config.cache_dtype, normal(rng), &cache[(base + d) * element_bytes()]);
  }
}

DsaProblem make_dsa_problem(const DsaProblemConfig& c) {
  DsaProblem p;
  p.config = c;
  std::mt19937_64 rng(c.seed);
  std::normal_distribution<double> normal(0.0, 1.0);
  std::uniform_real_distribution<double> uniform(0.0, 1.0);
  auto below = [&](int64_t n) { return static_cast<int64_t>(uniform(rng) * n) % std::max<int64_t>(n, 1); };
  const int pad = c.strided ? 1 : 0;

  p.q_head_stride = kDsaHeadDim + 8 * pad;
  p.q_row_stride = c.heads * p.q_head_stride + 16 * pad;
  p.slot_stride = kDsaSlotDim + 16 * pad;
  p.group_stride = c.block_size * p.slot_stride + 32 * pad;
  p.page_stride = c.groups * p.group_stride + 64 * pad;
  p.block_table_stride = c.max_blocks + 2 * pad;
  p.regions_stride = c.regions + 3 * pad;
  p.gate_token_stride = int64_t{c.groups} * c.heads + 5 * pad;
  p.pages = int64_t{c.requests} * c.max_blocks + 3;  // 3 pages no table names
  p.scale = static_cast<float>(1.5 / std::sqrt(double{kDsaHeadDim}));
  if (c.cache_dtype == DType::kFloat8E4M3) {
    p.k_scale = static_cast<float>(0.5 + uniform(rng));
    p.v_scale = static_cast<float>(0.5 + uniform(rng));
  }
  const int64_t rows = p.rows();
  const int64_t tokens = rows / c.groups;

  // Block tables: a shuffled page for every block of a request's context,
  // out-of-range entries past it (never read: no row sees those blocks).
  std::vector<int64_t> pages(p.pages);
  std::iota(pages.begin(), pages.end(), 0);
  std::shuffle(pages.begin(), pages.end(), rng);
  p.block_table.assign(static_cast<size_t>(c.requests) * p.block_table_stride, -1);
  std::vector<int64_t> context(c.requests);
  const int64_t capacity = int64_t{c.max_blocks} * c.block_size;
  for (int32_t b = 0; b < c.requests; ++b) {
    context[b] = c.query_len + below(std::max<int64_t>(capacity - c.query_len + 1, 1));
    const int64_t blocks = (context[b] - 1) / c.block_size + 1;
    for (int32_t g = 0; g < c.max_blocks; ++g) {
      p.block_table[b * p.block_table_stride + g] =
          g < blocks ? static_cast<int32_t>(pages[b * c.max_blocks + g])
                     : static_cast<int32_t>(uniform(rng) < 0.5 ? -1 : p.pages + below(1000));
    }
  }

  p.q.assign(static_cast<size_t>(rows) * p.q_row_stride, kBf16Nan);
  p.regions.assign(static_cast<size_t>(rows) * p.regions_stride, -1);
  p.positions.assign(rows, 0);
  p.active.assign(rows, 0);
  const int64_t gate_bytes = c.gate_dtype == DsaGateDType::kFloat32 ? 4 : 2;
  if (c.gate) p.gate.assign(static_cast<size_t>(tokens * p.gate_token_stride * gate_bytes), 0xFF);  // NaN

  auto bad_id = [&]() -> int32_t {
    return static_cast<int32_t>(uniform(rng) < 0.5 ? c.max_blocks + below(1000) : -2 - below(1000));
  };
  for (int64_t r = 0; r < rows; ++r) {
    int32_t* regions = &p.regions[r * p.regions_stride];
    const int64_t request = r / (int64_t{c.groups} * c.query_len);
    const int64_t in_request = (r / c.groups) % c.query_len;
    if (r > 0 && uniform(rng) < c.inactive_fraction) {  // row 0 always works: never all zeros
      // Never read: garbage everywhere, NaN q and gate.
      p.positions[r] = static_cast<int32_t>(uniform(rng) < 0.5 ? -7 : capacity + 1000);
      for (int32_t k = 0; k < c.regions; ++k) regions[k] = uniform(rng) < 0.5 ? bad_id() : static_cast<int32_t>(below(c.max_blocks));
      continue;
    }
    p.active[r] = uniform(rng) < 0.5 ? 1 : 7;  // any non-zero value is active
    const int64_t position = context[request] - c.query_len + in_request;
    p.positions[r] = static_cast<int32_t>(position);
    for (int h = 0; h < c.heads; ++h) {
      for (int d = 0; d < kDsaHeadDim; ++d) {
        p.q[r * p.q_row_stride + h * p.q_head_stride + d] = reference::encode_bf16(normal(rng));
      }
    }
    if (c.gate) {
      const int64_t token = r / c.groups;
      for (int h = 0; h < c.heads; ++h) {
        const int64_t index = token * p.gate_token_stride + (r % c.groups) * c.heads + h;
        const double x = 2.0 * normal(rng);
        if (c.gate_dtype == DsaGateDType::kFloat32) {
          const float value = static_cast<float>(x);
          std::memcpy(&p.gate[index * 4], &value, 4);
        } else {
          const uint16_t bits =
              c.gate_dtype == DsaGateDType::kFloat16 ? reference::encode_f16(x) : reference::encode_bf16(x);
          std::memcpy(&p.gate[index * 2], &bits, 2);
        }
      }
    }
    // Visible blocks 0..last, the current (cut) one first more often than not.
    const int64_t last = position / c.block_size;
    std::vector<int32_t> visible(last + 1);
    std::iota(visible.begin(), visible.end(), 0);
    std::shuffle(visible.begin(), visible.end(), rng);
    if (uniform(rng) < 0.7) std::swap(*std::find(visible.begin(), visible.end(), last), visible.front());
    const bool empty = r > 0 && uniform(rng) < c.empty_fraction;
    size_t next = 0;
    for (int32_t k = 0; k < c.regions; ++k) {
      const double u = uniform(rng);
      const bool invisible_exists = last + 1 < c.max_blocks;
      if (u < c.unused_fraction) {
        regions[k] = -1;
      } else if (u < c.unused_fraction + c.invisible_fraction || empty) {
        regions[k] = invisible_exists ? static_cast<int32_t>(last + 1 + below(c.max_blocks - last - 1)) : -1;
      } else if (u < c.unused_fraction + c.invisible_fraction + c.bad_id_fraction) {
        regions[k] = bad_id();
      } else {
        regions[k] = next < visible.size() ? visible[next++] : -1;
      }
    }
    if (!empty && next == 0) regions[below(c.regions)] = visible[next++];  // at least one visible region
    std::shuffle(regions, regions + c.regions, rng);
  }

  // The cache: NaN, then random K and V in every slot a visible key reads.
  const int64_t bytes = p.element_bytes();
  p.cache.resize(static_cast<size_t>(p.pages * p.page_stride * bytes));
  if (bytes == 1) {
    std::fill(p.cache.begin(), p.cache.end(), kFp8Nan);
  } else {
    for (size_t i = 0; i + 1 < p.cache.size(); i += 2) std::memcpy(&p.cache[i], &kBf16Nan, 2);
  }
  std::vector<uint8_t> filled(static_cast<size_t>(p.pages) * c.groups * c.block_size, 0);
  const DsaDecodeArgs args = p.host_args(nullptr);
  for (int64_t r = 0; r < rows; ++r) {
    if (!p.active[r]) continue;
    const int32_t group = static_cast<int32_t>(r % c.groups);
    for (const reference::DsaKey& key : reference::dsa_visible_keys(args, r)) {
      uint8_t& done = filled[(key.page * c.groups + group) * c.block_size + key.slot];
      if (!done) p.fill_slot(key.page, group, key.slot, rng());
      done = 1;
    }
  }
  return p;
}

}  // namespace sparse_decode::testing
