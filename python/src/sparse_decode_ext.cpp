// sparse_decode._ext: the nanobind module under the Python package.
//
// It does one thing: turn DLPack arrays (NumPy, PyTorch, CuPy, JAX...) into
// the library's argument structs and call the C++ API, one source file per
// operation (dsv4_decode_binding.cpp, dsv4_decode_packed_binding.cpp,
// dsv4_decode_hca_binding.cpp, dsa_decode_binding.cpp, merge_binding.cpp)
// over the helpers of binding.h. Errors come back as Python exceptions carrying
// the library's message: ValueError for kInvalidArgument (and for arrays that
// do not fit an argument struct), NotImplementedError for kNotSupported,
// RuntimeError for kCudaError.
#include "binding.h"

namespace nb = nanobind;
using namespace sparse_decode;

namespace sparse_decode::binding {
void add_merge_states(nb::module_& m);  // merge_binding.cpp
}  // namespace sparse_decode::binding

NB_MODULE(_ext, m) {
  m.doc() = "DLPack binding of the sparse_decode C++ API (use the sparse_decode package, not this module)";
  m.attr("HEAD_DIM") = kHeadDim;
  m.attr("SWA_COLUMNS") = kSwaColumns;

  binding::add_dsv4_decode(m);
  binding::add_dsv4_decode_packed(m);
  binding::add_dsv4_decode_hca(m);
  binding::add_dsa_decode(m);
  binding::add_merge_states(m);

  // Whether an object converts to an argument array, read-only or writable:
  // a failed call's TypeError is traced to the argument that caused it
  // (sparse_decode/_arguments.py), so that the caller sees its name.
  m.def("_is_array", [](const binding::InArray&) { return true; });
  m.def("_is_writable_array", [](const binding::OutArray&) { return true; });

  // Lets the tests check the Status -> exception mapping for codes that a
  // machine without a GPU cannot provoke (kNotSupported, kCudaError).
  m.def("_raise_status",
        [](int code, const std::string& message) { binding::check(Status(static_cast<StatusCode>(code), message)); });
}
