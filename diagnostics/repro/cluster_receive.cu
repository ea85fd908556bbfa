// repro-cluster-receive: the cluster kernels' receive barrier alone, for
// compute-sanitizer synccheck (docs/memory_model.md). Each CTA of a cluster
// of n CTAs initializes an mbarrier expecting n * 16 stores of 8 bytes,
// publishes it with fence.mbarrier_init and the cluster barrier, sends 8
// bytes a head to every peer by st.async completing on the peer's mbarrier,
// waits on its own (acquire at cluster scope) and checks what it received.
// Shared memory padded to the cluster kernels' footprint (2 CTAs an SM), so
// that later clusters reuse finished CTAs' shared memory as they do there.
//
//   repro-cluster-receive <variant> [ctas per cluster] [clusters] [launches]
//       exit 0: every received value right in every launch
//
// variants:
//   st-async      as the library: relaxed cluster arrive after the init fence
//   release       barrier.cluster.arrive.release instead of the relaxed arrive
//   remote-arrive st.shared::cluster stores, then one mbarrier.arrive.release.cluster
//                 on the peer's barrier a sender (arrival counts, no transaction bytes)
//   exit-sync     st-async, and a second cluster barrier before exit (no CTA
//                 leaves while a peer may still signal its barrier)
//   tile-barrier  st-async, and between the cluster arrive and wait the
//                 dsv4 cluster kernel's tile walk: thread 0 initializes a
//                 tile mbarrier, a CTA barrier, then 4 chunks in which each
//                 warp's lane 0 arrives with the bytes its 8 lanes copy by
//                 cp.async.bulk (512-byte rows) and every thread waits
//   barrier-loop  no receive barrier: the dsa cluster fold's shape alone, a
//                 loop of CTA barriers on a count read from shared memory
//                 (the same for every thread), then a cluster barrier, a
//                 peer's count read through the cluster window, and a
//                 second cluster barrier before exit
#include <cuda_runtime.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iterator>
#include <vector>

namespace {

constexpr int kThreads = 256, kHeads = 16, kMaxCtas = 16;
constexpr int kPaddingBytes = 100 * 1024;

enum Variant { kStAsync, kRelease, kRemoteArrive, kExitSync, kTileBarrier, kBarrierLoop };

constexpr int kRowBytes = 512, kTileRows = kThreads / 32 * 8, kChunks = 4;

struct Smem {
  alignas(128) uint8_t padding[kPaddingBytes];  // tile-barrier: rows 0..63 are the KV tile
  uint2 received[kMaxCtas][kHeads];
  uint64_t barrier;
  uint64_t tile_barrier;
  int count;  // barrier-loop: the walk's length, written by thread 0
};
static_assert(kTileRows * kRowBytes <= kPaddingBytes, "the tile fits in the padding");


__device__ __forceinline__ uint32_t smem(const void* p) { return static_cast<uint32_t>(__cvta_generic_to_shared(p)); }
__device__ __forceinline__ uint32_t peer_address(uint32_t address, uint32_t rank) {
  uint32_t result;
  asm volatile("mapa.shared::cluster.u32 %0, %1, %2;\n" : "=r"(result) : "r"(address), "r"(rank));
  return result;
}

// The tile walk of the dsv4 cluster kernel (init_tile_barriers, copy_rows,
// wait_tile), on rows of `rows`; returns the sum of the bytes this thread
// checks (its own row's first word each chunk).
__device__ uint32_t walk_tile(Smem& s, const uint8_t* rows) {
  const uint32_t tile_barrier = smem(&s.tile_barrier);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  if (threadIdx.x == 0) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(tile_barrier), "r"(kThreads / 32) : "memory");
  }
  __syncthreads();
  uint32_t sum = 0;
  for (int c = 0; c < kChunks; ++c) {
    if (c > 0) __syncthreads();  // every thread read the previous chunk
    asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
    if (lane == 0) {
      asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(tile_barrier), "r"(8 * kRowBytes)
                   : "memory");
    }
    __syncwarp();
    const int row = warp * 8 + lane;
    if (lane < 8) {
      asm volatile(
          "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];\n" ::"r"(
              smem(&s.padding[row * kRowBytes])),
          "l"(rows + ((row + c) % kTileRows) * kRowBytes), "r"(kRowBytes), "r"(tile_barrier)
          : "memory");
    }
    uint32_t done = 0;
    while (!done) {
      asm volatile(
          "{ .reg .pred p;\n mbarrier.try_wait.parity.acquire.cta.shared::cta.b64 p, [%1], %2;\n"
          " selp.u32 %0, 1, 0, p; }\n"
          : "=r"(done)
          : "r"(tile_barrier), "r"(c & 1)
          : "memory");
    }
    sum += *reinterpret_cast<const uint32_t*>(&s.padding[(threadIdx.x % kTileRows) * kRowBytes]);
  }
  return sum;
}

// barrier-loop: every barrier here is reached by whole warps; a count of
// errors (wrong sums, a wrong peer count) goes to `wrong`.
__device__ void barrier_loop(Smem& s, uint32_t rank, uint32_t ctas, uint32_t cluster, int* wrong) {
  const int n = 4 + static_cast<int>(cluster % 3);  // the walk's length, a cluster's own
  if (threadIdx.x == 0) s.count = n;
  __syncthreads();
  uint32_t sum = 0;
  for (int i = 0; i < s.count; ++i) {
    __syncthreads();  // the previous step's readers are done
    if (threadIdx.x < kHeads) s.received[0][threadIdx.x].x = static_cast<uint32_t>(i) + rank;
    __syncthreads();
    sum += s.received[0][threadIdx.x % kHeads].x;
  }
  if (sum != static_cast<uint32_t>(n * (n - 1) / 2) + n * rank) atomicAdd(wrong, 1);
  asm volatile("barrier.cluster.arrive.release.aligned;\n" ::: "memory");
  asm volatile("barrier.cluster.wait.aligned;\n" ::: "memory");
  int peer_count = 0;
  const uint32_t peer = peer_address(smem(&s.count), (rank + 1) % ctas);
  asm volatile("ld.shared::cluster.u32 %0, [%1];\n" : "=r"(peer_count) : "r"(peer) : "memory");
  if (peer_count != n) atomicAdd(wrong, 1);
  asm volatile("barrier.cluster.arrive.release.aligned;\n" ::: "memory");  // no CTA leaves while a peer reads it
  asm volatile("barrier.cluster.wait.aligned;\n" ::: "memory");
}

__global__ void __launch_bounds__(kThreads, 2) receive(int variant, const uint8_t* rows, int* wrong) {
  extern __shared__ __align__(16) uint8_t smem_bytes[];
  Smem& s = *reinterpret_cast<Smem*>(smem_bytes);
  uint32_t rank, ctas;
  asm volatile("mov.u32 %0, %%cluster_ctarank;\n" : "=r"(rank));
  asm volatile("mov.u32 %0, %%cluster_nctarank;\n" : "=r"(ctas));
  const uint32_t cluster = blockIdx.x / ctas;
  if (variant == kBarrierLoop) {
    barrier_loop(s, rank, ctas, cluster, wrong);
    return;
  }
  const uint32_t barrier = smem(&s.barrier);
  if (threadIdx.x == 0) {
    if (variant == kRemoteArrive) {
      asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(barrier), "r"(ctas * kHeads) : "memory");
    } else {
      asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(barrier), "r"(1) : "memory");
    }
    asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
    if (variant != kRemoteArrive) {
      asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(barrier),
                   "r"(ctas * kHeads * 8u)
                   : "memory");
    }
  }
  if (variant == kRelease) {
    asm volatile("barrier.cluster.arrive.release.aligned;\n" ::: "memory");
  } else {
    asm volatile("barrier.cluster.arrive.relaxed.aligned;\n" ::: "memory");
  }
  if (variant == kTileBarrier) {
    // Rows hold byte (row index): each chunk's first word of row r is 4 copies of the byte (r + c) % kTileRows.
    const uint32_t sum = walk_tile(s, rows);
    uint32_t want = 0;
    for (int c = 0; c < kChunks; ++c) want += 0x01010101u * ((threadIdx.x % kTileRows + c) % kTileRows);
    if (sum != want) atomicAdd(wrong, 1);
  }
  asm volatile("barrier.cluster.wait.aligned;\n" ::: "memory");
  if (threadIdx.x < ctas * kHeads) {
    const uint32_t peer = threadIdx.x / kHeads, head = threadIdx.x % kHeads;
    const uint32_t slot = peer_address(smem(&s.received[rank][head]), peer);
    const uint32_t peer_barrier = peer_address(barrier, peer);
    const uint32_t x = cluster, y = rank * kHeads + head;
    if (variant == kRemoteArrive) {
      asm volatile("st.shared::cluster.v2.u32 [%0], {%1, %2};\n" ::"r"(slot), "r"(x), "r"(y) : "memory");
      asm volatile("mbarrier.arrive.release.cluster.shared::cluster.b64 _, [%0];\n" ::"r"(peer_barrier) : "memory");
    } else {
      asm volatile("st.async.shared::cluster.mbarrier::complete_tx::bytes.v2.b32 [%0], {%1, %2}, [%3];\n" ::"r"(slot),
                   "r"(x), "r"(y), "r"(peer_barrier)
                   : "memory");
    }
  }
  uint32_t done = 0;
  while (!done) {
    asm volatile(
        "{ .reg .pred p;\n mbarrier.try_wait.parity.acquire.cluster.shared::cta.b64 p, [%1], %2;\n"
        " selp.u32 %0, 1, 0, p; }\n"
        : "=r"(done)
        : "r"(barrier), "r"(0)
        : "memory");
  }
  if (threadIdx.x < ctas * kHeads) {
    const uint32_t source = threadIdx.x / kHeads, head = threadIdx.x % kHeads;
    const uint2 v = s.received[source][head];
    if (v.x != cluster || v.y != source * kHeads + head) atomicAdd(wrong, 1);
  }
  if (variant == kExitSync) {
    asm volatile("barrier.cluster.arrive.relaxed.aligned;\n" ::: "memory");
    asm volatile("barrier.cluster.wait.aligned;\n" ::: "memory");
  }
}

int check(cudaError_t e, const char* what) {
  if (e != cudaSuccess) std::fprintf(stderr, "%s: %s\n", what, cudaGetErrorString(e));
  return e == cudaSuccess ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  const char* names[] = {"st-async", "release", "remote-arrive", "exit-sync", "tile-barrier", "barrier-loop"};
  int variant = -1;
  for (int v = 0; v < static_cast<int>(std::size(names)) && argc > 1; ++v) {
    if (std::strcmp(argv[1], names[v]) == 0) variant = v;
  }
  const int ctas = argc > 2 ? std::atoi(argv[2]) : 10;
  const int clusters = argc > 3 ? std::atoi(argv[3]) : 48;
  const int launches = argc > 4 ? std::atoi(argv[4]) : 1;
  if (variant < 0 || ctas < 2 || ctas > kMaxCtas || clusters < 1 || launches < 1) {
    std::fprintf(stderr,
                 "usage: repro-cluster-receive st-async|release|remote-arrive|exit-sync|tile-barrier|barrier-loop"
                 " [ctas 2-16]"
                 " [clusters] [launches]\n");
    return 2;
  }
  int* wrong = nullptr;
  uint8_t* rows = nullptr;
  std::vector<uint8_t> host_rows(static_cast<size_t>(kTileRows) * kRowBytes);
  for (size_t i = 0; i < host_rows.size(); ++i) host_rows[i] = static_cast<uint8_t>(i / kRowBytes);
  if (check(cudaMalloc(&wrong, sizeof(int)), "cudaMalloc") || check(cudaMemset(wrong, 0, sizeof(int)), "cudaMemset") ||
      check(cudaMalloc(&rows, host_rows.size()), "cudaMalloc") ||
      check(cudaMemcpy(rows, host_rows.data(), host_rows.size(), cudaMemcpyHostToDevice), "cudaMemcpy") ||
      check(cudaFuncSetAttribute(receive, cudaFuncAttributeMaxDynamicSharedMemorySize, sizeof(Smem)), "smem") ||
      check(cudaFuncSetAttribute(receive, cudaFuncAttributeNonPortableClusterSizeAllowed, 1), "cluster size")) {
    return 1;
  }
  cudaLaunchConfig_t config = {};
  config.gridDim = dim3(static_cast<unsigned>(ctas * clusters));
  config.blockDim = dim3(kThreads);
  config.dynamicSmemBytes = sizeof(Smem);
  cudaLaunchAttribute attribute;
  attribute.id = cudaLaunchAttributeClusterDimension;
  attribute.val.clusterDim = {static_cast<unsigned>(ctas), 1, 1};
  config.attrs = &attribute;
  config.numAttrs = 1;
  for (int launch = 0; launch < launches; ++launch) {
    if (check(cudaLaunchKernelEx(&config, receive, variant, static_cast<const uint8_t*>(rows), wrong), "launch")) {
      return 1;
    }
  }
  if (check(cudaDeviceSynchronize(), "kernel")) return 1;
  int host_wrong = -1;
  if (check(cudaMemcpy(&host_wrong, wrong, sizeof(int), cudaMemcpyDeviceToHost), "cudaMemcpy")) return 1;
  std::printf("%s, %d CTAs a cluster, %d clusters, %d launches: %d wrong values\n", names[variant], ctas, clusters,
              launches, host_wrong);
  return host_wrong == 0 ? 0 : 1;
}
