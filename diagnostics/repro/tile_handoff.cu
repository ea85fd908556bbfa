// repro-tile-handoff: the stream kernels' KV-tile handoff alone, for
// compute-sanitizer racecheck (docs/memory_model.md). A producer warp fills
// two tiles in turn, chunk after chunk: masked rows by st.shared zeros
// (generic proxy), the others by cp.async.bulk completing on the tile's
// mbarrier (async proxy). Four consumer warps wait on that mbarrier, read
// the tile with ldmatrix and release it. The orderings are those of the PTX
// memory model (below), so the checksum is right on every run; what
// racecheck reports about them is the question.
//
//   repro-tile-handoff <variant> [chunks]      exit 0: every checksum right
//
// variants (how a consumer releases a tile, how the producer refills it):
//   named        bar.arrive / bar.sync on the tile's hardware barrier, the
//                producer's proxy fence after its bar.sync (the library's form)
//   named-fenced the same, and each consumer thread fences
//                (fence.proxy.async::generic.release.sync_restrict::shared::cta.cluster)
//                before its bar.arrive: the fence the audit proposes
//   mbarrier     an "empty" mbarrier per tile (mbarrier.arrive.release by the
//                consumers, try_wait.acquire by the producer): CUTLASS's PipelineTmaAsync
//   syncthreads  every thread at bar.sync 0 between chunks (no handoff barrier)
//   generic      the named handoff with st.shared copies instead of bulk
//                copies: no async proxy at all
//   named-generic  generic with the fill published by a named barrier too
//                (the producer's bar.arrive, the consumers' bar.sync): no
//                mbarrier either, the P V warps' handoff of probabilities
//   plain        st.shared copies and bar.sync 0 before and after each fill:
//                no mbarrier, no named barrier, no async proxy
//   plain-mbarrier  plain, and the tile's mbarrier arrived on after each fill
//                and waited on after the second bar.sync (redundant: only the
//                mbarrier differs from plain)
#include <cuda_runtime.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

namespace {

constexpr int kRows = 32, kRowBytes = 512, kTiles = 2;
constexpr int kConsumers = 128, kThreads = kConsumers + 32;
constexpr int kTileFree = 2;  // hardware barriers 2, 3: tile 0, 1 (as kTileFreeBarrier)
constexpr int kTileFull = 4;  // hardware barriers 4, 5: tile 0, 1 filled (named-generic)

enum Variant { kNamed, kNamedFenced, kMbarrier, kSyncthreads, kGeneric, kPlain, kPlainMbarrier, kNamedGeneric };
constexpr int kVariants = 8;

struct Smem {
  alignas(128) uint8_t tile[kTiles][kRows][kRowBytes];
  uint64_t full[kTiles];   // rows landed
  uint64_t empty[kTiles];  // mbarrier variant: consumers done with the tile
};

__device__ __forceinline__ uint32_t smem(const void* p) { return static_cast<uint32_t>(__cvta_generic_to_shared(p)); }

__device__ __forceinline__ void wait(uint32_t barrier, uint32_t parity) {
  uint32_t done = 0;
  while (!done) {
    asm volatile(
        "{ .reg .pred p;\n mbarrier.try_wait.parity.acquire.cta.shared::cta.b64 p, [%1], %2;\n selp.u32 %0, 1, 0, p; }\n"
        : "=r"(done)
        : "r"(barrier), "r"(parity)
        : "memory");
  }
}

// Row r of chunk c: masked (zero-filled) when (r + c) % 5 == 0, else copied
// from row (r + 3c) % source_rows of the source.
__device__ __forceinline__ bool masked(int row, int chunk) { return (row + chunk) % 5 == 0; }

__global__ void __launch_bounds__(kThreads) handoff(const uint8_t* __restrict__ source, int source_rows, int chunks,
                                                    int variant, uint32_t* __restrict__ sums) {
  extern __shared__ __align__(128) uint8_t smem_bytes[];
  Smem& s = *reinterpret_cast<Smem*>(smem_bytes);
  const int tid = threadIdx.x, lane = tid % 32;
  const bool plain = variant == kPlain || variant == kPlainMbarrier;
  const bool cta_barriers = variant == kSyncthreads || plain;  // bar.sync 0 between chunks
  if (tid == 0) {
    for (int t = 0; t < kTiles; ++t) {
      asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(smem(&s.full[t])), "r"(1) : "memory");
      asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(smem(&s.empty[t])), "r"(kConsumers) : "memory");
    }
    asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
  }
  __syncthreads();

  if (tid >= kConsumers) {  // the producer warp
    for (int c = 0; c < chunks; ++c) {
      const int t = c % kTiles;
      if (cta_barriers) __syncthreads();  // every consumer is done with chunk c - 1
      if (c >= kTiles && !plain) {
        if (variant == kMbarrier) {
          wait(smem(&s.empty[t]), (c / kTiles - 1) & 1);
        } else if (variant != kSyncthreads) {
          asm volatile("bar.sync %0, %1;\n" ::"r"(kTileFree + t), "r"(kThreads) : "memory");
        }
        // This thread's zero fills of the tile's last use before the bulk copies into it.
        asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
      }
      // Zero fills (every lane 16 bytes of each masked row), published by the arrival.
      for (int r = 0; r < kRows; ++r) {
        if (!masked(r, c)) continue;
        asm volatile("st.shared.v4.b32 [%0], {%1, %1, %1, %1};\n" ::"r"(smem(&s.tile[t][r][lane * 16])), "r"(0)
                     : "memory");
      }
      const int r = lane;  // one row a lane
      const uint8_t* src = source + ((r + 3 * c) % source_rows) * kRowBytes;
      if (variant == kGeneric || variant == kNamedGeneric || plain) {
        if (!masked(r, c)) {
          for (int b = 0; b < kRowBytes; b += 16) {
            *reinterpret_cast<uint4*>(&s.tile[t][r][b]) = *reinterpret_cast<const uint4*>(src + b);
          }
        }
        if (plain) {
          if (variant == kPlainMbarrier && lane == 0) {
            asm volatile("mbarrier.arrive.release.cta.shared::cta.b64 _, [%0];\n" ::"r"(smem(&s.full[t])) : "memory");
          }
          __syncthreads();  // the tile is filled
          continue;
        }
        __syncwarp();
        if (variant == kNamedGeneric) {
          asm volatile("bar.arrive %0, %1;\n" ::"r"(kTileFull + t), "r"(kThreads) : "memory");
        } else if (lane == 0) {
          asm volatile("mbarrier.arrive.release.cta.shared::cta.b64 _, [%0];\n" ::"r"(smem(&s.full[t])) : "memory");
        }
        continue;
      }
      uint32_t copied = 0;
      for (int row = 0; row < kRows; ++row) copied += !masked(row, c);
      __syncwarp();  // the zeros before the arrival
      if (lane == 0) {
        asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(smem(&s.full[t])),
                     "r"(copied * kRowBytes)
                     : "memory");
      }
      __syncwarp();  // the expected bytes before any copy completes
      if (!masked(r, c)) {
        asm volatile(
            "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];\n" ::"r"(
                smem(&s.tile[t][r][0])),
            "l"(src), "r"(kRowBytes), "r"(smem(&s.full[t]))
            : "memory");
      }
    }
    return;
  }

  // Consumers: warp w reads rows 8w..8w+7 with one ldmatrix.x4 a 64-byte column block.
  const int warp = tid / 32;
  uint32_t sum = 0;
  for (int c = 0; c < chunks; ++c) {
    const int t = c % kTiles;
    if (cta_barriers) __syncthreads();  // done with chunk c - 1: the producer may refill
    if (plain) {
      __syncthreads();  // the producer filled the tile
      if (variant == kPlainMbarrier) wait(smem(&s.full[t]), (c / kTiles) & 1);
    } else if (variant == kNamedGeneric) {
      asm volatile("bar.sync %0, %1;\n" ::"r"(kTileFull + t), "r"(kThreads) : "memory");
    } else {
      wait(smem(&s.full[t]), (c / kTiles) & 1);
    }
    for (int block = 0; block < kRowBytes / 16; block += 4) {
      uint32_t v[4];
      const uint32_t address = smem(&s.tile[t][warp * 8 + lane % 8][(block + lane / 8) * 16]);
      asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                   : "=r"(v[0]), "=r"(v[1]), "=r"(v[2]), "=r"(v[3])
                   : "r"(address));
      sum += v[0] + 3 * v[1] + 5 * v[2] + 7 * v[3];
    }
    if (c + kTiles < chunks) {
      if (variant == kMbarrier) {
        asm volatile("mbarrier.arrive.release.cta.shared::cta.b64 _, [%0];\n" ::"r"(smem(&s.empty[t])) : "memory");
      } else if (!cta_barriers) {
        if (variant == kNamedFenced) {
          asm volatile("fence.proxy.async::generic.release.sync_restrict::shared::cta.cluster;\n" ::: "memory");
        }
        asm volatile("bar.arrive %0, %1;\n" ::"r"(kTileFree + t), "r"(kThreads) : "memory");
      }
    }
  }
  sums[blockIdx.x * kConsumers + tid] = sum;
}

// The consumers' sums, computed on the host from the same rule.
std::vector<uint32_t> expected_sums(const std::vector<uint8_t>& source, int source_rows, int chunks, int blocks) {
  std::vector<uint32_t> sums(static_cast<size_t>(blocks) * kConsumers);
  for (int tid = 0; tid < kConsumers; ++tid) {
    const int warp = tid / 32, lane = tid % 32;
    uint32_t sum = 0;
    for (int c = 0; c < chunks; ++c) {
      for (int block = 0; block < kRowBytes / 16; block += 4) {
        // ldmatrix.x4: matrix m (of lanes 8m..8m+7's addresses) gives this
        // lane row lane / 4, bytes 4 (lane % 4) .. +3 of that 16-byte row.
        uint32_t v[4];
        for (int m = 0; m < 4; ++m) {
          const int row = warp * 8 + lane / 4;
          const int byte = (block + m) * 16 + 4 * (lane % 4);
          uint32_t word = 0;
          if (!((row + c) % 5 == 0)) {
            std::memcpy(&word, &source[static_cast<size_t>((row + 3 * c) % source_rows) * kRowBytes + byte], 4);
          }
          v[m] = word;
        }
        sum += v[0] + 3 * v[1] + 5 * v[2] + 7 * v[3];
      }
    }
    for (int b = 0; b < blocks; ++b) sums[static_cast<size_t>(b) * kConsumers + tid] = sum;
  }
  return sums;
}

int check(cudaError_t e, const char* what) {
  if (e != cudaSuccess) std::fprintf(stderr, "%s: %s\n", what, cudaGetErrorString(e));
  return e == cudaSuccess ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  const char* names[kVariants] = {"named",   "named-fenced", "mbarrier",       "syncthreads",
                                  "generic", "plain",        "plain-mbarrier", "named-generic"};
  int variant = -1;
  for (int v = 0; v < kVariants && argc > 1; ++v) {
    if (std::strcmp(argv[1], names[v]) == 0) variant = v;
  }
  const int chunks = argc > 2 ? std::atoi(argv[2]) : 6;
  if (variant < 0 || chunks < 1) {
    std::fprintf(stderr,
                 "usage: repro-tile-handoff named|named-fenced|mbarrier|syncthreads|generic|plain|plain-mbarrier"
                 "|named-generic [chunks]\n");
    return 2;
  }
  constexpr int kSourceRows = 37, kBlocks = 2;
  std::vector<uint8_t> host(kSourceRows * kRowBytes);
  for (size_t i = 0; i < host.size(); ++i) host[i] = static_cast<uint8_t>(i * 131 + 7);
  uint8_t* source = nullptr;
  uint32_t* sums = nullptr;
  if (check(cudaMalloc(&source, host.size()), "cudaMalloc") ||
      check(cudaMalloc(&sums, kBlocks * kConsumers * sizeof(uint32_t)), "cudaMalloc") ||
      check(cudaMemcpy(source, host.data(), host.size(), cudaMemcpyHostToDevice), "cudaMemcpy") ||
      check(cudaFuncSetAttribute(handoff, cudaFuncAttributeMaxDynamicSharedMemorySize, sizeof(Smem)), "smem")) {
    return 1;
  }
  handoff<<<kBlocks, kThreads, sizeof(Smem)>>>(source, kSourceRows, chunks, variant, sums);
  if (check(cudaDeviceSynchronize(), "kernel")) return 1;
  std::vector<uint32_t> got(kBlocks * kConsumers);
  if (check(cudaMemcpy(got.data(), sums, got.size() * 4, cudaMemcpyDeviceToHost), "cudaMemcpy")) return 1;
  const std::vector<uint32_t> want = expected_sums(host, kSourceRows, chunks, kBlocks);
  int wrong = 0;
  for (size_t i = 0; i < got.size(); ++i) wrong += got[i] != want[i];
  std::printf("%s, %d chunks: %d wrong checksums of %zu\n", names[variant], chunks, wrong, got.size());
  return wrong == 0 ? 0 : 1;
}
