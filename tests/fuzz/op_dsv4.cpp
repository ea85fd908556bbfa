// dsv4_decode (docs/spec.md section 1) under random and adversarial
// metadata: indices, lens, seq_lens with uniform or varlen query lengths,
// sinks and scales (by value or on the device), every kernel.
#include <cmath>
#include <cstring>
#include <limits>

#include "fuzz/case.h"
#include "fuzz/data.h"
#include "fuzz/metadata.h"
#include "reference/dsv4_reference.h"
#include "sparse_decode/dsv4_decode.h"

namespace sparse_decode::fuzz {
namespace {

struct Layout {
  DType dtype = DType::kFloat8E4M3;
  int64_t tokens = 0;
  int heads = 16;
  int32_t width = 128;
  int64_t indices_stride = 128;
  QueryRows q;
  PlainPool swa, compressed;
  size_t indices = 0, lens = kAbsent, seq_lens = kAbsent, cum = kAbsent, sinks = kAbsent;
  size_t bmm1 = kAbsent, bmm2 = kAbsent, workspace = kAbsent;
  float bmm1_value = 1.0f, bmm2_value = 1.0f;
  Requests requests;
  Dsv4Outputs outputs;
  Dsv4Kernel kernel = Dsv4Kernel::kAuto;
  bool pdl = false;
  int32_t width_override = 0, heads_override = 0;  // host-visible invalid arguments
  int64_t indices_stride_override = 0;
};

Dsv4DecodeArgs make_args(const Arena& arena, const Layout& l, uint8_t* base, MemorySpace memory) {
  Dsv4DecodeArgs a;
  a.memory = memory;
  a.dtype = l.dtype;
  a.num_tokens = l.tokens;
  a.num_heads = l.heads_override ? l.heads_override : l.heads;
  a.q = at<uint8_t>(arena, base, l.q.region);
  a.q_token_stride = l.q.token_stride;
  a.q_head_stride = l.q.head_stride;
  a.swa_kv = l.swa.at(arena, base);
  a.compressed_kv = l.compressed.at(arena, base);
  a.indices = at<int32_t>(arena, base, l.indices);
  a.width = l.width_override ? l.width_override : l.width;
  a.indices_stride = l.indices_stride_override ? l.indices_stride_override : l.indices_stride;
  a.lens = at<int32_t>(arena, base, l.lens);
  if (l.requests.mode != Requests::Mode::kNone) {
    a.seq_lens = at<int32_t>(arena, base, l.seq_lens);
    a.num_requests = l.requests.num_requests;
    a.cum_seq_lens_q = at<int32_t>(arena, base, l.cum);
    a.q_len = l.requests.q_len;
    a.max_q_len = l.requests.max_q_len;
  }
  a.sinks = at<float>(arena, base, l.sinks);
  a.bmm1_scale.value = l.bmm1_value;
  a.bmm1_scale.device = at<float>(arena, base, l.bmm1);
  a.bmm2_scale.value = l.bmm2_value;
  a.bmm2_scale.device = at<float>(arena, base, l.bmm2);
  a.out = at<uint16_t>(arena, base, l.outputs.out);
  a.out_token_stride = l.outputs.out_token_stride;
  a.out_head_stride = l.outputs.out_head_stride;
  a.lse = at<float>(arena, base, l.outputs.lse);
  a.lse_token_stride = l.outputs.lse_token_stride;
  a.out_of_range_count = at<int32_t>(arena, base, l.outputs.count);
  a.enable_pdl = memory == MemorySpace::kDevice && l.pdl;
  a.kernel = l.kernel;
  return a;
}

std::string describe(const Layout& l, const std::vector<int32_t>& lens, const std::vector<float>& sinks) {
  auto pool = [](const PlainPool& p) {
    if (p.region == PlainPool::kNoRegion) return std::string("absent");
    return std::to_string(p.pages) + "x" + std::to_string(p.page_size) + " rows, row_stride " +
           std::to_string(p.row_stride) + ", page_stride " + std::to_string(p.page_stride);
  };
  const char* kernels[] = {"auto", "cluster", "stream", "split"};
  std::string sink_text = "none";
  if (l.sinks != kAbsent) {
    sink_text = "[";
    for (size_t i = 0; i < sinks.size() && i < 8; ++i) {
      if (i) sink_text += ',';
      sink_text += std::to_string(sinks[i]);
    }
    sink_text += sinks.size() > 8 ? ",...]" : "]";
  }
  return std::string(l.dtype == DType::kFloat8E4M3 ? "FP8" : "BF16") + " T=" + std::to_string(l.tokens) +
         " H=" + std::to_string(l.heads) + " W=" + std::to_string(l.width) + " stride=" +
         std::to_string(l.indices_stride) + " kernel=" + kernels[static_cast<int>(l.kernel)] +
         (l.pdl ? " pdl" : "") + "; swa " + pool(l.swa) + "; compressed " + pool(l.compressed) +
         "; lens=" + (l.lens == kAbsent ? std::string("none") : ints(lens)) + "; " + l.requests.describe() +
         "; sinks=" + sink_text + "; bmm1=" + std::to_string(l.bmm1_value) + (l.bmm1 != kAbsent ? " (device)" : "") +
         " bmm2=" + std::to_string(l.bmm2_value) + (l.bmm2 != kAbsent ? " (device)" : "");
}

}  // namespace

Outcome run_dsv4_case(uint64_t seed, Device& device, std::string* description) {
  Rng rng(seed);
  Outcome outcome;
  Expectation expect;
  Arena arena;
  Layout l;

  // Shape.
  l.dtype = rng.chance(0.7) ? DType::kFloat8E4M3 : DType::kBFloat16;
  l.heads = rng.chance(0.06) ? rng.pick(std::vector<int>{64, 128}) : rng.pick(std::vector<int>{8, 16, 16, 16, 32});
  l.tokens = rng.chance(0.05) ? 0 : rng.uniform(1, 8);
  l.width = rng.chance(0.3) ? rng.pick(std::vector<int32_t>{128, 132, 192, 256, 508, 512})
                            : static_cast<int32_t>(128 + 4 * rng.uniform(0, 96));
  l.indices_stride = l.width + (rng.chance(0.3) ? 4 * rng.uniform(1, 3) : 0);
  l.kernel = rng.pick(std::vector<Dsv4Kernel>{Dsv4Kernel::kAuto, Dsv4Kernel::kAuto, Dsv4Kernel::kCluster,
                                              Dsv4Kernel::kStream, Dsv4Kernel::kSplit});
  l.pdl = rng.chance(0.3);
  const bool huge = rng.chance(0.05);  // one-hot q, large scale: logits of 1e2..1e5

  // Layout: q, pools, metadata, scalars, outputs.
  const int unit = 16 / element_bytes(l.dtype);
  l.q = add_query(arena, rng, l.dtype, l.tokens, l.heads, 512, unit);
  l.swa = add_plain_pool(arena, rng, "swa_kv", l.dtype, 256);
  if (l.width > 128 || rng.chance(0.5)) l.compressed = add_plain_pool(arena, rng, "compressed_kv", l.dtype, 320);
  const int64_t swa_rows = l.swa.rows(), compressed_rows = l.compressed.rows();
  const std::vector<int32_t> indices = draw_index_table(rng, l.tokens, l.width, l.indices_stride, [&](int32_t c) {
    return c < 128 ? swa_rows : compressed_rows;
  });
  l.indices = add_ints(arena, "indices", indices);
  std::vector<int32_t> lens;
  if (rng.chance(0.6)) {
    for (int64_t t = 0; t < l.tokens; ++t) lens.push_back(draw_len(rng, l.width));
    l.lens = add_ints(arena, "lens", lens);
  }
  l.requests = draw_requests(rng, l.tokens, true, true);
  if (l.requests.mode != Requests::Mode::kNone) {
    l.seq_lens = add_ints(arena, "seq_lens", l.requests.seq_lens);
    if (l.requests.mode == Requests::Mode::kVarlen) l.cum = add_ints(arena, "cum_seq_lens_q", l.requests.cum_seq_lens_q);
    expect.garbage = !l.requests.monotone;  // the kernels assume non-decreasing offsets
    expect.host_invalid = host_refusal(l.requests, l.tokens);
  }
  std::vector<float> sinks;
  if (rng.chance(0.6)) {
    sinks = draw_sinks(rng, l.heads, rng.chance(0.2));
    l.sinks = add_floats(arena, "sinks", sinks);
  }
  const double peak = l.dtype == DType::kFloat8E4M3 ? 448.0 : 64.0;
  const double typical_bmm1 = huge ? rng.real(1.0, 50.0) : 1.0 / std::sqrt(512.0);
  l.bmm1_value = draw_scale(rng, typical_bmm1, rng.chance(0.06));
  l.bmm2_value = rng.chance(0.7) ? 1.0f : draw_scale(rng, 1.0, rng.chance(0.15));
  if (rng.chance(0.25)) l.bmm1 = add_floats(arena, "bmm1_scale", {l.bmm1_value});
  if (rng.chance(0.25)) l.bmm2 = add_floats(arena, "bmm2_scale", {l.bmm2_value});
  l.outputs = add_dsv4_outputs(arena, rng, l.tokens, l.heads, rng.chance(0.7), rng.chance(0.8));

  // Host-visible mistakes: refused before launch, naming the argument.
  if (l.tokens > 0) {
    if (l.bmm1 == kAbsent && std::isnan(l.bmm1_value)) expect.invalid = "bmm1_scale";
    if (l.bmm2 == kAbsent && std::isnan(l.bmm2_value) && expect.invalid.empty()) expect.invalid = "bmm2_scale";
  }
  if (rng.chance(0.03)) {
    const int which = static_cast<int>(rng.uniform(0, l.tokens > 0 ? 2 : 1));
    if (which == 0) l.heads_override = 24, expect.invalid = "num_heads";
    if (which == 1) l.width_override = l.width + 2, expect.invalid = "width";
    if (which == 2) l.indices_stride_override = l.width - 4, expect.invalid = "indices_stride";
  }

  // The workspace, sized for these arguments.
  const size_t workspace_bytes = workspace_size(make_args(arena, l, layout_base(), MemorySpace::kDevice));
  if (workspace_bytes > 0) l.workspace = arena.add("workspace", workspace_bytes, RegionKind::kWorkspace);

  // Data: rows that an active column names are random, every other byte NaN.
  uint8_t* image = const_cast<uint8_t*>(arena.image().data());
  const Dsv4DecodeArgs host = make_args(arena, l, image, MemorySpace::kHost);
  std::vector<bool> swa_live(static_cast<size_t>(swa_rows)), compressed_live(static_cast<size_t>(compressed_rows));
  if (expect.invalid.empty()) {
    for (int64_t t = 0; t < l.tokens; ++t) {
      for (int32_t c = 0; c < l.width; ++c) {
        const reference::ColumnState s = reference::dsv4_column(host, t, c);
        if (s.active) (c < 128 ? swa_live : compressed_live)[static_cast<size_t>(s.row)] = true;
      }
    }
  }
  fill_query(arena, l.q, l.dtype, rng, l.tokens, l.heads, 512, huge, peak);
  fill_plain_pool(arena, l.swa, l.dtype, rng, swa_live);
  if (l.compressed.region != PlainPool::kNoRegion) fill_plain_pool(arena, l.compressed, l.dtype, rng, compressed_live);
  if (description) *description = describe(l, lens, sinks);

  // The device call, and on every 8th seed the CPU backend.
  std::vector<uint8_t> after;
  const bool ran = run_case_call(
      arena, device, expect, seed, l.workspace, workspace_bytes,
      [&](uint8_t* base, MemorySpace memory) { return make_args(arena, l, base, memory); },
      [](const Dsv4DecodeArgs& a, void* w, size_t bytes, CUstream_st* stream) { return dsv4_decode(a, w, bytes, stream); }, after,
      outcome);
  outcome.garbage = expect.garbage;
  if (!ran || expect.garbage) return outcome;

  // Against the fp64 reference; the counter against the host's own count.
  const reference::Dsv4Result ref = reference::dsv4_decode(host);
  Dsv4CountInput count;
  count.tokens = l.tokens;
  count.width = l.width;
  count.indices = host.indices;
  count.indices_stride = l.indices_stride;
  count.lens = host.lens;
  count.swa_rows = swa_rows;
  count.compressed_rows = compressed_rows;
  count.seq_lens = host.seq_lens;
  count.num_requests = host.num_requests;
  count.cum_seq_lens_q = host.cum_seq_lens_q;
  count.q_len = host.q_len;
  auto sharpened_lse = [&] {
    std::vector<uint8_t> abs_image = e4m3_magnitudes(arena, {l.q.region, l.swa.region, l.compressed.region});
    Dsv4DecodeArgs a = make_args(arena, l, abs_image.data(), MemorySpace::kHost);
    a.bmm1_scale.value = std::fabs(l.bmm1_value) * kMagnitudeSharpness;
    a.bmm1_scale.device = nullptr;
    a.sinks = nullptr;
    return reference::dsv4_decode(a).lse;
  };
  check_dsv4_outputs(arena, after, l.outputs, ref, l.tokens, l.heads, expected_dsv4_count(count), outcome,
                     l.dtype == DType::kFloat8E4M3 ? std::function<std::vector<double>()>(sharpened_lse) : nullptr);
  return outcome;
}

}  // namespace sparse_decode::fuzz
