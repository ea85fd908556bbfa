// Small helpers shared by the argument validation of every operation.
#pragma once

#include <cstdint>
#include <sstream>

#include "sparse_decode/status.h"

namespace sparse_decode::validation {

inline bool aligned16(const void* pointer) { return reinterpret_cast<uintptr_t>(pointer) % 16 == 0; }
inline bool aligned4(const void* pointer) { return reinterpret_cast<uintptr_t>(pointer) % 4 == 0; }

// Builds "argument: expected ..., got ..." messages.
template <typename... Parts>
Status invalid(const Parts&... parts) {
  std::ostringstream message;
  (message << ... << parts);
  return Status::InvalidArgument(message.str());
}

}  // namespace sparse_decode::validation
