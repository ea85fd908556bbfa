// dsa_decode (docs/spec.md section 4) under random and adversarial
// metadata: block tables, regions (duplicates, ids past max_blocks),
// positions, active flags, splits, the gate, BF16 and FP8 caches.
#include <cmath>
#include <cstring>
#include <limits>

#include "fuzz/case.h"
#include "fuzz/data.h"
#include "fuzz/metadata.h"
#include "reference/dsa_reference.h"
#include "reference/formats.h"
#include "sparse_decode/dsa_decode.h"

namespace sparse_decode::fuzz {
namespace {

constexpr int32_t kMin = std::numeric_limits<int32_t>::min();
constexpr int32_t kMax = std::numeric_limits<int32_t>::max();

struct Layout {
  int64_t rows = 0;
  int groups = 1, heads = 16;
  DType cache_dtype = DType::kBFloat16;
  QueryRows q;
  size_t cache = kAbsent, k_scale = kAbsent, v_scale = kAbsent, block_table = kAbsent, regions = kAbsent;
  size_t positions = kAbsent, active = kAbsent, gate = kAbsent, out = kAbsent, workspace = kAbsent;
  int64_t num_pages = 1, page_stride = 0, group_stride = 0, slot_stride = 384;
  int32_t block = 1, num_requests = 1, max_blocks = 1, query_len = 1, num_regions = 1, splits = 1;
  int64_t table_stride = 1, regions_stride = 1, gate_token_stride = 0, out_row_stride = 0, out_head_stride = 192;
  DsaGateDType gate_dtype = DsaGateDType::kBFloat16;
  bool clear_inactive = true, pdl = false;
  float scale = 1.0f;
};

DsaDecodeArgs make_args(const Arena& arena, const Layout& l, uint8_t* base, MemorySpace memory) {
  DsaDecodeArgs a;
  a.memory = memory;
  a.num_rows = l.rows;
  a.num_groups = l.groups;
  a.num_heads = l.heads;
  a.q = at<uint16_t>(arena, base, l.q.region);
  a.q_row_stride = l.q.token_stride;
  a.q_head_stride = l.q.head_stride;
  a.out = at<uint16_t>(arena, base, l.out);
  a.out_row_stride = l.out_row_stride;
  a.out_head_stride = l.out_head_stride;
  a.cache_dtype = l.cache_dtype;
  a.cache = at<uint8_t>(arena, base, l.cache);
  a.num_pages = l.num_pages;
  a.block_size = l.block;
  a.cache_page_stride = l.page_stride;
  a.cache_group_stride = l.group_stride;
  a.cache_slot_stride = l.slot_stride;
  a.k_scale = at<float>(arena, base, l.k_scale);
  a.v_scale = at<float>(arena, base, l.v_scale);
  a.block_table = at<int32_t>(arena, base, l.block_table);
  a.num_requests = l.num_requests;
  a.max_blocks = l.max_blocks;
  a.block_table_stride = l.table_stride;
  a.query_len = l.query_len;
  a.regions = at<int32_t>(arena, base, l.regions);
  a.num_regions = l.num_regions;
  a.regions_stride = l.regions_stride;
  a.positions = at<int32_t>(arena, base, l.positions);
  a.active = at<int32_t>(arena, base, l.active);
  a.clear_inactive = l.clear_inactive;
  a.scale = l.scale;
  a.splits = l.splits;
  a.gate = at<uint8_t>(arena, base, l.gate);
  a.gate_dtype = l.gate_dtype;
  a.gate_token_stride = l.gate_token_stride;
  a.enable_pdl = memory == MemorySpace::kDevice && l.pdl;
  return a;
}

}  // namespace

Outcome run_dsa_case(uint64_t seed, Device& device, std::string* description) {
  Rng rng(seed);
  Outcome outcome;
  Expectation expect;
  Arena arena;
  Layout l;

  const int64_t tokens = rng.chance(0.05) ? 0 : rng.uniform(1, 8);
  l.groups = rng.pick(std::vector<int>{1, 1, 2, 3});
  l.heads = rng.chance(0.5) ? rng.pick(std::vector<int>{1, 8, 16}) : static_cast<int>(rng.uniform(1, 16));
  l.rows = tokens * l.groups;
  std::vector<int32_t> divisors;
  for (int32_t d = 1; d <= std::max<int64_t>(tokens, 1); ++d) {
    if (std::max<int64_t>(tokens, 1) % d == 0) divisors.push_back(d);
  }
  l.query_len = rng.pick(divisors);
  l.num_requests = static_cast<int32_t>(l.rows / (int64_t{l.groups} * l.query_len) + rng.uniform(0, 2));
  l.num_requests = std::max(l.num_requests, 1);
  l.cache_dtype = rng.chance(0.5) ? DType::kBFloat16 : DType::kFloat8E4M3;
  l.block = rng.pick(std::vector<int32_t>{1, 3, 4, 8, 16, 32, 64});  // 64 >> log2(block) regions a tile below 64
  l.num_pages = rng.uniform(1, 8);
  l.max_blocks = static_cast<int32_t>(rng.uniform(1, 8));
  l.num_regions = static_cast<int32_t>(rng.uniform(1, 8));
  l.splits = rng.chance(0.5) ? dsa_splits_for(l.rows) : static_cast<int32_t>(rng.uniform(1, 32));
  l.clear_inactive = rng.chance(0.7);
  l.pdl = rng.chance(0.3);
  const bool huge = rng.chance(0.05);
  const int e = element_bytes(l.cache_dtype), unit = 16 / e;

  l.q = add_query(arena, rng, DType::kBFloat16, l.rows, l.heads, kDsaHeadDim, 8);
  l.slot_stride = 384 + (rng.chance(0.25) ? unit * rng.uniform(1, 2) : 0);
  l.group_stride = l.block * l.slot_stride + (rng.chance(0.25) ? unit * rng.uniform(1, 3) : 0);
  l.page_stride = l.groups * l.group_stride + (rng.chance(0.25) ? unit * rng.uniform(1, 3) : 0);
  l.cache = arena.add("cache", static_cast<size_t>(l.num_pages * l.page_stride * e), RegionKind::kInput);
  if (l.cache_dtype == DType::kFloat8E4M3 || rng.chance(0.3)) {
    const bool edge = rng.chance(0.05);
    const float scales[] = {0.0f, std::nanf(""), std::numeric_limits<float>::infinity()};
    l.k_scale = add_floats(arena, "k_scale", {edge ? scales[rng.uniform(0, 2)] : static_cast<float>(rng.real(0.5, 2.0))});
    l.v_scale = add_floats(arena, "v_scale", {static_cast<float>(rng.real(0.5, 2.0))});
  }
  l.table_stride = l.max_blocks + (rng.chance(0.3) ? rng.uniform(1, 3) : 0);
  std::vector<int32_t> table(static_cast<size_t>(l.num_requests * l.table_stride));
  for (int32_t& page : table) page = draw_row_index(rng, l.num_pages, 0.15);
  l.block_table = add_ints(arena, "block_table", table);
  l.regions_stride = l.num_regions + (rng.chance(0.3) ? rng.uniform(1, 3) : 0);
  const int64_t blocks = l.max_blocks;
  l.regions = add_ints(arena, "regions", draw_index_table(rng, l.rows, l.num_regions, l.regions_stride,
                                                          [&](int32_t) { return blocks; }));
  std::vector<int32_t> positions, active;
  for (int64_t r = 0; r < l.rows; ++r) {
    positions.push_back(rng.chance(0.85) ? static_cast<int32_t>(rng.uniform(-2, int64_t{l.max_blocks} * l.block + 3))
                                         : rng.pick(std::vector<int32_t>{kMin, -1, 0, kMax}));
    active.push_back(rng.chance(0.8) ? 1 : rng.pick(std::vector<int32_t>{0, 0, 2, -1, kMin}));
  }
  l.positions = add_ints(arena, "positions", positions);
  l.active = add_ints(arena, "active", active);
  if (rng.chance(0.4)) {
    l.gate_dtype = rng.chance(0.5) ? DsaGateDType::kBFloat16 : DsaGateDType::kFloat32;
    l.gate_token_stride = int64_t{l.groups} * l.heads + (rng.chance(0.3) ? rng.uniform(1, 4) : 0);
    const size_t count = static_cast<size_t>(std::max<int64_t>(tokens, 1) * l.gate_token_stride);
    l.gate = arena.add("gate", count * (l.gate_dtype == DsaGateDType::kFloat32 ? 4 : 2), RegionKind::kInput);
    for (size_t i = 0; i < count; ++i) {
      double x = 2.0 * rng.normal();
      if (rng.chance(0.03)) x = rng.pick(std::vector<double>{NAN, INFINITY, -INFINITY, 1e30, -1e30});
      if (l.gate_dtype == DsaGateDType::kFloat32) {
        const float f = static_cast<float>(x);
        std::memcpy(arena.host(l.gate) + 4 * i, &f, 4);
      } else {
        const uint16_t b = reference::encode_bf16(x);
        std::memcpy(arena.host(l.gate) + 2 * i, &b, 2);
      }
    }
  }
  l.scale = draw_scale(rng, huge ? rng.real(1.0, 50.0) : 1.0 / std::sqrt(192.0), rng.chance(0.06));
  if (std::isnan(l.scale)) expect.invalid = "scale";
  if (rng.chance(0.02) && expect.invalid.empty()) l.splits = 33, expect.invalid = "splits";
  l.out_head_stride = 192 + (rng.chance(0.3) ? 8 * rng.uniform(1, 3) : 0);
  l.out_row_stride = (l.heads - 1) * l.out_head_stride + 192 + (rng.chance(0.3) ? 8 * rng.uniform(1, 3) : 0);
  l.out = arena.add("out", static_cast<size_t>(std::max<int64_t>(l.rows, 1) * l.out_row_stride * 2), RegionKind::kOutput, 0xFF);
  for (int64_t r = 0; r < l.rows; ++r) {
    if (active[static_cast<size_t>(r)] == 0 && !l.clear_inactive) continue;  // left untouched
    for (int h = 0; h < l.heads; ++h) arena.allow(l.out, static_cast<size_t>((r * l.out_row_stride + h * l.out_head_stride) * 2), 384);
  }

  const size_t workspace_bytes = workspace_size(make_args(arena, l, layout_base(), MemorySpace::kDevice));
  if (workspace_bytes > 0) l.workspace = arena.add("workspace", workspace_bytes, RegionKind::kWorkspace);

  // Data: the slots the active rows' visible keys name are random, the rest NaN.
  uint8_t* image = const_cast<uint8_t*>(arena.image().data());
  const DsaDecodeArgs host = make_args(arena, l, image, MemorySpace::kHost);
  uint8_t* cache = arena.host(l.cache);
  put_nan(l.cache_dtype, cache, l.num_pages * l.page_stride);
  std::vector<bool> live(static_cast<size_t>(l.num_pages * l.groups * l.block));
  if (expect.invalid.empty()) {
    for (int64_t r = 0; r < l.rows; ++r) {
      if (active[static_cast<size_t>(r)] == 0) continue;
      for (const reference::DsaKey& key : reference::dsa_visible_keys(host, r)) {
        live[static_cast<size_t>((key.page * l.groups + r % l.groups) * l.block + key.slot)] = true;
      }
    }
  }
  for (int64_t page = 0; page < l.num_pages; ++page) {
    for (int g = 0; g < l.groups; ++g) {
      for (int32_t s = 0; s < l.block; ++s) {
        if (!live[static_cast<size_t>((page * l.groups + g) * l.block + s)]) continue;
        uint8_t* slot = cache + (page * l.page_stride + g * l.group_stride + s * l.slot_stride) * e;
        copy_from_table(rng, l.cache_dtype == DType::kFloat8E4M3 ? Table::kNormalFp8 : Table::kNormalBf16, slot,
                        kDsaSlotDim);
      }
    }
  }
  fill_query(arena, l.q, DType::kBFloat16, rng, l.rows, l.heads, kDsaHeadDim, huge, 64.0);
  if (description) {
    *description = std::string(l.cache_dtype == DType::kBFloat16 ? "BF16" : "FP8") + " rows=" + std::to_string(l.rows) +
                   " G=" + std::to_string(l.groups) + " heads=" + std::to_string(l.heads) + " query_len=" +
                   std::to_string(l.query_len) + " requests=" + std::to_string(l.num_requests) + " block=" +
                   std::to_string(l.block) + " pages=" + std::to_string(l.num_pages) + " max_blocks=" +
                   std::to_string(l.max_blocks) + " R=" + std::to_string(l.num_regions) + " splits=" +
                   std::to_string(l.splits) + (l.clear_inactive ? " clear" : "") + (l.pdl ? " pdl" : "") +
                   "; block_table=" + ints(table) + "; positions=" + ints(positions) + "; active=" + ints(active) +
                   "; gate=" + (l.gate == kAbsent ? "none" : "given") + "; scale=" + std::to_string(l.scale);
  }

  // The device call, and on every 8th seed the CPU backend.
  std::vector<uint8_t> after;
  const bool ran = run_case_call(
      arena, device, expect, seed, l.workspace, workspace_bytes,
      [&](uint8_t* base, MemorySpace memory) { return make_args(arena, l, base, memory); },
      [](const DsaDecodeArgs& a, void* w, size_t bytes, CUstream_st* stream) { return dsa_decode(a, w, bytes, stream); }, after,
      outcome);
  if (!ran) return outcome;

  const reference::DsaResult ref = reference::dsa_decode(host);
  const auto* out = reinterpret_cast<const uint16_t*>(after.data() + arena.region(l.out).offset);
  int reported = 0;
  for (int64_t r = 0; r < l.rows; ++r) {
    if (active[static_cast<size_t>(r)] == 0 && !l.clear_inactive) continue;
    for (int h = 0; h < l.heads; ++h) {
      const RowComparison c = compare_row(&ref.out[static_cast<size_t>((r * l.heads + h) * kDsaHeadDim)],
                                          out + r * l.out_row_stride + h * l.out_head_stride, kDsaHeadDim);
      outcome.note(c);
      if (c.verdict != RowVerdict::kMatch && reported++ < 4) {
        const std::string what = "out (row " + std::to_string(r) + ", head " + std::to_string(h) + "): " + c.detail;
        (c.verdict == RowVerdict::kMismatch ? outcome.failures : outcome.policy).push_back(what);
      }
    }
  }
  return outcome;
}

}  // namespace sparse_decode::fuzz
