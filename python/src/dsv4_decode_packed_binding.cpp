// _ext.dsv4_decode_packed: DLPack arrays -> Dsv4PackedDecodeArgs ->
// sparse_decode::dsv4_decode_packed (docs/spec.md section 2, packed 584-byte rows).
#include "binding_calls.h"
#include "sparse_decode/dsv4_decode_packed.h"

namespace sparse_decode::binding {
namespace {

// A pool as FlashMLA and FlashInfer hold it: bytes shaped [pages, page_size,
// 584] or [pages, page_size, 1, 584]. The [page_size, 584] shape is only a
// byte view of a page (its data rows, then its scale rows: see
// docs/formats/packed_layout.md), so the slots must be 584 bytes apart; the page
// stride is the array's, and may be larger than page_size * 584.
PackedPool packed_pool_of(const Array& a) {
  const std::string name = a.name;
  expect_kind(a, Kind::kFp8, "uint8 (1-byte elements holding the packed 584-byte rows)");
  const size_t nd = a.ndim();
  if ((nd != 3 && nd != 4) || a.shape[nd - 1] != kPackedRowBytes || (nd == 4 && a.shape[2] != 1)) {
    fail(name + ": expected [pages, page_size, 584] or [pages, page_size, 1, 584] bytes, got " + a.shape_text());
  }
  PackedPool pool;
  pool.data = static_cast<const uint8_t*>(a.data);
  pool.pages = a.shape[0];
  pool.page_size = a.shape[1];
  if (a.strides[nd - 1] != 1 || (pool.page_size > 1 && a.strides[1] != kPackedRowBytes)) {
    fail(name + ": expected each page's page_size * 584 bytes contiguous (strides [page_stride, 584, " +
         (nd == 4 ? "any, " : "") + "1]), got strides " + Array::dims_text(a.strides));
  }
  // One page: its stride is never used to address anything; the smallest
  // value the library accepts (a multiple of 16 bytes) stands in.
  pool.page_stride = pool.pages > 1 ? a.strides[0] : round_up(pool.page_size * kPackedRowBytes, 16);
  return pool;
}

// Runs the decode, or with size_only returns workspace_size() of the call.
size_t decode_packed_arrays(const InArray& q_in, const InArray& swa_cache_in, const InArray& swa_indices_in,
                          const OutArray& out_in, const std::optional<InArray>& swa_lens_in,
                          const std::optional<InArray>& extra_cache_in, const std::optional<InArray>& extra_indices_in,
                          const std::optional<InArray>& extra_lens_in, const std::optional<InArray>& seq_lens_in,
                          const std::optional<InArray>& cum_in, std::optional<int32_t> q_len,
                          std::optional<int32_t> max_q_len, float softmax_scale,
                          const std::optional<InArray>& sinks_in, int32_t sink_term,
                          const std::optional<OutArray>& lse_in,
                          const std::optional<OutArray>& count_in, const std::optional<OutArray>& workspace_in,
                          bool enable_pdl, bool batch_invariant, uintptr_t stream, bool size_only) {
  const Array q = view("q", q_in);
  const std::optional<Array> swa_cache = view("swa_cache", swa_cache_in),
                             swa_indices = view("swa_indices", swa_indices_in), out = view("out", out_in),
                             swa_lens = view("swa_lens", swa_lens_in),
                             extra_cache = view("extra_cache", extra_cache_in),
                             extra_indices = view("extra_indices", extra_indices_in),
                             extra_lens = view("extra_lens", extra_lens_in),
                             seq_lens = view("seq_lens", seq_lens_in), cum = view("cum_seq_lens_q", cum_in),
                             sinks = view("sinks", sinks_in),
                             lse = view("lse", lse_in), count = view("out_of_range_count", count_in),
                             workspace = view("workspace", workspace_in);

  Dsv4PackedDecodeArgs args;
  args.memory = memory_of(q, {&swa_cache, &swa_indices, &out, &swa_lens, &extra_cache, &extra_indices, &extra_lens,
                              &seq_lens, &cum, &sinks, &lse, &count, &workspace});

  expect_kind(q, Kind::kBf16, "bfloat16 (or a 2-byte integer view)");
  expect_kind(*out, Kind::kBf16, "bfloat16 (or a 2-byte integer view)");
  set_query_and_output(args, q, *out);

  // Each segment as given; a partly given extra segment is passed on as it
  // is, so that the library refuses it naming the missing field.
  struct Given {
    const std::optional<Array>&cache, &indices, &lens;
    PackedSegment* segment;
  };
  for (const Given& g : {Given{swa_cache, swa_indices, swa_lens, &args.swa},
                         Given{extra_cache, extra_indices, extra_lens, &args.extra}}) {
    if (g.cache) g.segment->pool = packed_pool_of(*g.cache);
    if (g.indices) {
      const IndexTable table = indices_of(*g.indices, args.num_tokens, true);
      g.segment->indices = table.data;
      g.segment->width = table.width;
      g.segment->indices_stride = table.stride;
      g.segment->indices_request_stride = table.request_stride;
    }
    if (g.lens) {
      const Lens given = lens_of(*g.lens, args.num_tokens);
      g.segment->lens = given.data;
      g.segment->lens_token_stride = given.token_stride;
      g.segment->lens_request_stride = given.request_stride;
    }
  }
  args.seq_lens = set_requests(args, seq_lens, cum, q_len, max_q_len, q_dim_len_of(q, swa_indices));

  args.softmax_scale = softmax_scale;
  if (sinks) args.sinks = vector_of<float>(*sinks, Kind::kFloat32, "float32", args.num_heads);
  args.sink_term = sink_term_of(sink_term);
  set_lse_count_and_pdl(args, lse, count, enable_pdl);
  args.batch_invariant = batch_invariant;

  if (size_only) return workspace_size(args);
  run_decode(args, workspace, stream, [](const auto&... call) { return dsv4_decode_packed(call...); });
  return 0;
}

}  // namespace

void add_dsv4_decode_packed(nb::module_& m) {
  m.attr("PACKED_ROW_BYTES") = kPackedRowBytes;
  m.def("dsv4_decode_packed", &decode_packed_arrays, nb::arg("q"), nb::arg("swa_cache"), nb::arg("swa_indices"),
        nb::arg("out"), nb::kw_only(), nb::arg("swa_lens").none(), nb::arg("extra_cache").none(),
        nb::arg("extra_indices").none(), nb::arg("extra_lens").none(), nb::arg("seq_lens").none(),
        nb::arg("cum_seq_lens_q").none(), nb::arg("q_len").none(), nb::arg("max_q_len").none(),
        nb::arg("softmax_scale"), nb::arg("sinks").none(), nb::arg("sink_term"), nb::arg("lse").none(),
        nb::arg("out_of_range_count").none(),
        nb::arg("workspace").none(), nb::arg("enable_pdl"), nb::arg("batch_invariant"), nb::arg("stream"),
        nb::arg("size_only") = false);
}

}  // namespace sparse_decode::binding
