// What every operation's binding shares: DLPack arrays in, library Status
// out as Python exceptions.
//
// Errors carry the library's message: ValueError for kInvalidArgument (and for
// arrays that do not fit an argument struct), NotImplementedError for
// kNotSupported, RuntimeError for kCudaError. Shapes and strides are read in
// C++, next to the argument structs; framework conveniences (dtype views,
// streams, devices) live in the Python layer (sparse_decode/_arrays.py).
#pragma once

#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>

#include <algorithm>
#include <cstdint>
#include <initializer_list>
#include <optional>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "sparse_decode/dsv4_decode.h"

namespace sparse_decode::binding {

namespace nb = nanobind;

using InArray = nb::ndarray<nb::ro>;  // read-only: NumPy read-only arrays are accepted too
using OutArray = nb::ndarray<>;

[[noreturn]] inline void fail(const std::string& message) { throw nb::value_error(message.c_str()); }

// Raises the Python exception that matches a library Status.
inline void check(const Status& status) {
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

// What a binding needs of one array, whatever ndarray flavour it came as.
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
  std::string shape_text() const { return dims_text(shape); }
  static std::string dims_text(const std::vector<int64_t>& dims) {
    std::string text = "[";
    for (size_t i = 0; i < dims.size(); ++i) text += (i ? ", " : "") + std::to_string(dims[i]);
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
  // A reversed view (NumPy's a[::-1]) addresses memory before its data
  // pointer; the argument structs take non-negative strides only.
  for (size_t i = 0; i < v.ndim(); ++i) {
    if (v.shape[i] > 1 && v.strides[i] < 0) {
      fail(std::string(name) + ": expected non-negative strides, got strides " + Array::dims_text(v.strides) +
           " for shape " + v.shape_text() + " (a reversed view: pass a copy)");
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
// that have no such dtype (NumPy without ml_dtypes, CuPy). kFp8 is also what
// a packed 584-byte pool is: any 1-byte element.
inline Kind kind(nb::dlpack::dtype t) {
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

inline std::string dtype_text(nb::dlpack::dtype t) {
  static const char* names[] = {"int", "uint", "float", "opaque", "bfloat"};
  std::string base = t.code < 5 ? names[t.code] : "dlpack-code-" + std::to_string(t.code) + "-";
  return base + std::to_string(t.bits);
}

inline void expect_kind(const Array& a, Kind wanted, const char* what) {
  if (kind(a.dtype) != wanted) fail(std::string(a.name) + ": expected " + what + ", got " + dtype_text(a.dtype));
}

inline std::string device_text(const Array& a) {
  const int type = a.device_type;
  const char* name = type == nb::device::cpu::value            ? "cpu"
                     : type == nb::device::cuda::value         ? "cuda"
                     : type == nb::device::cuda_host::value    ? "cuda_host"
                     : type == nb::device::cuda_managed::value ? "cuda_managed"
                                                               : nullptr;
  return (name ? std::string(name) : "dlpack-device-" + std::to_string(type)) + ":" + std::to_string(a.device_id);
}

// Where the call runs: q (or the converter's indices) decides, every other
// array must live on its device.
inline MemorySpace memory_of(const Array& q, std::initializer_list<const std::optional<Array>*> others) {
  MemorySpace memory = MemorySpace::kHost;
  if (q.device_type == nb::device::cpu::value) {
    memory = MemorySpace::kHost;
  } else if (q.device_type == nb::device::cuda::value || q.device_type == nb::device::cuda_managed::value) {
    memory = MemorySpace::kDevice;
  } else {
    fail(std::string(q.name) + ": expected a CPU or CUDA array, got " + device_text(q));
  }
  for (const auto* other : others) {
    const auto& a = *other;
    if (a && (a->device_type != q.device_type || a->device_id != q.device_id)) {
      fail(std::string(a->name) + ": expected an array on the same device as " + q.name + " (" + device_text(q) +
           "), got " + device_text(*a));
    }
  }
  return memory;
}

// Leading dims [0, n) merged into one (e.g. [B, q_len] into tokens): its size
// and its single stride. Size-1 dims carry no stride (frameworks report any
// value for them), so `fallback` is used when no dim is longer than 1.
// `merged` is false when the dims do not merge into one stride.
struct Merged {
  int64_t size, stride;
  bool merged = true;
};
inline Merged try_merge_leading(const Array& a, size_t n, int64_t fallback) {
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
      return {size, stride, false};
    }
    next = a.strides[i] * a.shape[i];
  }
  return {size, stride};
}
inline Merged merge_leading(const Array& a, size_t n, int64_t fallback) {
  const Merged all = try_merge_leading(a, n, fallback);
  if (!all.merged) {
    fail(std::string(a.name) + ": the leading dims of shape " + a.shape_text() +
         " cannot be flattened into tokens with one stride (make the array contiguous)");
  }
  return all;
}

// The tokens of a per-token array's leading dims [0, n): their count, the
// token stride and the request stride. A [B, q_len, ...] array (n = 2) whose
// two dims do not merge is a request view (docs/spec.md, section 1): token i
// of request b at b * request_stride + i * token_stride, read in place.
// Other arrays merge into one token stride (request stride 0).
struct Tokens {
  int64_t size, stride, request_stride;
};
inline Tokens tokens_of(const Array& a, size_t n, int64_t fallback) {
  const Merged all = try_merge_leading(a, n, fallback);
  if (!all.merged && n == 2) return {all.size, a.strides[1], a.strides[0]};
  const Merged flat = merge_leading(a, n, fallback);
  return {flat.size, flat.stride, 0};
}

// tokens_of with `views`; without, the leading dims must merge.
inline Tokens leading_of(const Array& a, size_t n, int64_t fallback, bool views) {
  if (views) return tokens_of(a, n, fallback);
  const Merged flat = merge_leading(a, n, fallback);
  return {flat.size, flat.stride, 0};
}

inline int64_t round_up(int64_t value, int64_t multiple) { return (value + multiple - 1) / multiple * multiple; }

// A [tokens..., H, dim] array (q, out; dim 512, or 192 for dsa_decode):
// tokens, token stride, head stride, and with `views` the request stride of
// a [B, q_len, H, dim] request view (else its leading dims must merge).
struct Rows {
  int64_t tokens, token_stride, head_stride, request_stride;
};
inline Rows rows_of(const Array& a, int64_t heads, int64_t dim = kHeadDim, bool views = false) {
  const size_t nd = a.ndim();
  const std::string h = std::to_string(heads), d = std::to_string(dim);
  if (nd < 2 || a.shape[nd - 1] != dim || a.shape[nd - 2] != heads) {
    fail(std::string(a.name) + ": expected shape [T, " + h + ", " + d + "] or [B, q_len, " + h + ", " + d +
         "], got " + a.shape_text());
  }
  if (a.strides[nd - 1] != 1) fail(std::string(a.name) + ": expected the " + d + " dims contiguous (last stride 1)");
  const int64_t head_stride = a.strides[nd - 2];
  const Tokens tokens = leading_of(a, nd - 2, round_up((heads - 1) * head_stride + dim, 16), views);
  return {tokens.size, tokens.stride, head_stride, tokens.request_stride};
}

// An int32 [rows..., W] table with contiguous columns (leading dims merged):
// its rows, width and row stride. `shape` names the expected shape in errors.
struct IndexTable {
  const int32_t* data;
  int32_t width;
  int64_t stride, rows;
  int64_t request_stride = 0;  // of a [B, q_len, W] request view (indices_of with views)
  int32_t* writable() const { return const_cast<int32_t*>(data); }  // for the converter's outputs
};
inline IndexTable table_of(const Array& a, const char* shape, bool views = false) {
  expect_kind(a, Kind::kInt32, "int32");
  if (a.ndim() < 2 || a.strides.back() != 1) {
    fail(std::string(a.name) + ": expected " + shape + " int32 with contiguous columns, got " + a.shape_text());
  }
  const int32_t width = static_cast<int32_t>(a.shape.back());
  const Tokens rows = leading_of(a, a.ndim() - 1, round_up(width, 4), views);
  return {static_cast<const int32_t*>(a.data), width, rows.stride, rows.size, rows.request_stride};
}

// A per-token int32 table ([T, W] or [B, q_len, W]): one row per token.
// `views`: a [B, q_len, W] request view is read in place (request_stride).
inline IndexTable indices_of(const Array& a, int64_t tokens, bool views = false) {
  const IndexTable table = table_of(a, "[T, W] (or [B, q_len, W])", views);
  if (table.rows != tokens) {
    fail(std::string(a.name) + ": expected " + std::to_string(tokens) + " rows (one per token), got shape " +
         a.shape_text());
  }
  return table;
}

// A contiguous [count] int32/float32 array (lens, seq_lens, sinks...), any
// leading shape (e.g. lens as [B, q_len]); expected_count < 0: any count.
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

// Per-token lengths: int32 [T] with any token stride (0: one value for all),
// or a [B, q_len] request view (FlashMLA's [b] lengths expanded to [b, s_q]
// have strides [1, 0]): data, token stride, request stride.
struct Lens {
  const int32_t* data;
  int64_t token_stride, request_stride;
};
inline Lens lens_of(const Array& a, int64_t tokens) {
  expect_kind(a, Kind::kInt32, "int32");
  if (a.ndim() < 1 || a.ndim() > 2) {
    fail(std::string(a.name) + ": expected [T] or [B, q_len] int32, got shape " + a.shape_text());
  }
  const Tokens all = tokens_of(a, a.ndim(), 1);
  if (all.size != tokens) {
    fail(std::string(a.name) + ": expected " + std::to_string(tokens) + " elements, got shape " + a.shape_text());
  }
  return {static_cast<const int32_t*>(a.data), all.stride, all.request_stride};
}

// lse: float32 [tokens..., H] with contiguous heads (or a [B, q_len, H]
// request view): data, token stride, request stride.
struct Lse {
  float* data;
  int64_t token_stride, request_stride;
};
inline Lse lse_of(const Array& a, int64_t tokens, int64_t heads) {
  expect_kind(a, Kind::kFloat32, "float32");
  if (a.ndim() < 2 || a.shape.back() != heads || a.strides.back() != 1) {
    fail("lse: expected [T, " + std::to_string(heads) + "] float32 with contiguous heads, got " + a.shape_text());
  }
  const Tokens rows = tokens_of(a, a.ndim() - 1, heads);
  if (rows.size != tokens) fail("lse: expected " + std::to_string(tokens) + " tokens, got " + a.shape_text());
  return {static_cast<float*>(a.data), rows.stride, rows.request_stride};
}

// A pool of 512-element rows: [rows, 512], [pages, page_size, 512], or 4-D
// NHD/HND with one KV head.
inline KvPool pool_of(const Array& a, bool hnd) {
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

// Each operation's bindings (one translation unit each).
void add_dsv4_decode(nb::module_& m);
void add_dsv4_decode_packed(nb::module_& m);
void add_dsv4_decode_hca(nb::module_& m);
void add_dsa_decode(nb::module_& m);

}  // namespace sparse_decode::binding
