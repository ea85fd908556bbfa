// dsv4_decode_packed (docs/spec.md section 2) under random and adversarial
// metadata: both segments' indices and lens, widths that are not multiples
// of 4, any page size, sinks and the softmax scale, every kernel.
#include <cmath>
#include <cstring>

#include "fuzz/case.h"
#include "fuzz/data.h"
#include "fuzz/metadata.h"
#include "reference/dsv4_packed_reference.h"
#include "reference/formats.h"
#include "sparse_decode/dsv4_decode_packed.h"

namespace sparse_decode::fuzz {
namespace {

struct PackedPoolLayout {
  size_t region = kAbsent;
  int64_t pages = 0, page_size = 1, page_stride = 0;  // bytes
  int64_t rows() const { return pages * page_size; }
};

struct SegmentLayout {
  PackedPoolLayout pool;
  size_t indices = kAbsent, lens = kAbsent;
  int32_t width = 0;
  int64_t stride = 0;
  std::vector<int32_t> lens_values;
};

struct Layout {
  int64_t tokens = 0;
  int heads = 16;
  QueryRows q;
  SegmentLayout swa, extra;
  bool has_extra = false;
  size_t sinks = kAbsent, workspace = kAbsent;
  float scale = 1.0f;
  Dsv4Outputs outputs;
  Dsv4PackedKernel kernel = Dsv4PackedKernel::kAuto;
  bool batch_invariant = false;
  bool pdl = false;
};

PackedPoolLayout add_packed_pool(Arena& arena, Rng& rng, const std::string& name, int64_t max_rows) {
  PackedPoolLayout p;
  p.page_size = rng.pick(std::vector<int64_t>{1, 2, 3, 7, 16, 64});
  p.pages = std::max<int64_t>(1, rng.uniform(1, max_rows) / p.page_size);
  p.page_stride = (p.page_size * kPackedRowBytes + 15) / 16 * 16 + (rng.chance(0.25) ? 16 * rng.uniform(1, 4) : 0);
  p.region = arena.add(name, static_cast<size_t>(p.pages * p.page_stride), RegionKind::kInput);
  return p;
}

// A live row: per 64-dim tile E4M3 bytes of N(0, 1) * 110 (up to the
// format's 448) and a UE8M0 scale of 2^(level - 7), the level per tile in
// -4..4 (tiles 2^8 apart in one row); the BF16 tail N(0, 1).
void write_packed_row(Rng& rng, uint8_t* data, uint8_t* scales) {
  for (int tile = 0; tile < kPackedTiles; ++tile) {
    scales[tile] = static_cast<uint8_t>(127 - 7 + rng.uniform(-4, 4));
    copy_from_table(rng, Table::kWideFp8, data + tile * 64, 64);
  }
  scales[kPackedTiles] = 0xFF;  // padding: NaN if read
  copy_from_table(rng, Table::kNormalBf16, data + kPackedFp8Dims, 64);
}

void fill_packed_pool(Arena& arena, const PackedPoolLayout& p, Rng& rng, const std::vector<bool>& live) {
  uint8_t* bytes = arena.host(p.region);
  std::memset(bytes, 0xFF, static_cast<size_t>(p.pages * p.page_stride));  // gaps, scales: NaN
  for (int64_t row = 0; row < p.rows(); ++row) {
    uint8_t* page = bytes + (row / p.page_size) * p.page_stride;
    const int64_t slot = row % p.page_size;
    uint8_t* data = page + slot * kPackedDataBytes;
    uint8_t* scales = page + p.page_size * kPackedDataBytes + slot * kPackedScaleBytes;
    if (live[static_cast<size_t>(row)]) {
      write_packed_row(rng, data, scales);
    } else {
      std::memset(data, 0x7F, kPackedFp8Dims);  // E4M3 NaN
      put_nan(DType::kBFloat16, data + kPackedFp8Dims, 64);
    }
  }
}

SegmentLayout add_segment(Arena& arena, Rng& rng, const std::string& name, int64_t tokens, int32_t max_width,
                          int64_t max_rows, bool lens_required) {
  SegmentLayout s;
  s.width = rng.chance(0.2) ? rng.pick(std::vector<int32_t>{1, 2, 63, 64, 65, 128, max_width})
                            : static_cast<int32_t>(rng.uniform(1, max_width));
  s.stride = (s.width + 3) / 4 * 4 + (rng.chance(0.25) ? 4 * rng.uniform(1, 2) : 0);
  s.pool = add_packed_pool(arena, rng, name + ".pool", max_rows);
  const int64_t rows = s.pool.rows();
  s.indices = add_ints(arena, name + ".indices",
                       draw_index_table(rng, tokens, s.width, s.stride, [&](int32_t) { return rows; }));
  if (lens_required || rng.chance(0.6)) {
    for (int64_t t = 0; t < tokens; ++t) s.lens_values.push_back(draw_len(rng, s.width));
    s.lens = add_ints(arena, name + ".lens", s.lens_values);
  }
  return s;
}

PackedSegment segment_at(const Arena& arena, const SegmentLayout& s, uint8_t* base) {
  PackedSegment seg;
  seg.pool.data = at<uint8_t>(arena, base, s.pool.region);
  seg.pool.pages = s.pool.pages;
  seg.pool.page_size = s.pool.page_size;
  seg.pool.page_stride = s.pool.page_stride;
  seg.indices = at<int32_t>(arena, base, s.indices);
  seg.width = s.width;
  seg.indices_stride = s.stride;
  seg.lens = at<int32_t>(arena, base, s.lens);
  return seg;
}

Dsv4PackedDecodeArgs make_args(const Arena& arena, const Layout& l, uint8_t* base, MemorySpace memory) {
  Dsv4PackedDecodeArgs a;
  a.memory = memory;
  a.num_tokens = l.tokens;
  a.num_heads = l.heads;
  a.q = at<uint16_t>(arena, base, l.q.region);
  a.q_token_stride = l.q.token_stride;
  a.q_head_stride = l.q.head_stride;
  a.swa = segment_at(arena, l.swa, base);
  if (l.has_extra) a.extra = segment_at(arena, l.extra, base);
  a.softmax_scale = l.scale;
  a.sinks = at<float>(arena, base, l.sinks);
  a.out = at<uint16_t>(arena, base, l.outputs.out);
  a.out_token_stride = l.outputs.out_token_stride;
  a.out_head_stride = l.outputs.out_head_stride;
  a.lse = at<float>(arena, base, l.outputs.lse);
  a.lse_token_stride = l.outputs.lse_token_stride;
  a.out_of_range_count = at<int32_t>(arena, base, l.outputs.count);
  a.enable_pdl = memory == MemorySpace::kDevice && l.pdl;
  a.kernel = l.kernel;
  a.batch_invariant = l.batch_invariant;
  return a;
}

int64_t expected_count(const Dsv4PackedDecodeArgs& a) {
  int64_t count = 0;
  for (const PackedSegment* seg : {&a.swa, &a.extra}) {
    if (!seg->given()) continue;
    for (int64_t t = 0; t < a.num_tokens; ++t) {
      for (int32_t c = 0; c < seg->width; ++c) {
        const int32_t index = seg->indices[t * seg->indices_stride + c];
        count += (!seg->lens || c < seg->lens[t]) && index >= 0 && index >= seg->pool.rows();
      }
    }
  }
  return count;
}

}  // namespace

Outcome run_packed_case(uint64_t seed, Device& device, std::string* description) {
  Rng rng(seed);
  Outcome outcome;
  Expectation expect;
  Arena arena;
  Layout l;

  l.heads = rng.chance(0.06) ? rng.pick(std::vector<int>{64, 128}) : rng.pick(std::vector<int>{8, 16, 16, 16, 32});
  l.tokens = rng.chance(0.05) ? 0 : rng.uniform(1, 8);
  std::vector<Dsv4PackedKernel> kernels = {Dsv4PackedKernel::kAuto, Dsv4PackedKernel::kAuto,
                                           Dsv4PackedKernel::kCluster, Dsv4PackedKernel::kStream,
                                           Dsv4PackedKernel::kSplit};
  if (l.heads % 64 == 0) {
    kernels.push_back(Dsv4PackedKernel::kStreamH64);
    kernels.push_back(Dsv4PackedKernel::kSplitH64);
  }
  l.kernel = rng.pick(kernels);
  // One kernel at every batch; a forced kernel whose bits depend on the plan is refused with it.
  l.batch_invariant = rng.chance(0.15);
  if (l.batch_invariant && (l.kernel == Dsv4PackedKernel::kCluster || l.kernel == Dsv4PackedKernel::kSplit ||
                             l.kernel == Dsv4PackedKernel::kSplitH64)) {
    expect.invalid = "batch_invariant";
  }
  l.pdl = rng.chance(0.3);
  const bool huge = rng.chance(0.05);
  l.q = add_query(arena, rng, DType::kBFloat16, l.tokens, l.heads, 512, 8);
  l.swa = add_segment(arena, rng, "swa", l.tokens, 256, 200, false);
  l.has_extra = rng.chance(0.6);
  if (l.has_extra) l.extra = add_segment(arena, rng, "extra", l.tokens, 384, 320, true);
  std::vector<float> sinks;
  if (rng.chance(0.6)) {
    sinks = draw_sinks(rng, l.heads, rng.chance(0.2));
    l.sinks = add_floats(arena, "sinks", sinks);
  }
  // Rows have norms of ~sqrt(512) * 2^±4 per tile: a typical scale gives scores of order 1.
  l.scale = draw_scale(rng, huge ? rng.real(0.05, 1.0) : 1.0 / 256.0, rng.chance(0.06));
  if (l.tokens > 0 && std::isnan(l.scale) && expect.invalid.empty()) expect.invalid = "softmax_scale";
  l.outputs = add_dsv4_outputs(arena, rng, l.tokens, l.heads, rng.chance(0.7), rng.chance(0.8));

  const size_t workspace_bytes = workspace_size(make_args(arena, l, layout_base(), MemorySpace::kDevice));
  if (workspace_bytes > 0) l.workspace = arena.add("workspace", workspace_bytes, RegionKind::kWorkspace);

  uint8_t* image = const_cast<uint8_t*>(arena.image().data());
  const Dsv4PackedDecodeArgs host = make_args(arena, l, image, MemorySpace::kHost);
  std::vector<bool> swa_live(static_cast<size_t>(l.swa.pool.rows()));
  std::vector<bool> extra_live(static_cast<size_t>(l.has_extra ? l.extra.pool.rows() : 0));
  if (expect.invalid.empty()) {
    for (int64_t t = 0; t < l.tokens; ++t) {
      for (int32_t c = 0; c < l.swa.width; ++c) {
        const auto s = reference::dsv4_packed_column(host, reference::PackedSegmentId::kSwa, t, c);
        if (s.active) swa_live[static_cast<size_t>(s.row)] = true;
      }
      for (int32_t c = 0; l.has_extra && c < l.extra.width; ++c) {
        const auto s = reference::dsv4_packed_column(host, reference::PackedSegmentId::kExtra, t, c);
        if (s.active) extra_live[static_cast<size_t>(s.row)] = true;
      }
    }
  }
  fill_query(arena, l.q, DType::kBFloat16, rng, l.tokens, l.heads, 512, huge, 64.0);
  fill_packed_pool(arena, l.swa.pool, rng, swa_live);
  if (l.has_extra) fill_packed_pool(arena, l.extra.pool, rng, extra_live);
  if (description) {
    const char* kernel_names[] = {"auto", "cluster", "stream", "split", "stream_h64", "split_h64"};
    static_assert(static_cast<int>(Dsv4PackedKernel::kSplitH64) == 5, "a name for every kernel");
    auto seg = [](const SegmentLayout& s) {
      return "W=" + std::to_string(s.width) + " stride=" + std::to_string(s.stride) + " pool " +
             std::to_string(s.pool.pages) + "x" + std::to_string(s.pool.page_size) + " page_stride " +
             std::to_string(s.pool.page_stride) + " lens=" + (s.lens == kAbsent ? std::string("none") : ints(s.lens_values));
    };
    *description = "T=" + std::to_string(l.tokens) + " H=" + std::to_string(l.heads) + " kernel=" +
                   kernel_names[static_cast<int>(l.kernel)] + (l.batch_invariant ? " batch_invariant" : "") +
                   (l.pdl ? " pdl" : "") + "; swa " + seg(l.swa) + "; extra " +
                   (l.has_extra ? seg(l.extra) : std::string("absent")) + "; sinks=" +
                   (sinks.empty() ? std::string("none") : "given") + "; softmax_scale=" + std::to_string(l.scale);
  }

  // The device call, and on every 8th seed the CPU backend.
  std::vector<uint8_t> after;
  const bool ran = run_case_call(
      arena, device, expect, seed, l.workspace, workspace_bytes,
      [&](uint8_t* base, MemorySpace memory) { return make_args(arena, l, base, memory); },
      [](const Dsv4PackedDecodeArgs& a, void* w, size_t bytes, CUstream_st* stream) { return dsv4_decode_packed(a, w, bytes, stream); }, after,
      outcome);
  if (!ran) return outcome;
  check_dsv4_outputs(arena, after, l.outputs, reference::dsv4_decode_packed(host), l.tokens, l.heads,
                     expected_count(host), outcome);
  return outcome;
}

}  // namespace sparse_decode::fuzz
