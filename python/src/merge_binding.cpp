// _ext.merge_states: DLPack arrays -> MergeStatesArgs -> sparse_decode::merge_states
// (docs/spec.md section 5, merging partial results across ranks).
//
// The partials come as one array a rank ([T, H, D] each, sharing strides)
// or stacked ([R, T, H, D], any rank stride), the lse likewise ([T, H] each
// or [R, T, H], any strides); `out` [T, H, D] gives H and D, and T may be
// spelled [B, q_len] in every array.
#include <nanobind/stl/vector.h>

#include <string>
#include <vector>

#include "binding.h"
#include "sparse_decode/merge_states.h"

namespace sparse_decode::binding {
namespace {

MergeDType merge_dtype(const Array& a) {
  const Kind k = kind(a.dtype);
  if (k == Kind::kBf16) return MergeDType::kBFloat16;
  if (k == Kind::kFloat32) return MergeDType::kFloat32;
  fail(std::string(a.name) + ": expected bfloat16 (or a 2-byte integer view) or float32, got " + dtype_text(a.dtype));
}

// The array without its leading rank dim: [R, rest...] -> [rest...].
Array drop_rank_dim(const Array& a, const std::string& name_storage) {
  Array rest = a;
  rest.name = name_storage.c_str();
  rest.shape.erase(rest.shape.begin());
  rest.strides.erase(rest.strides.begin());
  return rest;
}

// [T..., H] float32 with any strides: tokens, token stride, head stride.
Rows lse_rows(const Array& a, int64_t heads) {
  expect_kind(a, Kind::kFloat32, "float32");
  const size_t nd = a.ndim();
  if (nd < 2 || a.shape[nd - 1] != heads) {
    fail(std::string(a.name) + ": expected [T, " + std::to_string(heads) + "] (or [B, q_len, " +
         std::to_string(heads) + "]) float32, got " + a.shape_text());
  }
  const int64_t head_stride = heads > 1 ? a.strides[nd - 1] : 1;
  const Merged tokens = merge_leading(a, nd - 1, heads * head_stride);
  return {tokens.size, tokens.stride, head_stride};
}

void expect_tokens(const Array& a, int64_t tokens, int64_t got) {
  if (got != tokens) {
    fail(std::string(a.name) + ": expected " + std::to_string(tokens) + " tokens like out, got shape " +
         a.shape_text());
  }
}

void merge_arrays(const std::vector<InArray>& partials_in, const std::vector<InArray>& lses_in,
                  const OutArray& out_in, const std::optional<OutArray>& out_lse_in, bool stacked, bool enable_pdl,
                  uintptr_t stream) {
  if (partials_in.empty()) fail("partials: expected at least one array");
  if (stacked && (partials_in.size() != 1 || lses_in.size() != 1)) {
    fail("partials: a stacked call takes one [R, T, H, D] array and one [R, T, H] lse array");
  }
  const Array out = view("out", out_in);
  const std::optional<Array> out_lse = view("out_lse", out_lse_in);
  if (out.ndim() < 3) fail("out: expected [T, H, D] (or [B, q_len, H, D]), got " + out.shape_text());

  MergeStatesArgs args;
  args.num_heads = static_cast<int32_t>(out.shape[out.ndim() - 2]);
  args.head_dim = static_cast<int32_t>(out.shape[out.ndim() - 1]);
  args.out_dtype = merge_dtype(out);
  const Rows out_rows = rows_of(out, args.num_heads, args.head_dim);
  args.num_tokens = out_rows.tokens;
  args.out = out.data;
  args.out_token_stride = out_rows.token_stride;
  args.out_head_stride = out_rows.head_stride;
  if (out_lse) {
    const Rows rows = lse_rows(*out_lse, args.num_heads);
    expect_tokens(*out_lse, args.num_tokens, rows.tokens);
    args.out_lse = static_cast<float*>(out_lse->data);
    args.out_lse_token_stride = rows.token_stride;
    args.out_lse_head_stride = rows.head_stride;
  }

  // Names kept alive for the Array views that point at them.
  std::vector<std::string> names;
  names.reserve(2 * partials_in.size() + 2);
  std::vector<std::optional<Array>> inputs;
  std::vector<const void*> partial_pointers;
  std::vector<const float*> lse_pointers;
  if (stacked) {
    const Array all = view("partials", partials_in[0]), all_lse = view("lses", lses_in[0]);
    inputs = {all, all_lse};
    if (all.ndim() < 4) fail("partials: expected [R, T, H, D] (or [R, B, q_len, H, D]), got " + all.shape_text());
    if (all_lse.ndim() != all.ndim() - 1 || all_lse.shape[0] != all.shape[0]) {
      fail("lses: expected [R, T, H] with R = " + std::to_string(all.shape[0]) + " like partials, got " +
           all_lse.shape_text());
    }
    args.num_ranks = static_cast<int32_t>(all.shape[0]);
    args.partial_dtype = merge_dtype(all);
    const Array rank = drop_rank_dim(all, names.emplace_back("partials"));
    const Rows rows = rows_of(rank, args.num_heads, args.head_dim);
    expect_tokens(all, args.num_tokens, rows.tokens);
    args.partial_base = all.data;
    args.partial_rank_stride = all.shape[0] > 1 ? all.strides[0] : 0;
    args.partial_token_stride = rows.token_stride;
    args.partial_head_stride = rows.head_stride;
    const Array lse_rank = drop_rank_dim(all_lse, names.emplace_back("lses"));
    const Rows lse = lse_rows(lse_rank, args.num_heads);
    expect_tokens(all_lse, args.num_tokens, lse.tokens);
    args.lse_base = static_cast<const float*>(all_lse.data);
    args.lse_rank_stride = all_lse.shape[0] > 1 ? all_lse.strides[0] : 0;
    args.lse_token_stride = lse.token_stride;
    args.lse_head_stride = lse.head_stride;
  } else {
    if (lses_in.size() != partials_in.size()) {
      fail("lses: expected " + std::to_string(partials_in.size()) + " arrays (one a rank, like partials), got " +
           std::to_string(lses_in.size()));
    }
    args.num_ranks = static_cast<int32_t>(partials_in.size());
    for (size_t r = 0; r < partials_in.size(); ++r) {
      const Array p = view(names.emplace_back("partials[" + std::to_string(r) + "]").c_str(), partials_in[r]);
      const Array l = view(names.emplace_back("lses[" + std::to_string(r) + "]").c_str(), lses_in[r]);
      inputs.push_back(p);
      inputs.push_back(l);
      const MergeDType dtype = merge_dtype(p);
      const Rows rows = rows_of(p, args.num_heads, args.head_dim);
      expect_tokens(p, args.num_tokens, rows.tokens);
      const Rows lse = lse_rows(l, args.num_heads);
      expect_tokens(l, args.num_tokens, lse.tokens);
      if (r == 0) {
        args.partial_dtype = dtype;
        args.partial_token_stride = rows.token_stride;
        args.partial_head_stride = rows.head_stride;
        args.lse_token_stride = lse.token_stride;
        args.lse_head_stride = lse.head_stride;
      } else if (dtype != args.partial_dtype || rows.token_stride != args.partial_token_stride ||
                 rows.head_stride != args.partial_head_stride) {
        fail(std::string(p.name) + ": expected the dtype and strides of partials[0] (one layout for every rank)");
      } else if (lse.token_stride != args.lse_token_stride || lse.head_stride != args.lse_head_stride) {
        fail(std::string(l.name) + ": expected the strides of lses[0] (one layout for every rank)");
      }
      partial_pointers.push_back(p.data);
      lse_pointers.push_back(static_cast<const float*>(l.data));
    }
    args.partials = partial_pointers.data();
    args.lses = lse_pointers.data();
  }
  args.memory = memory_of(out, {&out_lse});
  for (const std::optional<Array>& input : inputs) memory_of(out, {&input});
  args.enable_pdl = enable_pdl;

  Status status;
  {
    nb::gil_scoped_release release;
    status = merge_states(args, reinterpret_cast<CUstream_st*>(stream));
  }
  check(status);
}

}  // namespace

void add_merge_states(nb::module_& m) {
  m.attr("MERGE_MAX_RANKS") = kMergeMaxRanks;
  m.def("merge_states", &merge_arrays, nb::arg("partials"), nb::arg("lses"), nb::arg("out"), nb::kw_only(),
        nb::arg("out_lse").none(), nb::arg("stacked"), nb::arg("enable_pdl"), nb::arg("stream"));
}

}  // namespace sparse_decode::binding
