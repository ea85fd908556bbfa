// _ext.dsv4_decode_hca: DLPack arrays -> Dsv4HcaDecodeArgs -> sparse_decode::dsv4_decode_hca
// (docs/spec.md, section 3), and _ext.convert_page_aligned_indices: a section-1 table
// -> Dsv4HcaConvertArgs -> sparse_decode::convert_page_aligned_indices.
#include "binding_calls.h"
#include "sparse_decode/dsv4_decode_hca.h"

namespace sparse_decode::binding {
namespace {

// swa_rows: [T, 128] (or [B, q_len, 128]: with `views`, a request view is
// read in place); the struct has no width field, so the 128 columns are
// checked here.
IndexTable swa_rows_of(const Array& a, int64_t tokens, bool views = false) {
  const IndexTable table = indices_of(a, tokens, views);
  if (table.width != kSwaColumns) fail("swa_rows: expected [T, 128] int32, got " + a.shape_text());
  return table;
}

// A metadata array read as a [B, q_len, ...] request view (a nonzero
// request stride) must have the call's B and q_len as its leading dims.
void check_view_dims(const Array& a, int64_t request_stride, const Dsv4HcaDecodeArgs& args) {
  if (request_stride == 0 || (a.shape[0] == args.num_requests && a.shape[1] == args.q_len)) return;
  fail(std::string(a.name) + ": expected a [B, q_len, ...] view with B = " + std::to_string(args.num_requests) +
       " requests of q_len = " + std::to_string(args.q_len) + " tokens, got shape " + a.shape_text());
}

// Runs the decode, or with size_only returns workspace_size() of the call
// (0 for arguments it refuses: the call then names them) and runs nothing.
size_t decode_hca_arrays(const InArray& q_in, const InArray& swa_in, const InArray& compressed_in,
                       const InArray& swa_rows_in, const InArray& swa_lens_in, const InArray& block_table_in,
                       const InArray& lens_in, const InArray& hca_seq_lens_in, const OutArray& out_in,
                       const std::optional<InArray>& cum_in, std::optional<int32_t> q_len,
                       std::optional<int32_t> max_q_len, const std::optional<InArray>& sinks_in, int32_t sink_term,
                       float bmm1_scale, float bmm2_scale, const std::optional<OutArray>& lse_in,
                       const std::optional<OutArray>& count_in, const std::optional<OutArray>& workspace_in,
                       bool enable_pdl, bool hnd, uintptr_t stream, bool size_only) {
  const Array q = view("q", q_in);
  const std::optional<Array> swa = view("swa_kv", swa_in), compressed = view("compressed_kv", compressed_in),
                             swa_rows = view("swa_rows", swa_rows_in), swa_lens = view("swa_lens", swa_lens_in),
                             block_table = view("block_table", block_table_in), lens = view("lens", lens_in),
                             hca_seq_lens = view("hca_seq_lens", hca_seq_lens_in), out = view("out", out_in),
                             cum = view("cum_seq_lens_q", cum_in), sinks = view("sinks", sinks_in),
                             lse = view("lse", lse_in), count = view("out_of_range_count", count_in),
                             workspace = view("workspace", workspace_in);

  Dsv4HcaDecodeArgs args;
  args.memory = memory_of(q, {&swa, &compressed, &swa_rows, &swa_lens, &block_table, &lens, &hca_seq_lens, &out,
                              &cum, &sinks, &lse, &count, &workspace});

  const char* fp8 = "FP8 E4M3 (float8_e4m3fn or a 1-byte integer view)";
  expect_kind(q, Kind::kFp8, fp8);
  expect_kind(*swa, Kind::kFp8, fp8);
  expect_kind(*compressed, Kind::kFp8, fp8);
  expect_kind(*out, Kind::kBf16, "bfloat16 (or a 2-byte integer view)");
  set_query_and_output(args, q, *out);
  args.swa_kv = pool_of(*swa, hnd);
  args.compressed_kv = pool_of(*compressed, hnd);

  // The per-token metadata: [T, ...] with any token stride, or [B, q_len, ...] request views, read in place.
  const IndexTable rows = swa_rows_of(*swa_rows, args.num_tokens, true);
  args.swa_rows = rows.data;
  args.swa_rows_stride = rows.stride;
  args.swa_rows_request_stride = rows.request_stride;
  const Lens window = lens_of(*swa_lens, args.num_tokens);
  args.swa_lens = window.data;
  args.swa_lens_token_stride = window.token_stride;
  args.swa_lens_request_stride = window.request_stride;
  const IndexTable pages = indices_of(*block_table, args.num_tokens, true);
  args.block_table = pages.data;
  args.max_pages = pages.width;
  args.block_table_stride = pages.stride;
  args.block_table_request_stride = pages.request_stride;
  const Lens given = lens_of(*lens, args.num_tokens);
  args.lens = given.data;
  args.lens_token_stride = given.token_stride;
  args.lens_request_stride = given.request_stride;
  args.hca_seq_lens = set_requests(args, hca_seq_lens, cum, q_len, max_q_len, q_dim_len_of(q, 3));
  check_view_dims(*swa_rows, args.swa_rows_request_stride, args);
  check_view_dims(*swa_lens, args.swa_lens_request_stride, args);
  check_view_dims(*block_table, args.block_table_request_stride, args);
  check_view_dims(*lens, args.lens_request_stride, args);

  if (sinks) args.sinks = vector_of<float>(*sinks, Kind::kFloat32, "float32", args.num_heads);
  args.sink_term = sink_term_of(sink_term);
  args.bmm1_scale = bmm1_scale;
  args.bmm2_scale = bmm2_scale;
  set_lse_count_and_pdl(args, lse, count, enable_pdl);

  if (size_only) return workspace_size(args);
  run_decode(args, workspace, stream, [](const auto&... call) { return dsv4_decode_hca(call...); });
  return 0;
}

// Converts a section-1 table into the HCA metadata (host: synchronously,
// refusing a bad table value with InvalidArgument; device: queued, the
// table's values reported in `error` only).
void convert_arrays(const InArray& indices_in, const InArray& lens_in, const InArray& seq_lens_in,
                    const OutArray& swa_rows_in, const OutArray& swa_lens_in, const OutArray& block_table_in,
                    const OutArray& hca_seq_lens_in, const std::optional<OutArray>& error_in,
                    const std::optional<InArray>& cum_in, std::optional<int32_t> q_len,
                    std::optional<int32_t> max_q_len, int64_t page_size, int64_t swa_pool_rows,
                    int64_t compressed_pool_pages, uintptr_t stream) {
  const Array indices = view("indices", indices_in);
  const std::optional<Array> lens = view("lens", lens_in), seq_lens = view("seq_lens", seq_lens_in),
                             swa_rows = view("swa_rows", swa_rows_in), swa_lens = view("swa_lens", swa_lens_in),
                             block_table = view("block_table", block_table_in),
                             hca_seq_lens = view("hca_seq_lens", hca_seq_lens_in), error = view("error", error_in),
                             cum = view("cum_seq_lens_q", cum_in);

  Dsv4HcaConvertArgs args;
  args.memory =
      memory_of(indices, {&lens, &seq_lens, &swa_rows, &swa_lens, &block_table, &hca_seq_lens, &error, &cum});
  const IndexTable table = table_of(indices, "[T, W] (or [B, q_len, W])");
  args.num_tokens = table.rows;
  args.indices = table.data;
  args.width = table.width;
  args.indices_stride = table.stride;
  args.page_size = page_size;
  args.swa_pool_rows = swa_pool_rows;
  args.compressed_pool_pages = compressed_pool_pages;
  args.lens = vector_of<int32_t>(*lens, Kind::kInt32, "int32", args.num_tokens);
  args.seq_lens = set_requests(args, seq_lens, cum, q_len, max_q_len, q_dim_len_of(indices, 2));

  const IndexTable rows = swa_rows_of(*swa_rows, args.num_tokens);
  args.swa_rows = rows.writable();
  args.swa_rows_stride = rows.stride;
  args.swa_lens = const_cast<int32_t*>(vector_of<int32_t>(*swa_lens, Kind::kInt32, "int32", args.num_tokens));
  const IndexTable pages = indices_of(*block_table, args.num_tokens);
  args.block_table = pages.writable();
  args.max_pages = pages.width;
  args.block_table_stride = pages.stride;
  args.hca_seq_lens =
      const_cast<int32_t*>(vector_of<int32_t>(*hca_seq_lens, Kind::kInt32, "int32 [B]", args.num_requests));
  if (error) {
    args.error = const_cast<int32_t*>(vector_of<int32_t>(*error, Kind::kInt32, "int32 [3]", kConvertErrorWords));
  }

  Status status;
  {
    nb::gil_scoped_release release;
    status = convert_page_aligned_indices(args, reinterpret_cast<CUstream_st*>(stream));
  }
  check(status);
}

}  // namespace

void add_dsv4_decode_hca(nb::module_& m) {
  m.def("dsv4_decode_hca", &decode_hca_arrays, nb::arg("q"), nb::arg("swa_kv"), nb::arg("compressed_kv"),
        nb::arg("swa_rows"), nb::arg("swa_lens"), nb::arg("block_table"), nb::arg("lens"), nb::arg("hca_seq_lens"),
        nb::arg("out"), nb::kw_only(), nb::arg("cum_seq_lens_q").none(), nb::arg("q_len").none(),
        nb::arg("max_q_len").none(), nb::arg("sinks").none(), nb::arg("sink_term"), nb::arg("bmm1_scale"),
        nb::arg("bmm2_scale"),
        nb::arg("lse").none(), nb::arg("out_of_range_count").none(), nb::arg("workspace").none(),
        nb::arg("enable_pdl"), nb::arg("hnd"), nb::arg("stream"), nb::arg("size_only") = false);
  m.def("convert_page_aligned_indices", &convert_arrays, nb::arg("indices"), nb::arg("lens"), nb::arg("seq_lens"),
        nb::arg("swa_rows"), nb::arg("swa_lens"), nb::arg("block_table"), nb::arg("hca_seq_lens"), nb::kw_only(),
        nb::arg("error").none(), nb::arg("cum_seq_lens_q").none(), nb::arg("q_len").none(),
        nb::arg("max_q_len").none(), nb::arg("page_size"), nb::arg("swa_pool_rows"),
        nb::arg("compressed_pool_pages"), nb::arg("stream"));
  m.def("convert_max_pages", &convert_max_pages, nb::arg("max_seq_len"), nb::arg("page_size"));
  m.attr("CONVERT_ERROR_WORDS") = kConvertErrorWords;
}

}  // namespace sparse_decode::binding
