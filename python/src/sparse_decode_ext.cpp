// sparse_decode._ext: the nanobind module under the Python package.
//
// It does one thing: turn DLPack arrays (NumPy, PyTorch, CuPy, JAX...) into a
// Dsv4DecodeArgs and call the C++ API. Shapes and strides are read here, where
// the library's argument struct is; framework conveniences (dtype views,
// streams, devices) live in the Python layer. Errors come back as Python
// exceptions carrying the library's message: ValueError for kInvalidArgument
// (and for arrays that do not fit the argument struct), NotImplementedError for
// kNotSupported, RuntimeError for kCudaError.
#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>

#include <algorithm>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "sparse_decode/dsv4_decode.h"

namespace nb = nanobind;
using namespace sparse_decode;

namespace {

using InArray = nb::ndarray<nb::ro>;  // read-only: NumPy read-only arrays are accepted too
using OutArray = nb::ndarray<>;

[[noreturn]] void fail(const std::string& message) { throw nb::value_error(message.c_str()); }

// Raises the Python exception that matches a library Status.
void check(const Status& status) {
  switch (status.code()) {
    case StatusCode::kOk:
      return;
    case StatusCode::kInvalidArgument:
      fail(status.message());
    case StatusCode::kNotSupported:
      PyErr_SetString(PyExc_NotImplementedError, status.message().c_str());
      throw nb::python_error();
    case StatusCode::kCudaError:
      break;
  }
  PyErr_SetString(PyExc_RuntimeError, status.message().c_str());
  throw nb::python_error();
}

// What the binding needs of one array, whatever ndarray flavour it came as.
struct Array {
  const char* name;
  void* data;
  std::vector<int64_t> shape, strides;  // strides in elements
  nb::dlpack::dtype dtype;
  int device_type, device_id;

  size_t ndim() const { return shape.size(); }
  int64_t count() const {
    int64_t n = 1;
    for (int64_t s : shape) n *= s;
    return n;
  }
  std::string shape_text() const {
    std::string text = "[";
    for (size_t i = 0; i < shape.size(); ++i) text += (i ? ", " : "") + std::to_string(shape[i]);
    return text + "]";
  }
};

template <typename... Config>
Array view(const char* name, const nb::ndarray<Config...>& a) {
  Array v{name,         const_cast<void*>(static_cast<const void*>(a.data())), {}, {}, a.dtype(), a.device_type(),
          a.device_id()};
  for (size_t i = 0; i < a.ndim(); ++i) {
    v.shape.push_back(a.shape(i));
    v.strides.push_back(a.stride(i));
  }
  // An empty array's strides mean nothing (exporters report anything): use compact ones.
  if (v.count() == 0) {
    int64_t stride = 1;
    for (size_t i = v.ndim(); i-- > 0;) {
      v.strides[i] = stride;
      stride *= std::max<int64_t>(v.shape[i], 1);
    }
  }
  return v;
}

template <typename T>
std::optional<Array> view(const char* name, const std::optional<T>& a) {
  if (!a) return std::nullopt;
  return view(name, *a);
}

enum class Kind { kFp8, kBf16, kInt32, kFloat32, kOther };

// DLPack 1.1's kDLFloat8_e4m3fn, by number: older nanobind releases do not name it.
constexpr uint8_t kDLFloat8E4M3FN = 10;

// Integer views carry FP8 (1 byte) and BF16 (2 bytes) bits for frameworks
// that have no such dtype (NumPy without ml_dtypes, CuPy).
Kind kind(nb::dlpack::dtype t) {
  using C = nb::dlpack::dtype_code;
  const auto code = static_cast<C>(t.code);
  if (t.lanes != 1) return Kind::kOther;
  const bool integer = code == C::Int || code == C::UInt;
  if (t.bits == 8 && (integer || t.code == kDLFloat8E4M3FN)) return Kind::kFp8;
  if (t.bits == 16 && (integer || code == C::Bfloat)) return Kind::kBf16;
  if (t.bits == 32 && code == C::Int) return Kind::kInt32;
  if (t.bits == 32 && code == C::Float) return Kind::kFloat32;
  return Kind::kOther;
}

std::string dtype_text(nb::dlpack::dtype t) {
  static const char* names[] = {"int", "uint", "float", "opaque", "bfloat"};
  std::string base = t.code < 5 ? names[t.code] : "dlpack-code-" + std::to_string(t.code) + "-";
  return base + std::to_string(t.bits);
}

void expect_kind(const Array& a, Kind wanted, const char* what) {
  if (kind(a.dtype) != wanted) fail(std::string(a.name) + ": expected " + what + ", got " + dtype_text(a.dtype));
}

std::string device_text(const Array& a) {
  const int type = a.device_type;
  const char* name = type == nb::device::cpu::value            ? "cpu"
                     : type == nb::device::cuda::value         ? "cuda"
                     : type == nb::device::cuda_host::value    ? "cuda_host"
                     : type == nb::device::cuda_managed::value ? "cuda_managed"
                                                               : nullptr;
  return (name ? std::string(name) : "dlpack-device-" + std::to_string(type)) + ":" + std::to_string(a.device_id);
}

// Every array of a call lives where q lives.
void expect_same_device(const Array& a, const Array& q) {
  if (a.device_type != q.device_type || a.device_id != q.device_id) {
    fail(std::string(a.name) + ": expected an array on the same device as q (" + device_text(q) + "), got " +
         device_text(a));
  }
}

// Leading dims [0, n) merged into one (e.g. [B, q_len] into tokens): its size
// and its single stride. Size-1 dims carry no stride (frameworks report any
// value for them), so `fallback` is used when no dim is longer than 1.
struct Merged {
  int64_t size, stride;
};
Merged merge_leading(const Array& a, size_t n, int64_t fallback) {
  int64_t size = 1, stride = fallback, next = 0;
  bool first = true;
  for (size_t i = 0; i < n; ++i) size *= a.shape[i];
  if (size <= 1) return {size, fallback};
  for (size_t i = n; i-- > 0;) {
    if (a.shape[i] == 1) continue;
    if (first) {
      stride = a.strides[i];
      first = false;
    } else if (a.strides[i] != next) {
      fail(std::string(a.name) + ": the leading dims of shape " + a.shape_text() +
           " cannot be flattened into tokens with one stride (make the array contiguous)");
    }
    next = a.strides[i] * a.shape[i];
  }
  return {size, stride};
}

int64_t round_up(int64_t value, int64_t multiple) { return (value + multiple - 1) / multiple * multiple; }

// A [tokens..., H, 512] array (q, out): tokens, token stride, head stride.
struct Rows {
  int64_t tokens, token_stride, head_stride;
};
Rows rows_of(const Array& a, int64_t heads) {
  const size_t nd = a.ndim();
  if (nd < 2 || a.shape[nd - 1] != kHeadDim || a.shape[nd - 2] != heads) {
    fail(std::string(a.name) + ": expected shape [T, " + std::to_string(heads) + ", 512] or [B, q_len, " +
         std::to_string(heads) + ", 512], got " + a.shape_text());
  }
  if (a.strides[nd - 1] != 1) fail(std::string(a.name) + ": expected the 512 dims contiguous (last stride 1)");
  const int64_t head_stride = a.strides[nd - 2];
  const Merged tokens = merge_leading(a, nd - 2, round_up((heads - 1) * head_stride + kHeadDim, 16));
  return {tokens.size, tokens.stride, head_stride};
}

// A pool: [rows, 512], [pages, page_size, 512], or 4-D NHD/HND with one KV head.
KvPool pool_of(const Array& a, bool hnd) {
  const size_t nd = a.ndim();
  const std::string name = a.name;
  if (nd < 2 || nd > 4 || a.shape[nd - 1] != kHeadDim) {
    fail(name +
         ": expected [pages, page_size, 512] (or NHD [pages, page_size, 1, 512], HND [pages, 1, page_size, "
         "512], [rows, 512]), got " +
         a.shape_text());
  }
  if (a.strides[nd - 1] != 1) fail(name + ": expected the 512 dims contiguous (last stride 1)");
  size_t page_dim = 0, slot_dim = 1;
  if (nd == 4) {
    const size_t head_dim = hnd ? 1 : 2;
    slot_dim = hnd ? 2 : 1;
    if (a.shape[head_dim] != 1) {
      fail(name + ": expected one KV head in " +
           (hnd ? "HND [pages, 1, page_size, 512]" : "NHD [pages, page_size, 1, 512]") + ", got " + a.shape_text());
    }
  }
  KvPool pool;
  pool.data = a.data;
  if (nd == 2) {  // flat rows: pages of one row
    pool.pages = a.shape[0];
    pool.page_size = 1;
    pool.row_stride = kHeadDim;
    pool.page_stride = a.shape[0] > 1 ? a.strides[0] : kHeadDim;
    return pool;
  }
  pool.pages = a.shape[page_dim];
  pool.page_size = a.shape[slot_dim];
  pool.row_stride = pool.page_size > 1 ? a.strides[slot_dim] : kHeadDim;
  pool.page_stride = pool.pages > 1 ? a.strides[page_dim] : pool.page_size * pool.row_stride;
  return pool;
}

// A contiguous [count] int32/float32 array (lens, seq_lens, cum_seq_lens_q, sinks).
template <typename T>
const T* vector_of(const Array& a, Kind wanted, const char* what, int64_t expected_count) {
  expect_kind(a, wanted, what);
  const Merged all = merge_leading(a, a.ndim(), 1);
  if (expected_count >= 0 && all.size != expected_count) {
    fail(std::string(a.name) + ": expected " + std::to_string(expected_count) +
         (expected_count == 1 ? " element" : " elements") + ", got shape " + a.shape_text());
  }
  if (all.stride != 1)
    fail(std::string(a.name) + ": expected a contiguous array, got element stride " + std::to_string(all.stride));
  return static_cast<const T*>(a.data);
}

void decode_arrays(const InArray& q_in, const InArray& swa_in, const std::optional<InArray>& compressed_in,
                   const InArray& indices_in, const OutArray& out_in, const std::optional<InArray>& lens_in,
                   const std::optional<InArray>& seq_lens_in, const std::optional<InArray>& cum_in,
                   std::optional<int32_t> q_len, std::optional<int32_t> max_q_len,
                   const std::optional<InArray>& sinks_in, float bmm1_value, const std::optional<InArray>& bmm1_in,
                   float bmm2_value, const std::optional<InArray>& bmm2_in, const std::optional<OutArray>& lse_in,
                   const std::optional<OutArray>& count_in, const std::optional<OutArray>& workspace_in,
                   bool enable_pdl, bool hnd, uintptr_t stream) {
  const Array q = view("q", q_in), swa = view("swa_kv", swa_in), indices = view("indices", indices_in),
              out = view("out", out_in);
  const auto compressed = view("compressed_kv", compressed_in), lens = view("lens", lens_in),
             seq_lens = view("seq_lens", seq_lens_in), cum = view("cum_seq_lens_q", cum_in),
             sinks = view("sinks", sinks_in), bmm1 = view("bmm1_scale", bmm1_in), bmm2 = view("bmm2_scale", bmm2_in),
             lse = view("lse", lse_in), count = view("out_of_range_count", count_in),
             workspace = view("workspace", workspace_in);

  Dsv4DecodeArgs args;
  if (q.device_type == nb::device::cpu::value) {
    args.memory = MemorySpace::kHost;
  } else if (q.device_type == nb::device::cuda::value || q.device_type == nb::device::cuda_managed::value) {
    args.memory = MemorySpace::kDevice;
  } else {
    fail("q: expected a CPU or CUDA array, got " + device_text(q));
  }
  for (const Array* a : {&swa, &indices, &out}) expect_same_device(*a, q);
  for (const auto* a : {&compressed, &lens, &seq_lens, &cum, &sinks, &bmm1, &bmm2, &lse, &count, &workspace}) {
    if (*a) expect_same_device(**a, q);
  }

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
  expect_kind(swa, element, element_text);
  if (compressed) expect_kind(*compressed, element, element_text);
  expect_kind(out, Kind::kBf16, "bfloat16 (or a 2-byte integer view)");
  expect_kind(indices, Kind::kInt32, "int32");

  // Heads come from q's second-to-last dim; q and out are read as [T, H, 512].
  if (q.ndim() != 3 && q.ndim() != 4) fail("q: expected [T, H, 512] or [B, q_len, H, 512], got " + q.shape_text());
  args.num_heads = static_cast<int32_t>(q.shape[q.ndim() - 2]);
  const Rows q_rows = rows_of(q, args.num_heads), out_rows = rows_of(out, args.num_heads);
  args.num_tokens = q_rows.tokens;
  if (out_rows.tokens != args.num_tokens) {
    fail("out: expected " + std::to_string(args.num_tokens) + " tokens like q, got shape " + out.shape_text());
  }
  args.q = q.data;
  args.q_token_stride = q_rows.token_stride;
  args.q_head_stride = q_rows.head_stride;
  args.out = out.data;
  args.out_token_stride = out_rows.token_stride;
  args.out_head_stride = out_rows.head_stride;

  args.swa_kv = pool_of(swa, hnd);
  if (compressed && compressed->count() > 0) args.compressed_kv = pool_of(*compressed, hnd);

  if (indices.ndim() < 2 || indices.strides.back() != 1) {
    fail("indices: expected [T, W] (or [B, q_len, W]) int32 with contiguous columns, got " + indices.shape_text());
  }
  args.width = static_cast<int32_t>(indices.shape.back());
  const Merged index_rows = merge_leading(indices, indices.ndim() - 1, round_up(args.width, 4));
  if (index_rows.size != args.num_tokens) {
    fail("indices: expected " + std::to_string(args.num_tokens) + " rows (one per token), got shape " +
         indices.shape_text());
  }
  args.indices = static_cast<const int32_t*>(indices.data);
  args.indices_stride = index_rows.stride;

  if (lens) args.lens = vector_of<int32_t>(*lens, Kind::kInt32, "int32", args.num_tokens);
  if (seq_lens) {
    args.seq_lens = vector_of<int32_t>(*seq_lens, Kind::kInt32, "int32", -1);
    args.num_requests = static_cast<int32_t>(seq_lens->count());
  }
  if (cum) {
    const int64_t expected = seq_lens ? args.num_requests + 1 : -1;
    args.cum_seq_lens_q = vector_of<int32_t>(*cum, Kind::kInt32, "int32 [B + 1]", expected);
    if (!seq_lens) args.num_requests = static_cast<int32_t>(cum->count() - 1);
  }
  // Query lengths: given, or read off a 4-D q; a 3-D q with uniform requests
  // divides evenly. Whatever stays 0 is refused by the library with its name.
  const int32_t q_dim_len = q.ndim() == 4 ? static_cast<int32_t>(q.shape[1]) : 0;
  args.max_q_len = max_q_len.value_or(q_dim_len);
  args.q_len = q_len.value_or(q_dim_len);
  if (!q_len && q.ndim() == 3 && args.num_requests > 0 && args.num_tokens % args.num_requests == 0) {
    args.q_len = static_cast<int32_t>(args.num_tokens / args.num_requests);
  }

  if (sinks) args.sinks = vector_of<float>(*sinks, Kind::kFloat32, "float32", args.num_heads);
  args.bmm1_scale.value = bmm1_value;
  args.bmm2_scale.value = bmm2_value;
  if (bmm1) args.bmm1_scale.device = vector_of<float>(*bmm1, Kind::kFloat32, "a float or a 1-element float32 array", 1);
  if (bmm2) args.bmm2_scale.device = vector_of<float>(*bmm2, Kind::kFloat32, "a float or a 1-element float32 array", 1);

  if (lse) {
    expect_kind(*lse, Kind::kFloat32, "float32");
    if (lse->ndim() < 2 || lse->shape.back() != args.num_heads || lse->strides.back() != 1) {
      fail("lse: expected [T, " + std::to_string(args.num_heads) + "] float32 with contiguous heads, got " +
           lse->shape_text());
    }
    const Merged lse_rows = merge_leading(*lse, lse->ndim() - 1, args.num_heads);
    if (lse_rows.size != args.num_tokens)
      fail("lse: expected " + std::to_string(args.num_tokens) + " tokens, got " + lse->shape_text());
    args.lse = static_cast<float*>(lse->data);
    args.lse_token_stride = lse_rows.stride;
  }
  if (count) {
    args.out_of_range_count = const_cast<int32_t*>(vector_of<int32_t>(*count, Kind::kInt32, "int32 [1]", 1));
  }
  args.enable_pdl = enable_pdl;

  void* workspace_data = workspace ? workspace->data : nullptr;
  const size_t workspace_bytes =
      workspace ? static_cast<size_t>(workspace->count()) * ((workspace->dtype.bits + 7) / 8) : 0;
  if (const size_t needed = workspace_size(args); needed > workspace_bytes) {
    fail("workspace: expected at least " + std::to_string(needed) + " bytes, got " + std::to_string(workspace_bytes));
  }

  Status status;
  {
    // The CPU backend can run for a while; other Python threads may go on.
    nb::gil_scoped_release release;
    status = sparse_decode::dsv4_decode(args, workspace_data, workspace_bytes, reinterpret_cast<CUstream_st*>(stream));
  }
  check(status);
}

}  // namespace

NB_MODULE(_ext, m) {
  m.doc() = "DLPack binding of the sparse_decode C++ API (use the sparse_decode package, not this module)";
  m.attr("HEAD_DIM") = kHeadDim;
  m.attr("SWA_COLUMNS") = kSwaColumns;
  m.attr("MAX_QUERY_LEN") = kMaxQueryLen;

  m.def("dsv4_decode", &decode_arrays, nb::arg("q"), nb::arg("swa_kv"), nb::arg("compressed_kv").none(),
        nb::arg("indices"), nb::arg("out"), nb::kw_only(), nb::arg("lens").none(), nb::arg("seq_lens").none(),
        nb::arg("cum_seq_lens_q").none(), nb::arg("q_len").none(), nb::arg("max_q_len").none(), nb::arg("sinks").none(),
        nb::arg("bmm1_scale"), nb::arg("bmm1_scale_array").none(), nb::arg("bmm2_scale"),
        nb::arg("bmm2_scale_array").none(), nb::arg("lse").none(), nb::arg("out_of_range_count").none(),
        nb::arg("workspace").none(), nb::arg("enable_pdl"), nb::arg("hnd"), nb::arg("stream"));

  // Lets the tests check the Status -> exception mapping for codes that a
  // machine without a GPU cannot provoke (kNotSupported, kCudaError).
  m.def("_raise_status",
        [](int code, const std::string& message) { check(Status(static_cast<StatusCode>(code), message)); });
}
