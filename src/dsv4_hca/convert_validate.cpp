// Host-side validation of Dsv4HcaConvertArgs: every argument that can be
// checked without reading the table's values, in the order of FlashInfer's
// checks where it has them (q_len, page size, pools, shapes). The output
// layout rules are the decode's (Dsv4HcaDecodeArgs reads these arrays).
#include <climits>
#include <cstdint>

#include "common/validation.h"
#include "dsv4_hca/convert_rules.h"
#include "sparse_decode/dsv4_hca_convert.h"

namespace sparse_decode::dsv4_hca {
namespace {

using validation::aligned16;
using validation::aligned4;
using validation::invalid;

// An int32 array: non-null, 16-byte aligned when `rows16` (read or written
// 16 bytes at a time by the decode), else 4-byte aligned.
Status check_array(const char* name, const void* data, bool rows16 = false) {
  if (data == nullptr) return invalid(name, ": expected a non-null pointer");
  if (rows16 ? !aligned16(data) : !aligned4(data)) {
    return invalid(name, ": expected a ", rows16 ? 16 : 4, "-byte aligned pointer");
  }
  return Status::Ok();
}

Status check_requests(const Dsv4HcaConvertArgs& args) {
  if (args.memory != MemorySpace::kDevice && args.memory != MemorySpace::kHost) {
    return invalid("memory: expected kDevice or kHost, got ", static_cast<int>(args.memory));
  }
  if (args.cum_seq_lens_q != nullptr) {
    return invalid(
        "cum_seq_lens_q: expected null (FlashInfer's HCA metadata has B * q_len rows: give a uniform q_len)");
  }
  if (args.q_len < 1) return invalid("q_len: expected >= 1, got ", args.q_len);
  if (args.num_requests < 1) {
    return invalid("num_requests: expected >= 1 (seq_lens is not empty), got ", args.num_requests);
  }
  const int64_t rows = int64_t{args.num_requests} * args.q_len;
  if (args.num_tokens != rows) {
    return invalid("num_tokens: expected num_requests * q_len = ", rows, ", got ", args.num_tokens);
  }
  // The report names a token in 32 bits.
  if (args.num_tokens > INT32_MAX) return invalid("num_tokens: expected <= ", INT32_MAX, ", got ", args.num_tokens);
  return Status::Ok();
}

Status check_geometry(const Dsv4HcaConvertArgs& args) {
  if (!convert_page_size_ok(args.page_size)) {
    return invalid("page_size: expected one of 2, 4, 8, 16, 32, 64, 128 (greater than 1, dividing 128), got ",
                   args.page_size);
  }
  if (args.swa_pool_rows < 1) return invalid("swa_pool_rows: expected >= 1, got ", args.swa_pool_rows);
  if (args.compressed_pool_pages < 1) {
    return invalid("compressed_pool_pages: expected >= 1, got ", args.compressed_pool_pages);
  }
  if (args.width < kSwaColumns || args.width % 4 != 0) {
    return invalid("width: expected a multiple of 4 that is >= 128, got ", args.width);
  }
  if (args.max_pages < 1) return invalid("max_pages: expected >= 1, got ", args.max_pages);
  return Status::Ok();
}

Status check_arrays(const Dsv4HcaConvertArgs& args) {
  if (Status s = check_array("indices", args.indices); !s.ok()) return s;
  if (args.indices_stride < args.width) {
    return invalid("indices_stride: expected >= width = ", args.width, ", got ", args.indices_stride);
  }
  if (Status s = check_array("lens", args.lens); !s.ok()) return s;
  if (Status s = check_array("seq_lens", args.seq_lens); !s.ok()) return s;
  if (Status s = check_array("swa_rows", args.swa_rows, true); !s.ok()) return s;
  if (args.swa_rows_stride < kSwaColumns || args.swa_rows_stride % 4 != 0) {
    return invalid("swa_rows_stride: expected a multiple of 4 that is >= 128, got ", args.swa_rows_stride);
  }
  if (Status s = check_array("swa_lens", args.swa_lens); !s.ok()) return s;
  if (Status s = check_array("block_table", args.block_table); !s.ok()) return s;
  if (args.block_table_stride < args.max_pages) {
    return invalid("block_table_stride: expected >= max_pages = ", args.max_pages, ", got ",
                   args.block_table_stride);
  }
  if (Status s = check_array("hca_seq_lens", args.hca_seq_lens); !s.ok()) return s;
  if (args.memory == MemorySpace::kDevice && args.error == nullptr) {
    return invalid("error: expected a non-null pointer (", kConvertErrorWords,
                   " int32 of device memory: the device conversion reports the table's values there)");
  }
  if (!aligned4(args.error)) return invalid("error: expected a 4-byte aligned pointer");
  return Status::Ok();
}

}  // namespace
}  // namespace sparse_decode::dsv4_hca

namespace sparse_decode {

Status validate(const Dsv4HcaConvertArgs& args) {
  if (Status s = dsv4_hca::check_requests(args); !s.ok()) return s;
  if (Status s = dsv4_hca::check_geometry(args); !s.ok()) return s;
  return dsv4_hca::check_arrays(args);
}

}  // namespace sparse_decode
