// SPARSE_DECODE_HD: a rule that the host and the kernels both run (the
// *_rules.h headers), so that the CPU path and the GPU path agree bit for
// bit; a plain inline function where the compiler is not nvcc.
#pragma once

#if defined(__CUDACC__)
#define SPARSE_DECODE_HD __host__ __device__ __forceinline__
#else
#define SPARSE_DECODE_HD inline
#endif
