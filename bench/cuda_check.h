// CUDA_CHECK(call): throws std::runtime_error naming the call and the CUDA
// error when `call` fails, so every runtime call of the harness is checked.
#pragma once

#include <cuda_runtime_api.h>

#include "testing/device_buffer.h"

#define SPARSE_DECODE_CUDA_CHECK(call) \
  ::sparse_decode::testing::check_cuda(static_cast<int>(call), #call)
