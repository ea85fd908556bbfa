// dsv4_decode_hca (docs/spec.md section 3) under random and adversarial
// metadata: window rows and lens, block tables with page ids past the pool
// (INT32_MAX times the page size included), lens and hca_seq_lens beyond
// the table, uniform or varlen requests.
#include <algorithm>
#include <cmath>
#include <limits>

#include "fuzz/case.h"
#include "fuzz/data.h"
#include "fuzz/metadata.h"
#include "reference/dsv4_hca_reference.h"
#include "sparse_decode/dsv4_decode_hca.h"

namespace sparse_decode::fuzz {
namespace {

constexpr int32_t kMin = std::numeric_limits<int32_t>::min();
constexpr int32_t kMax = std::numeric_limits<int32_t>::max();

struct Layout {
  int64_t tokens = 0;
  int heads = 16;
  QueryRows q;
  PlainPool swa, compressed;
  size_t swa_rows = kAbsent, swa_lens = kAbsent, block_table = kAbsent, lens = kAbsent;
  size_t hca_seq_lens = kAbsent, cum = kAbsent, sinks = kAbsent, workspace = kAbsent;
  int64_t swa_rows_stride = 128, block_table_stride = 1;
  int32_t max_pages = 1;
  Requests requests;
  float bmm1 = 1.0f, bmm2 = 1.0f;
  Dsv4Outputs outputs;
  bool pdl = false;
};

Dsv4HcaDecodeArgs make_args(const Arena& arena, const Layout& l, uint8_t* base, MemorySpace memory) {
  Dsv4HcaDecodeArgs a;
  a.memory = memory;
  a.num_tokens = l.tokens;
  a.num_heads = l.heads;
  a.q = at<uint8_t>(arena, base, l.q.region);
  a.q_token_stride = l.q.token_stride;
  a.q_head_stride = l.q.head_stride;
  a.swa_kv = l.swa.at(arena, base);
  a.compressed_kv = l.compressed.at(arena, base);
  a.swa_rows = at<int32_t>(arena, base, l.swa_rows);
  a.swa_rows_stride = l.swa_rows_stride;
  a.swa_lens = at<int32_t>(arena, base, l.swa_lens);
  a.block_table = at<int32_t>(arena, base, l.block_table);
  a.max_pages = l.max_pages;
  a.block_table_stride = l.block_table_stride;
  a.lens = at<int32_t>(arena, base, l.lens);
  a.hca_seq_lens = at<int32_t>(arena, base, l.hca_seq_lens);
  a.num_requests = l.requests.num_requests;
  a.cum_seq_lens_q = at<int32_t>(arena, base, l.cum);
  a.q_len = l.requests.q_len;
  a.max_q_len = l.requests.max_q_len;
  a.bmm1_scale = l.bmm1;
  a.bmm2_scale = l.bmm2;
  a.sinks = at<float>(arena, base, l.sinks);
  a.out = at<uint16_t>(arena, base, l.outputs.out);
  a.out_token_stride = l.outputs.out_token_stride;
  a.out_head_stride = l.outputs.out_head_stride;
  a.lse = at<float>(arena, base, l.outputs.lse);
  a.lse_token_stride = l.outputs.lse_token_stride;
  a.out_of_range_count = at<int32_t>(arena, base, l.outputs.count);
  a.enable_pdl = memory == MemorySpace::kDevice && l.pdl;
  return a;
}

int64_t expected_count(const Dsv4HcaDecodeArgs& a) {
  int64_t count = 0;
  for (int64_t t = 0; t < a.num_tokens; ++t) {
    const int32_t window = std::clamp(a.swa_lens[t], 0, 128);
    for (int32_t c = 0; c < window; ++c) {
      const int32_t row = a.swa_rows[t * a.swa_rows_stride + c];
      count += row >= 0 && row >= a.swa_kv.rows();
    }
    int32_t request = -1;
    if (a.cum_seq_lens_q) {
      for (int32_t b = 0; b < a.num_requests && request < 0; ++b) {
        if (a.cum_seq_lens_q[b] <= t && t < a.cum_seq_lens_q[b + 1]) request = b;
      }
    } else if (t / a.q_len < a.num_requests) {
      request = static_cast<int32_t>(t / a.q_len);
    }
    if (request < 0) continue;
    const int64_t ps = a.compressed_kv.page_size;
    const int64_t slots = std::max<int64_t>(
        0, std::min({int64_t{a.lens[t]} - 128, int64_t{a.hca_seq_lens[request]} - 128, a.max_pages * ps}));
    for (int64_t j = 0; j < slots; ++j) {
      const int32_t page = a.block_table[t * a.block_table_stride + j / ps];
      count += page >= 0 && page >= a.compressed_kv.pages;
    }
  }
  return count;
}

}  // namespace

Outcome run_hca_case(uint64_t seed, Device& device, std::string* description) {
  Rng rng(seed);
  Outcome outcome;
  Expectation expect;
  Arena arena;
  Layout l;

  l.heads = rng.chance(0.06) ? rng.pick(std::vector<int>{64, 128}) : rng.pick(std::vector<int>{8, 16, 16, 16, 32});
  l.tokens = rng.chance(0.05) ? 0 : rng.uniform(1, 8);
  l.pdl = rng.chance(0.3);
  const bool huge = rng.chance(0.05);
  l.q = add_query(arena, rng, DType::kFloat8E4M3, l.tokens, l.heads, 512, 16);
  l.swa = add_plain_pool(arena, rng, "swa_kv", DType::kFloat8E4M3, 256);
  l.compressed = add_plain_pool(arena, rng, "compressed_kv", DType::kFloat8E4M3, 320);
  const int64_t ps = l.compressed.page_size;
  l.max_pages = static_cast<int32_t>(rng.uniform(1, std::max<int64_t>(1, 384 / ps)));
  const int64_t slots = l.max_pages * ps;

  l.swa_rows_stride = 128 + (rng.chance(0.3) ? 4 * rng.uniform(1, 2) : 0);
  const int64_t swa_pool_rows = l.swa.rows(), pages = l.compressed.pages;
  l.swa_rows = add_ints(arena, "swa_rows", draw_index_table(rng, l.tokens, 128, l.swa_rows_stride,
                                                            [&](int32_t) { return swa_pool_rows; }));
  std::vector<int32_t> swa_lens, lens;
  for (int64_t t = 0; t < l.tokens; ++t) {
    swa_lens.push_back(rng.chance(0.8) ? static_cast<int32_t>(rng.uniform(0, 128))
                                       : rng.pick(std::vector<int32_t>{-5, 0, 128, 129, 200, kMin, kMax}));
    lens.push_back(rng.chance(0.75) ? static_cast<int32_t>(128 + rng.uniform(0, slots)) : draw_len(rng, 128 + static_cast<int32_t>(slots)));
  }
  l.swa_lens = add_ints(arena, "swa_lens", swa_lens);
  l.block_table_stride = l.max_pages + (rng.chance(0.3) ? rng.uniform(1, 3) : 0);
  l.block_table = add_ints(arena, "block_table", draw_index_table(rng, l.tokens, l.max_pages, l.block_table_stride,
                                                                  [&](int32_t) { return pages; }));
  l.lens = add_ints(arena, "lens", lens);
  l.requests = draw_requests(rng, l.tokens, false, true);
  std::vector<int32_t> hca_seq_lens;
  for (int32_t b = 0; b < l.requests.num_requests; ++b) {
    hca_seq_lens.push_back(rng.chance(0.8) ? static_cast<int32_t>(128 + rng.uniform(0, slots + 8))
                                           : rng.pick(std::vector<int32_t>{kMin, 0, 127, 128, 129, kMax}));
  }
  l.hca_seq_lens = add_ints(arena, "hca_seq_lens", hca_seq_lens);
  if (l.requests.mode == Requests::Mode::kVarlen) l.cum = add_ints(arena, "cum_seq_lens_q", l.requests.cum_seq_lens_q);
  expect.garbage = !l.requests.monotone;
  expect.host_invalid = host_refusal(l.requests, l.tokens);
  std::vector<float> sinks;
  if (rng.chance(0.6)) {
    sinks = draw_sinks(rng, l.heads, rng.chance(0.2));
    l.sinks = add_floats(arena, "sinks", sinks);
  }
  l.bmm1 = draw_scale(rng, huge ? rng.real(1.0, 50.0) : 1.0 / std::sqrt(512.0), rng.chance(0.06));
  l.bmm2 = rng.chance(0.7) ? 1.0f : draw_scale(rng, 1.0, rng.chance(0.15));
  if (l.tokens > 0 && std::isnan(l.bmm1)) expect.invalid = "bmm1_scale";
  if (l.tokens > 0 && std::isnan(l.bmm2) && expect.invalid.empty()) expect.invalid = "bmm2_scale";
  l.outputs = add_dsv4_outputs(arena, rng, l.tokens, l.heads, rng.chance(0.7), rng.chance(0.8));

  const size_t workspace_bytes = workspace_size(make_args(arena, l, layout_base(), MemorySpace::kDevice));
  if (workspace_bytes > 0) l.workspace = arena.add("workspace", workspace_bytes, RegionKind::kWorkspace);

  uint8_t* image = const_cast<uint8_t*>(arena.image().data());
  const Dsv4HcaDecodeArgs host = make_args(arena, l, image, MemorySpace::kHost);
  std::vector<bool> swa_live(static_cast<size_t>(l.swa.rows())), compressed_live(static_cast<size_t>(l.compressed.rows()));
  if (expect.invalid.empty()) {
    for (int64_t t = 0; t < l.tokens; ++t) {
      for (int32_t c = 0; c < 128; ++c) {
        const reference::HcaRowState s = reference::hca_swa_column(host, t, c);
        if (s.active) swa_live[static_cast<size_t>(s.row)] = true;
      }
      const int64_t n = reference::hca_compressed_slots(host, t);
      for (int64_t j = 0; j < n; ++j) {
        const reference::HcaRowState s = reference::hca_compressed_slot(host, t, j);
        if (s.active) compressed_live[static_cast<size_t>(s.row)] = true;
      }
    }
  }
  fill_query(arena, l.q, DType::kFloat8E4M3, rng, l.tokens, l.heads, 512, huge, 448.0);
  fill_plain_pool(arena, l.swa, DType::kFloat8E4M3, rng, swa_live);
  fill_plain_pool(arena, l.compressed, DType::kFloat8E4M3, rng, compressed_live);
  if (description) {
    *description = "T=" + std::to_string(l.tokens) + " H=" + std::to_string(l.heads) + (l.pdl ? " pdl" : "") +
                   "; swa " + std::to_string(l.swa.pages) + "x" + std::to_string(l.swa.page_size) +
                   " rows; compressed " + std::to_string(pages) + " pages of " + std::to_string(ps) +
                   "; max_pages=" + std::to_string(l.max_pages) + " stride " + std::to_string(l.block_table_stride) +
                   "; swa_lens=" + ints(swa_lens) + "; lens=" + ints(lens) + "; " + l.requests.describe() +
                   " hca_seq_lens=" + ints(hca_seq_lens) + "; sinks=" + (sinks.empty() ? "none" : "given") +
                   "; bmm1=" + std::to_string(l.bmm1) + " bmm2=" + std::to_string(l.bmm2);
  }

  // The device call, and on every 8th seed the CPU backend.
  std::vector<uint8_t> after;
  const bool ran = run_case_call(
      arena, device, expect, seed, l.workspace, workspace_bytes,
      [&](uint8_t* base, MemorySpace memory) { return make_args(arena, l, base, memory); },
      [](const Dsv4HcaDecodeArgs& a, void* w, size_t bytes, CUstream_st* stream) { return dsv4_decode_hca(a, w, bytes, stream); }, after,
      outcome);
  outcome.garbage = expect.garbage;
  if (!ran || expect.garbage) return outcome;
  auto sharpened_lse = [&] {  // FP8 only: every HCA call's scores are FP8
    std::vector<uint8_t> abs_image = e4m3_magnitudes(arena, {l.q.region, l.swa.region, l.compressed.region});
    Dsv4HcaDecodeArgs a = make_args(arena, l, abs_image.data(), MemorySpace::kHost);
    a.bmm1_scale = std::fabs(l.bmm1) * kMagnitudeSharpness;
    a.sinks = nullptr;
    return reference::dsv4_decode_hca(a).lse;
  };
  check_dsv4_outputs(arena, after, l.outputs, reference::dsv4_decode_hca(host), l.tokens, l.heads,
                     expected_count(host), outcome, sharpened_lse);
  return outcome;
}

}  // namespace sparse_decode::fuzz
