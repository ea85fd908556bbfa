// _ext.dsa_decode: DLPack arrays -> DsaDecodeArgs -> sparse_decode::dsa_decode
// (docs/spec.md section 4, region-paged DSA decode with GQA), and its two queries:
// dsa_splits_for and dsa_workspace_size.
#include "binding_calls.h"
#include "sparse_decode/dsa_decode.h"

namespace sparse_decode::binding {
namespace {

// The cache: [pages, G, block, 384] with contiguous dims. A dim of size 1
// carries no stride (frameworks report anything), so the compact value stands in.
void set_cache(DsaDecodeArgs& args, const Array& a) {
  if (a.ndim() != 4 || a.shape[3] != kDsaSlotDim) {
    fail("cache: expected [pages, G, block, 384] (K in dims 0..191, V in 192..383), got " + a.shape_text());
  }
  if (a.strides[3] != 1) fail("cache: expected the 384 dims contiguous (last stride 1)");
  args.cache = a.data;
  args.num_pages = a.shape[0];
  args.num_groups = static_cast<int32_t>(a.shape[1]);
  args.block_size = static_cast<int32_t>(a.shape[2]);
  args.cache_slot_stride = a.shape[2] > 1 ? a.strides[2] : kDsaSlotDim;
  args.cache_group_stride = a.shape[1] > 1 ? a.strides[1] : a.shape[2] * args.cache_slot_stride;
  args.cache_page_stride = a.shape[0] > 1 ? a.strides[0] : a.shape[1] * args.cache_group_stride;
}

// The gate: [tokens, G * heads] (tokens = rows / G), heads contiguous, BF16, FP16 or float32.
void set_gate(DsaDecodeArgs& args, const Array& a) {
  const Kind k = kind(a.dtype);
  const bool half =
      a.dtype.bits == 16 && a.dtype.lanes == 1 && a.dtype.code == static_cast<uint8_t>(nb::dlpack::dtype_code::Float);
  if (k != Kind::kBf16 && k != Kind::kFloat32 && !half) {
    fail("gate: expected bfloat16 (or a 2-byte integer view), float16 or float32, got " + dtype_text(a.dtype));
  }
  const int64_t tokens = args.num_rows / args.num_groups, width = int64_t{args.num_groups} * args.num_heads;
  if (a.ndim() != 2 || a.shape[0] != tokens || a.shape[1] != width || (width > 1 && a.strides[1] != 1)) {
    fail("gate: expected [tokens, G * heads] = [" + std::to_string(tokens) + ", " + std::to_string(width) +
         "] with contiguous columns, got " + a.shape_text());
  }
  args.gate = a.data;
  args.gate_dtype = half ? DsaGateDType::kFloat16 : k == Kind::kBf16 ? DsaGateDType::kBFloat16 : DsaGateDType::kFloat32;
  args.gate_token_stride = tokens > 1 ? a.strides[0] : width;
}

// Runs the decode, or with size_only returns workspace_size() of the call
// (what the Python layer allocates when the caller gives no workspace) and
// runs nothing; array errors (shapes, dtypes) are raised either way, the
// library's own checks come with the call.
size_t dsa_arrays(const InArray& q_in, const InArray& cache_in, const InArray& regions_in,
                  const InArray& block_table_in, const InArray& positions_in, const InArray& active_in,
                  const OutArray& out_in, float scale, int32_t query_len, int32_t splits, bool clear_inactive,
                  const std::optional<InArray>& k_scale_in, const std::optional<InArray>& v_scale_in,
                  const std::optional<InArray>& gate_in, const std::optional<OutArray>& workspace_in, bool enable_pdl,
                  uintptr_t stream, bool size_only) {
  const Array q = view("q", q_in);
  const std::optional<Array> cache = view("cache", cache_in), regions = view("regions", regions_in),
                             block_table = view("block_table", block_table_in),
                             positions = view("positions", positions_in), active = view("active", active_in),
                             out = view("out", out_in), k_scale = view("k_scale", k_scale_in),
                             v_scale = view("v_scale", v_scale_in), gate = view("gate", gate_in),
                             workspace = view("workspace", workspace_in);

  DsaDecodeArgs args;
  args.memory =
      memory_of(q, {&cache, &regions, &block_table, &positions, &active, &out, &k_scale, &v_scale, &gate, &workspace});

  const char* bf16 = "bfloat16 (or a 2-byte integer view)";
  expect_kind(q, Kind::kBf16, bf16);
  expect_kind(*out, Kind::kBf16, bf16);
  if (q.ndim() != 3) fail("q: expected [rows, heads, 192] with rows = tokens * G, got " + q.shape_text());
  args.num_heads = static_cast<int32_t>(q.shape[1]);
  const Rows q_rows = rows_of(q, args.num_heads, kDsaHeadDim), out_rows = rows_of(*out, args.num_heads, kDsaHeadDim);
  if (out_rows.tokens != q_rows.tokens) {
    fail("out: expected " + std::to_string(q_rows.tokens) + " rows like q, got shape " + out->shape_text());
  }
  args.num_rows = q_rows.tokens;
  args.q = q.data;
  args.q_row_stride = q_rows.token_stride;
  args.q_head_stride = q_rows.head_stride;
  args.out = out->data;
  args.out_row_stride = out_rows.token_stride;
  args.out_head_stride = out_rows.head_stride;

  // The cache's dtype: FP8 as the seed reads it (uint8 or float8_e4m3fn), else BF16.
  const Kind element = kind(cache->dtype);
  if (element != Kind::kFp8 && element != Kind::kBf16) {
    fail("cache: expected bfloat16 or FP8 E4M3 (float8_e4m3fn or uint8), got " + dtype_text(cache->dtype));
  }
  args.cache_dtype = element == Kind::kFp8 ? DType::kFloat8E4M3 : DType::kBFloat16;
  set_cache(args, *cache);
  if (k_scale) args.k_scale = vector_of<float>(*k_scale, Kind::kFloat32, "float32 [1]", 1);
  if (v_scale) args.v_scale = vector_of<float>(*v_scale, Kind::kFloat32, "float32 [1]", 1);

  const IndexTable table = table_of(*block_table, "[requests, max_blocks]");
  args.block_table = table.data;
  args.num_requests = static_cast<int32_t>(table.rows);
  args.max_blocks = table.width;
  args.block_table_stride = table.stride;
  args.query_len = query_len;

  const IndexTable selected = table_of(*regions, "[rows, R]");
  if (selected.rows != args.num_rows) {
    fail("regions: expected " + std::to_string(args.num_rows) + " rows like q, got shape " + regions->shape_text());
  }
  args.regions = selected.data;
  args.num_regions = selected.width;
  args.regions_stride = selected.stride;
  args.positions = vector_of<int32_t>(*positions, Kind::kInt32, "int32", args.num_rows);
  args.active = vector_of<int32_t>(*active, Kind::kInt32, "int32 (non-zero = active)", args.num_rows);
  args.clear_inactive = clear_inactive;

  args.scale = scale;
  args.splits = splits;
  // The gate's token count needs G; a row count that G does not divide is the library's to refuse.
  if (gate && args.num_groups > 0 && args.num_rows % args.num_groups == 0) set_gate(args, *gate);
  args.enable_pdl = enable_pdl;

  if (size_only) return workspace_size(args);
  run_decode(args, workspace, stream, [](const auto&... call) { return dsa_decode(call...); });
  return 0;
}

// workspace_size() of a call with these rows, heads and splits: the only
// fields it reads, so that a caller can allocate before it has the arrays.
size_t workspace_bytes(int64_t rows, int32_t heads, int32_t splits, bool on_device) {
  DsaDecodeArgs args;
  args.memory = on_device ? MemorySpace::kDevice : MemorySpace::kHost;
  args.num_rows = rows;
  args.num_heads = heads;
  args.splits = splits;
  return workspace_size(args);
}

}  // namespace

void add_dsa_decode(nb::module_& m) {
  m.attr("DSA_HEAD_DIM") = kDsaHeadDim;
  m.attr("DSA_MAX_SPLITS") = kDsaMaxSplits;
  m.def("dsa_decode", &dsa_arrays, nb::arg("q"), nb::arg("cache"), nb::arg("regions"), nb::arg("block_table"),
        nb::arg("positions"), nb::arg("active"), nb::arg("out"), nb::kw_only(), nb::arg("scale"),
        nb::arg("query_len"), nb::arg("splits"), nb::arg("clear_inactive"), nb::arg("k_scale").none(),
        nb::arg("v_scale").none(), nb::arg("gate").none(), nb::arg("workspace").none(), nb::arg("enable_pdl"),
        nb::arg("stream"), nb::arg("size_only") = false);
  m.def("dsa_splits_for", &dsa_splits_for, nb::arg("rows"));
  m.def("dsa_workspace_size", &workspace_bytes, nb::arg("rows"), nb::arg("heads"), nb::arg("splits"),
        nb::arg("on_device"));
}

}  // namespace sparse_decode::binding
