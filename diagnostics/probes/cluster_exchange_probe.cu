// cluster-exchange-probe: the cluster kernel's exchange protocol alone, for
// compute-sanitizer synccheck (docs/kernels/small_batch.md). Each CTA of an
// n-CTA cluster initializes its receive mbarrier with the bytes it expects,
// arrives at the cluster barrier, waits for it, sends 8 bytes a head to every
// peer with st.async completing bytes on the peer's barrier, waits on its own
// barrier and checks what it received. Nothing else: no gather, no MMA.
//
//   cluster-exchange-probe <ctas per cluster (1-16)> <clusters>
// Exit code 0 when every received value is right.
#include <cuda_runtime.h>

#include <cstdio>
#include <cstdlib>

#include "common/ptx/cluster.cuh"
#include "common/ptx/copy.cuh"
#include "common/ptx/sync.cuh"

namespace {

constexpr int kThreads = 256;
constexpr int kHeads = 16;
constexpr int kMaxCtas = 16;
// Padding to the cluster kernel's footprint (2 CTAs an SM), so that CTAs of
// later clusters reuse the shared memory of finished ones as they do there.
constexpr int kPaddingBytes = 100 * 1024;

struct ProbeSmem {
  uint8_t padding[kPaddingBytes];
  uint2 received[kMaxCtas][kHeads];
  uint64_t received_barrier;
};

__global__ void __launch_bounds__(kThreads, 2) exchange_probe(int* wrong) {
  extern __shared__ __align__(16) uint8_t smem_bytes[];
  ProbeSmem& s = *reinterpret_cast<ProbeSmem*>(smem_bytes);
  const uint32_t rank = sparse_decode::ptx::cluster_ctarank();
  const uint32_t ctas = sparse_decode::ptx::cluster_nctarank();
  const uint32_t cluster = blockIdx.x / ctas;
  const uint32_t barrier = sparse_decode::ptx::smem_address(&s.received_barrier);
  if (threadIdx.x == 0) {
    sparse_decode::ptx::mbarrier_init(barrier, 1);
    sparse_decode::ptx::mbarrier_arrive_expect_tx(barrier, ctas * kHeads * sizeof(uint2));
  }
  sparse_decode::ptx::cluster_arrive_release();
  sparse_decode::ptx::cluster_wait();
  if (threadIdx.x < ctas * kHeads) {
    const uint32_t peer = threadIdx.x / kHeads, head = threadIdx.x % kHeads;
    const uint32_t slot = sparse_decode::ptx::smem_address(&s.received[rank][head]);
    sparse_decode::ptx::st_async_peer(sparse_decode::ptx::map_to_peer(slot, peer), make_uint2(cluster, rank * kHeads + head),
                                      sparse_decode::ptx::map_to_peer(barrier, peer));
  }
  sparse_decode::ptx::mbarrier_wait_parity_cluster(barrier, 0);
  if (threadIdx.x < ctas * kHeads) {
    const uint32_t source = threadIdx.x / kHeads, head = threadIdx.x % kHeads;
    const uint2 value = s.received[source][head];
    if (value.x != cluster || value.y != source * kHeads + head) atomicAdd(wrong, 1);
  }
}

int check(cudaError_t e, const char* what) {
  if (e != cudaSuccess) std::fprintf(stderr, "%s: %s\n", what, cudaGetErrorString(e));
  return e == cudaSuccess ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  const int ctas = argc > 1 ? std::atoi(argv[1]) : 10;
  const int clusters = argc > 2 ? std::atoi(argv[2]) : 48;
  if (ctas < 1 || ctas > kMaxCtas || clusters < 1) {
    std::fprintf(stderr, "usage: cluster-exchange-probe <ctas 1-16> <clusters >= 1>\n");
    return 2;
  }
  int* wrong = nullptr;
  if (check(cudaMalloc(&wrong, sizeof(int)), "cudaMalloc") || check(cudaMemset(wrong, 0, sizeof(int)), "cudaMemset") ||
      check(cudaFuncSetAttribute(exchange_probe, cudaFuncAttributeMaxDynamicSharedMemorySize, sizeof(ProbeSmem)),
            "max shared memory") ||
      check(cudaFuncSetAttribute(exchange_probe, cudaFuncAttributeNonPortableClusterSizeAllowed, 1), "cluster size")) {
    return 1;
  }
  cudaLaunchConfig_t config = {};
  config.gridDim = dim3(static_cast<unsigned>(ctas * clusters));
  config.blockDim = dim3(kThreads);
  config.dynamicSmemBytes = sizeof(ProbeSmem);
  cudaLaunchAttribute attribute;
  attribute.id = cudaLaunchAttributeClusterDimension;
  attribute.val.clusterDim = {static_cast<unsigned>(ctas), 1, 1};
  config.attrs = &attribute;
  config.numAttrs = 1;
  if (check(cudaLaunchKernelEx(&config, exchange_probe, wrong), "launch") ||
      check(cudaDeviceSynchronize(), "kernel")) {
    return 1;
  }
  int host_wrong = -1;
  if (check(cudaMemcpy(&host_wrong, wrong, sizeof(int), cudaMemcpyDeviceToHost), "cudaMemcpy")) return 1;
  std::printf("%d CTAs a cluster, %d clusters: %d wrong values\n", ctas, clusters, host_wrong);
  return host_wrong == 0 ? 0 : 1;
}
