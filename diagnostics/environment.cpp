// The environment switches of a diagnostic build (src/common/instrument.h),
// read once a process. Compiled into the library only with
// SPARSE_DECODE_DIAGNOSTICS.
#include <cstdlib>

#include "common/instrument.h"

namespace sparse_decode::instrument {
namespace {

int32_t read_integer(const char* name) {
  const char* value = std::getenv(name);
  return value ? static_cast<int32_t>(std::atoi(value)) : 0;
}

}  // namespace

int32_t skip_stages() {
  static const int32_t value = read_integer("SPARSE_DECODE_SKIP_STAGES");
  return value;
}

int32_t deep_kernel() {
  static const int32_t value = read_integer("SPARSE_DECODE_DEEP");
  return value;
}

}  // namespace sparse_decode::instrument
