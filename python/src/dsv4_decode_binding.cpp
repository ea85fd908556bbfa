// _ext.dsv4_decode: DLPack arrays -> Dsv4DecodeArgs -> sparse_decode::dsv4_decode
// (docs/spec.md section 1, plain 512-element rows).
#include "binding_calls.h"

namespace sparse_decode::binding {
namespace {

// Runs the decode, or with size_only returns workspace_size() of the call
// (0 for arguments it refuses: the call then names them) and runs nothing.
size_t decode_arrays(const InArray& q_in, const InArray& swa_in, const std::optional<InArray>& compressed_in,
                   const InArray& indices_in, const OutArray& out_in, const std::optional<InArray>& lens_in,
                   const std::optional<InArray>& seq_lens_in, const std::optional<InArray>& cum_in,
                   std::optional<int32_t> q_len, std::optional<int32_t> max_q_len,
                   const std::optional<InArray>& sinks_in, float bmm1_value, const std::optional<InArray>& bmm1_in,
                   float bmm2_value, const std::optional<InArray>& bmm2_in, int32_t sink_term,
                   const std::optional<OutArray>& lse_in,
                   const std::optional<OutArray>& count_in, const std::optional<OutArray>& workspace_in,
                   bool enable_pdl, bool hnd, uintptr_t stream, bool size_only) {
  const Array q = view("q", q_in);
  const std::optional<Array> swa = view("swa_kv", swa_in), indices = view("indices", indices_in),
                             out = view("out", out_in), compressed = view("compressed_kv", compressed_in),
                             lens = view("lens", lens_in), seq_lens = view("seq_lens", seq_lens_in),
                             cum = view("cum_seq_lens_q", cum_in), sinks = view("sinks", sinks_in),
                             bmm1 = view("bmm1_scale", bmm1_in), bmm2 = view("bmm2_scale", bmm2_in),
                             lse = view("lse", lse_in), count = view("out_of_range_count", count_in),
                             workspace = view("workspace", workspace_in);

  Dsv4DecodeArgs args;
  args.memory = memory_of(
      q, {&swa, &indices, &out, &compressed, &lens, &seq_lens, &cum, &sinks, &bmm1, &bmm2, &lse, &count, &workspace});

  // Element type: q decides, the pools follow, out is BF16.
  const Kind element = kind(q.dtype);
  if (element != Kind::kFp8 && element != Kind::kBf16) {
    fail(
        "q: expected FP8 E4M3 (float8_e4m3fn or a 1-byte integer view) or BF16 (bfloat16 or a 2-byte integer "
        "view), got " +
        dtype_text(q.dtype));
  }
  args.dtype = element == Kind::kFp8 ? DType::kFloat8E4M3 : DType::kBFloat16;
  const char* element_text =
      element == Kind::kFp8 ? "the dtype of q (FP8 E4M3, 1 byte)" : "the dtype of q (BF16, 2 bytes)";
  expect_kind(*swa, element, element_text);
  if (compressed) expect_kind(*compressed, element, element_text);
  expect_kind(*out, Kind::kBf16, "bfloat16 (or a 2-byte integer view)");
  expect_kind(*indices, Kind::kInt32, "int32");

  set_query_and_output(args, q, *out);

  args.swa_kv = pool_of(*swa, hnd);
  if (compressed && compressed->count() > 0) args.compressed_kv = pool_of(*compressed, hnd);

  const IndexTable table = indices_of(*indices, args.num_tokens, true);
  args.indices = table.data;
  args.width = table.width;
  args.indices_stride = table.stride;
  args.indices_request_stride = table.request_stride;

  if (lens) {
    const Lens given = lens_of(*lens, args.num_tokens);
    args.lens = given.data;
    args.lens_token_stride = given.token_stride;
    args.lens_request_stride = given.request_stride;
  }
  args.seq_lens = set_requests(args, seq_lens, cum, q_len, max_q_len, q_dim_len_of(q, indices));

  if (sinks) args.sinks = vector_of<float>(*sinks, Kind::kFloat32, "float32", args.num_heads);
  args.sink_term = sink_term_of(sink_term);
  args.bmm1_scale.value = bmm1_value;
  args.bmm2_scale.value = bmm2_value;
  if (bmm1) args.bmm1_scale.device = vector_of<float>(*bmm1, Kind::kFloat32, "a float or a 1-element float32 array", 1);
  if (bmm2) args.bmm2_scale.device = vector_of<float>(*bmm2, Kind::kFloat32, "a float or a 1-element float32 array", 1);

  set_lse_count_and_pdl(args, lse, count, enable_pdl);

  if (size_only) return workspace_size(args);
  run_decode(args, workspace, stream, [](const auto&... call) { return dsv4_decode(call...); });
  return 0;
}

}  // namespace

void add_dsv4_decode(nb::module_& m) {
  m.def("dsv4_decode", &decode_arrays, nb::arg("q"), nb::arg("swa_kv"), nb::arg("compressed_kv").none(),
        nb::arg("indices"), nb::arg("out"), nb::kw_only(), nb::arg("lens").none(), nb::arg("seq_lens").none(),
        nb::arg("cum_seq_lens_q").none(), nb::arg("q_len").none(), nb::arg("max_q_len").none(), nb::arg("sinks").none(),
        nb::arg("bmm1_scale"), nb::arg("bmm1_scale_array").none(), nb::arg("bmm2_scale"),
        nb::arg("bmm2_scale_array").none(), nb::arg("sink_term"), nb::arg("lse").none(),
        nb::arg("out_of_range_count").none(),
        nb::arg("workspace").none(), nb::arg("enable_pdl"), nb::arg("hnd"), nb::arg("stream"),
        nb::arg("size_only") = false);
}

}  // namespace sparse_decode::binding
