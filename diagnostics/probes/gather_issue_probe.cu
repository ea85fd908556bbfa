// gather-issue-probe: how fast can a CTA gather scattered 512-byte rows into
// shared memory, and what does issuing the copies cost the warps that do the
// math (docs/kernels/large_batch.md, "Sixth session")? Each CTA walks chunks
// of 64 random rows of a 2 GiB pool into two 64-row tiles, double-buffered,
// as the stream kernel does, with a stand-in for the math: every math warp
// reads its rows of the landed tile and then spins `math_cycles`. Methods:
//
//   bulk_inline     the math warps issue one cp.async.bulk a row (lanes 0-7 of each warp)
//   bulk_producer1  one extra warp issues all 64 bulk copies; full/empty mbarriers
//   bulk_producer4  an extra warpgroup, 16 bulk copies a warp
//   ldgsts_inline   the math warps copy rows with 16-byte cp.async (one row a warp instruction)
//   ldgsts_producer4 an extra warpgroup copies by cp.async, arriving through cp.async.mbarrier.arrive
//   ldg_inline      the math warps load the next chunk into registers before the math, store after
//
// and a plain gather (every thread loads 16 bytes of a row, full occupancy)
// over the same rows as the bandwidth reference. Prints µs and GB/s each.
//
//   gather-issue-probe [chunks per CTA (48)] [math cycles list (0,2400)]
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#include "common/ptx/copy.cuh"
#include "common/ptx/sync.cuh"

namespace {

namespace ptx = sparse_decode::ptx;

constexpr int kRowBytes = 512;
constexpr int kTileRowBytes = kRowBytes + 16;
constexpr int kChunkRows = 64;
constexpr int kMathWarps = 8;
constexpr int kMathThreads = kMathWarps * 32;

enum Method { kBulkInline, kBulkProducer1, kBulkProducer4, kLdgstsInline, kLdgstsProducer4, kLdgInline, kMethods };
const char* const kMethodNames[kMethods] = {"bulk_inline",      "bulk_producer1", "bulk_producer4",
                                            "ldgsts_inline",    "ldgsts_producer4", "ldg_inline"};

constexpr int producer_warps(int method) {
  return method == kBulkProducer1 ? 1 : (method == kBulkProducer4 || method == kLdgstsProducer4) ? 4 : 0;
}

struct ProbeSmem {
  uint8_t tile[2][kChunkRows][kTileRowBytes];
  uint64_t full[2];
  uint64_t empty[2];
};

// Arrives on `barrier` once this thread's earlier cp.async copies have landed.
__device__ __forceinline__ void cp_async_arrive_noinc(uint32_t barrier) {
  asm volatile("cp.async.mbarrier.arrive.noinc.shared::cta.b64 [%0];\n" ::"r"(barrier) : "memory");
}
__device__ __forceinline__ uint4 ldg_nc_v4(const void* src) {
  uint4 v;
  asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
               : "l"(src));
  return v;
}

__device__ __forceinline__ void spin(long long cycles) {
  const long long start = clock64();
  while (clock64() - start < cycles) {
  }
}

// The math stand-in: each math thread reads 16 bytes of row (warp * 8 + lane / 4), then spins.
__device__ __forceinline__ uint32_t consume(const ProbeSmem& s, int buffer, long long math_cycles) {
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const uint4 v = *reinterpret_cast<const uint4*>(&s.tile[buffer][warp * 8 + lane / 4][(lane % 4) * 16]);
  spin(math_cycles);
  return v.x ^ v.y ^ v.z ^ v.w;
}

// Row `row` of chunk `chunk` of this CTA (each CTA walks `chunks` chunks of its own rows).
__device__ __forceinline__ const uint8_t* row_source(const uint8_t* pool, const int32_t* indices, int chunks, int chunk,
                                                     int row) {
  return pool + int64_t{indices[(int64_t{blockIdx.x} * chunks + chunk) * kChunkRows + row]} * kRowBytes;
}

// Bulk copies of rows [first, first + count) of a chunk by one warp; lane 0 expects their bytes.
__device__ __forceinline__ void bulk_rows(ProbeSmem& s, const uint8_t* pool, const int32_t* indices, int chunks,
                                          int chunk, int buffer, int first, int count) {
  const int lane = threadIdx.x % 32;
  const uint32_t barrier = ptx::smem_address(&s.full[buffer]);
  if (lane == 0) ptx::mbarrier_arrive_expect_tx(barrier, count * kRowBytes);
  __syncwarp();
  for (int row = first + lane; row < first + count; row += 32) {
    const uint8_t* src = row_source(pool, indices, chunks, chunk, row);
    ptx::cp_async_bulk_g2s(ptx::smem_address(&s.tile[buffer][row][0]), src, kRowBytes, barrier);
  }
}

// 16-byte cp.async of rows [first, first + count) by one warp, one row a warp instruction.
__device__ __forceinline__ void ldgsts_rows(ProbeSmem& s, const uint8_t* pool, const int32_t* indices, int chunks,
                                            int chunk, int buffer, int first, int count) {
  const int lane = threadIdx.x % 32;
  for (int row = first; row < first + count; ++row) {
    const uint8_t* src = row_source(pool, indices, chunks, chunk, row) + lane * 16;
    ptx::cp_async_16(ptx::smem_address(&s.tile[buffer][row][lane * 16]), src, 16);
  }
}

template <int kMethod>
__global__ void __launch_bounds__(kMathThreads + 32 * producer_warps(kMethod), 2)
    gather_probe(const uint8_t* pool, const int32_t* indices, int chunks, long long math_cycles, uint32_t* sink) {
  extern __shared__ __align__(128) uint8_t smem_bytes[];
  ProbeSmem& s = *reinterpret_cast<ProbeSmem*>(smem_bytes);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  constexpr int kProducers = producer_warps(kMethod);
  if (threadIdx.x < 2) {
    ptx::mbarrier_init(ptx::smem_address(&s.full[threadIdx.x]),
                       kMethod == kLdgstsProducer4 ? 32 * kProducers : kProducers > 0 ? kProducers : kMathWarps);
    ptx::mbarrier_init(ptx::smem_address(&s.empty[threadIdx.x]), kMathWarps);
  }
  __syncthreads();
  uint32_t acc = 0;
  if constexpr (kProducers > 0) {
    if (warp >= kMathWarps) {  // producers
      const int producer = warp - kMathWarps;
      constexpr int kRowsEach = kChunkRows / kProducers;
      for (int i = 0; i < chunks; ++i) {
        const int buffer = i % 2;
        if (i >= 2) ptx::mbarrier_wait_parity(ptx::smem_address(&s.empty[buffer]), (i / 2 - 1) & 1);
        if constexpr (kMethod == kLdgstsProducer4) {
          ldgsts_rows(s, pool, indices, chunks, i, buffer, producer * kRowsEach, kRowsEach);
          cp_async_arrive_noinc(ptx::smem_address(&s.full[buffer]));
        } else {
          bulk_rows(s, pool, indices, chunks, i, buffer, producer * kRowsEach, kRowsEach);
        }
      }
      return;
    }
    for (int i = 0; i < chunks; ++i) {
      const int buffer = i % 2;
      ptx::mbarrier_wait_parity(ptx::smem_address(&s.full[buffer]), (i / 2) & 1);
      acc ^= consume(s, buffer, math_cycles);
      ptx::fence_proxy_async_shared();  // the reads before the next copies into the tile
      __syncwarp();
      if (lane == 0) ptx::mbarrier_arrive(ptx::smem_address(&s.empty[buffer]));
    }
  } else if constexpr (kMethod == kBulkInline) {
    // As the stream kernel: lanes 0-7 of warp w copy rows 8w..8w+7.
    bulk_rows(s, pool, indices, chunks, 0, 0, warp * 8, 8);
    for (int i = 0; i < chunks; ++i) {
      const int buffer = i % 2;
      ptx::mbarrier_wait_parity(ptx::smem_address(&s.full[buffer]), (i / 2) & 1);
      ptx::fence_proxy_async_shared();
      __syncthreads();  // every warp is done with the other tile
      if (i + 1 < chunks) bulk_rows(s, pool, indices, chunks, i + 1, buffer ^ 1, warp * 8, 8);
      acc ^= consume(s, buffer, math_cycles);
    }
  } else if constexpr (kMethod == kLdgstsInline) {
    ldgsts_rows(s, pool, indices, chunks, 0, 0, warp * 8, 8);
    ptx::cp_async_commit();
    for (int i = 0; i < chunks; ++i) {
      const int buffer = i % 2;
      ptx::cp_async_wait_group<0>();
      __syncthreads();
      if (i + 1 < chunks) ldgsts_rows(s, pool, indices, chunks, i + 1, buffer ^ 1, warp * 8, 8);
      ptx::cp_async_commit();
      acc ^= consume(s, buffer, math_cycles);
    }
  } else {  // kLdgInline: rows of the next chunk in registers during the math
    uint4 staged[8];
    for (int r = 0; r < 8; ++r) {
      staged[r] = ldg_nc_v4(row_source(pool, indices, chunks, 0, warp * 8 + r) + lane * 16);
    }
    for (int i = 0; i < chunks; ++i) {
      const int buffer = i % 2;
      for (int r = 0; r < 8; ++r) *reinterpret_cast<uint4*>(&s.tile[buffer][warp * 8 + r][lane * 16]) = staged[r];
      __syncthreads();
      if (i + 1 < chunks) {
        for (int r = 0; r < 8; ++r) {
          staged[r] = ldg_nc_v4(row_source(pool, indices, chunks, i + 1, warp * 8 + r) + lane * 16);
        }
      }
      acc ^= consume(s, buffer, math_cycles);
      __syncthreads();  // the tile is rewritten at the next store (two tiles would need no barrier; one is simpler)
    }
  }
  if (acc == 0x9e3779b9u) sink[blockIdx.x] = acc;  // keeps the loads alive
}

// The bandwidth reference: one warp a row, 16 bytes a lane, every SM full.
__global__ void __launch_bounds__(256) plain_gather(const uint8_t* pool, const int32_t* indices, int64_t rows,
                                                    uint32_t* sink) {
  const int lane = threadIdx.x % 32;
  uint32_t acc = 0;
  for (int64_t row = (int64_t{blockIdx.x} * blockDim.x + threadIdx.x) / 32; row < rows;
       row += int64_t{gridDim.x} * blockDim.x / 32) {
    const uint4 v = ldg_nc_v4(pool + int64_t{indices[row]} * kRowBytes + lane * 16);
    acc ^= v.x ^ v.y ^ v.z ^ v.w;
  }
  if (acc == 0x9e3779b9u) sink[blockIdx.x] = acc;
}

__global__ void fill_pattern(uint32_t* data, int64_t words) {
  for (int64_t i = int64_t{blockIdx.x} * blockDim.x + threadIdx.x; i < words; i += int64_t{gridDim.x} * blockDim.x) {
    data[i] = static_cast<uint32_t>(i * 2654435761u) | 0x01010101u;
  }
}

#define PROBE_CHECK(call)                                                                 \
  do {                                                                                    \
    cudaError_t e = (call);                                                               \
    if (e != cudaSuccess) {                                                               \
      std::fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__, #call, cudaGetErrorString(e)); \
      std::exit(1);                                                                       \
    }                                                                                     \
  } while (0)

struct Timing {
  cudaEvent_t start, stop;
  uint8_t* flush;
  size_t flush_bytes;
  template <class Launch>
  float median_us(Launch&& launch) {
    std::vector<float> runs;
    for (int rep = 0; rep < 7; ++rep) {
      PROBE_CHECK(cudaMemsetAsync(flush, rep, flush_bytes));  // L2 out, outside the timed region
      PROBE_CHECK(cudaEventRecord(start));
      launch();
      PROBE_CHECK(cudaEventRecord(stop));
      PROBE_CHECK(cudaEventSynchronize(stop));
      float ms = 0;
      PROBE_CHECK(cudaEventElapsedTime(&ms, start, stop));
      runs.push_back(ms * 1000.0f);
    }
    std::sort(runs.begin(), runs.end());
    return runs[runs.size() / 2];
  }
};

template <int kMethod>
void run_method(Timing& timing, int ctas, int chunks, long long math_cycles, const uint8_t* pool,
                const int32_t* indices, uint32_t* sink, double bytes) {
  const int threads = kMathThreads + 32 * producer_warps(kMethod);
  const size_t smem = sizeof(ProbeSmem);
  PROBE_CHECK(cudaFuncSetAttribute(gather_probe<kMethod>, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
  int per_sm = 0;
  PROBE_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, gather_probe<kMethod>, threads, smem));
  const float us = timing.median_us([&] {
    gather_probe<kMethod><<<ctas, threads, smem>>>(pool, indices, chunks, math_cycles, sink);
  });
  PROBE_CHECK(cudaGetLastError());
  const double chunk_cycles_per_cta = us * 1e-6 * 1.98e9 / chunks;  // at the boost clock
  std::printf("%-17s math %5lld cycles: %8.1f us %7.0f GB/s  (%d CTAs/SM, ~%5.0f cycles a chunk a CTA)\n",
              kMethodNames[kMethod], math_cycles, us, bytes / (us * 1e3), per_sm, chunk_cycles_per_cta);
}

}  // namespace

int main(int argc, char** argv) {
  const int chunks = argc > 1 ? std::atoi(argv[1]) : 48;
  std::vector<long long> math_list;
  {
    std::string list = argc > 2 ? argv[2] : "0,2400";
    for (size_t at = 0; at <= list.size();) {
      size_t comma = list.find(',', at);
      if (comma == std::string::npos) comma = list.size();
      math_list.push_back(std::atoll(list.substr(at, comma - at).c_str()));
      at = comma + 1;
    }
  }
  cudaDeviceProp prop{};
  PROBE_CHECK(cudaGetDeviceProperties(&prop, 0));
  const int ctas = 2 * prop.multiProcessorCount;
  const int64_t pool_rows = (int64_t{2} << 30) / kRowBytes;
  const int64_t rows = int64_t{ctas} * chunks * kChunkRows;
  std::mt19937_64 rng(20261130);
  std::vector<int32_t> host_indices(rows);
  for (auto& index : host_indices) index = static_cast<int32_t>(rng() % pool_rows);
  uint8_t* pool = nullptr;
  int32_t* indices = nullptr;
  uint32_t* sink = nullptr;
  Timing timing{};
  timing.flush_bytes = size_t{256} << 20;
  PROBE_CHECK(cudaMalloc(&pool, pool_rows * kRowBytes));
  PROBE_CHECK(cudaMalloc(&indices, rows * sizeof(int32_t)));
  PROBE_CHECK(cudaMalloc(&sink, 1 << 20));
  PROBE_CHECK(cudaMalloc(&timing.flush, timing.flush_bytes));
  PROBE_CHECK(cudaEventCreate(&timing.start));
  PROBE_CHECK(cudaEventCreate(&timing.stop));
  fill_pattern<<<1024, 256>>>(reinterpret_cast<uint32_t*>(pool), pool_rows * kRowBytes / 4);
  PROBE_CHECK(cudaMemcpy(indices, host_indices.data(), rows * sizeof(int32_t), cudaMemcpyHostToDevice));
  const double bytes = double(rows) * kRowBytes;
  std::printf("%s, %d SMs: %d CTAs x %d chunks x %d rows of %d B = %.0f MB from a 2 GiB pool\n", prop.name,
              prop.multiProcessorCount, ctas, chunks, kChunkRows, kRowBytes, bytes / 1e6);
  const float gather_us = timing.median_us([&] {
    plain_gather<<<prop.multiProcessorCount * 8, 256>>>(pool, indices, rows, sink);
  });
  std::printf("%-17s                  : %8.1f us %7.0f GB/s\n", "plain_gather", gather_us, bytes / (gather_us * 1e3));
  for (long long math : math_list) {
    run_method<kBulkInline>(timing, ctas, chunks, math, pool, indices, sink, bytes);
    run_method<kBulkProducer1>(timing, ctas, chunks, math, pool, indices, sink, bytes);
    run_method<kBulkProducer4>(timing, ctas, chunks, math, pool, indices, sink, bytes);
    run_method<kLdgstsInline>(timing, ctas, chunks, math, pool, indices, sink, bytes);
    run_method<kLdgstsProducer4>(timing, ctas, chunks, math, pool, indices, sink, bytes);
    run_method<kLdgInline>(timing, ctas, chunks, math, pool, indices, sink, bytes);
  }
  PROBE_CHECK(cudaDeviceSynchronize());
  return 0;
}
