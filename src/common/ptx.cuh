// Short, tested wrappers over the PTX instructions the kernels use.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include <cstdint>

namespace sparse_decode::ptx {

__device__ __forceinline__ uint32_t smem_address(const void* pointer) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(pointer));
}

// 16-byte global -> shared copy; src_bytes == 0 writes 16 zero bytes and reads nothing.
__device__ __forceinline__ void cp_async_16(uint32_t dst, const void* src, uint32_t src_bytes) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src), "r"(src_bytes)
               : "memory");
}
// 8-byte form (the scale bytes of a packed row); src_bytes == 0 writes zeros and reads nothing.
__device__ __forceinline__ void cp_async_8(uint32_t dst, const void* src, uint32_t src_bytes) {
  asm volatile("cp.async.ca.shared.global [%0], [%1], 8, %2;\n" ::"r"(dst), "l"(src), "r"(src_bytes) : "memory");
}
// 4-byte global -> shared copy (through L1); src_bytes == 0 writes zeros and reads nothing.
__device__ __forceinline__ void cp_async_4(uint32_t dst, const void* src, uint32_t src_bytes) {
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(dst), "l"(src), "r"(src_bytes) : "memory");
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }
// Waits for every committed group (copies not yet committed are not waited for).
__device__ __forceinline__ void cp_async_wait_all() { asm volatile("cp.async.wait_group 0;\n" ::: "memory"); }
// Waits until at most `kPending` of this thread's newest copy groups are in flight.
template <int kPending>
__device__ __forceinline__ void cp_async_wait_group() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(kPending) : "memory");
}

__device__ __forceinline__ void ldmatrix_x4(uint32_t (&r)[4], uint32_t address) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(address));
}
__device__ __forceinline__ void ldmatrix_x4_trans(uint32_t (&r)[4], uint32_t address) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(address));
}

// D += A * B, m16n8k16, FP16 inputs, FP32 accumulators.
__device__ __forceinline__ void mma_f16_16x8x16(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
      "{%0, %1, %2, %3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// D += A * B, m16n8k16, BF16 inputs, FP32 accumulators.
__device__ __forceinline__ void mma_bf16_16x8x16(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
      "{%0, %1, %2, %3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// Two floats rounded to BF16 (FP16), `lo` in the low half, as 32 bits.
__device__ __forceinline__ uint32_t bf16x2_bits(float lo, float hi) {
  const __nv_bfloat162 pair = __floats2bfloat162_rn(lo, hi);
  return *reinterpret_cast<const uint32_t*>(&pair);
}
__device__ __forceinline__ uint32_t half2_bits(float lo, float hi) {
  const __half2 pair = __floats2half2_rn(lo, hi);
  return *reinterpret_cast<const uint32_t*>(&pair);
}

// The two E4M3 bytes in the low (kHighHalf: high) half of `bytes`, low byte
// first -> two FP16 (low half first), exact. The half is an operand of the
// one conversion instruction (F2FP ... R.H1): no shift.
template <bool kHighHalf>
__device__ __forceinline__ uint32_t e4m3x2_to_f16x2(uint32_t bytes) {
  uint32_t halves;
  if constexpr (kHighHalf) {
    asm("{ .reg .b16 low, high;\n mov.b32 {low, high}, %1;\n cvt.rn.f16x2.e4m3x2 %0, high; }\n"
        : "=r"(halves)
        : "r"(bytes));
  } else {
    asm("{ .reg .b16 low, high;\n mov.b32 {low, high}, %1;\n cvt.rn.f16x2.e4m3x2 %0, low; }\n"
        : "=r"(halves)
        : "r"(bytes));
  }
  return halves;
}

__device__ __forceinline__ float exp2_approx(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
  return y;
}

// Volatile global loads (served by L2): neither the compiler nor ptxas may
// drop one or sink it into the branch that uses its value, so a run of them
// issues at once (the combine kernels' loads; plain loads were sunk into the
// fold's per-group branches, one L2 round trip a group).
__device__ __forceinline__ float2 load_l2(const float2* pointer) {
  float2 v;
  asm volatile("ld.volatile.global.v2.f32 {%0, %1}, [%2];\n" : "=f"(v.x), "=f"(v.y) : "l"(pointer));
  return v;
}
__device__ __forceinline__ uint16_t load_l2(const uint16_t* pointer) {
  uint16_t v;
  asm volatile("ld.volatile.global.u16 %0, [%1];\n" : "=h"(v) : "l"(pointer));
  return v;
}
__device__ __forceinline__ int32_t load_l2(const int32_t* pointer) {
  int32_t v;
  asm volatile("ld.volatile.global.b32 %0, [%1];\n" : "=r"(v) : "l"(pointer));
  return v;
}
__device__ __forceinline__ float load_l2(const float* pointer) {
  return __int_as_float(load_l2(reinterpret_cast<const int32_t*>(pointer)));
}
__device__ __forceinline__ float4 load_l2(const float4* pointer) {
  float4 v;
  asm volatile("ld.volatile.global.v4.f32 {%0, %1, %2, %3}, [%4];\n"
               : "=f"(v.x), "=f"(v.y), "=f"(v.z), "=f"(v.w)
               : "l"(pointer));
  return v;
}

// Programmatic dependent launch: wait for the grids this one depends on /
// let the next grid start its prologue.
__device__ __forceinline__ void grid_dependency_wait() { asm volatile("griddepcontrol.wait;\n" ::: "memory"); }
__device__ __forceinline__ void launch_dependents() {
  asm volatile("griddepcontrol.launch_dependents;\n" ::: "memory");
}


// ---- clusters and distributed shared memory ----

// Release form: orders this thread's earlier operations (an mbarrier's
// initialization and expected bytes) before the peers see the barrier
// complete. Compiles to a GPU-scope fence: use it where nothing is in flight.
__device__ __forceinline__ void cluster_arrive_release() {
  asm volatile("barrier.cluster.arrive.release.aligned;\n" ::: "memory");
}
// Relaxed form: no fence. It publishes an mbarrier initialization fenced by
// fence.mbarrier_init.release.cluster (mbarrier_init), as CUTLASS's pipelines
// do. Used before peers overwrite a tile, it relies on every read of the tile
// having been consumed (by an MMA) before the arrive in the SASS, which the
// PTX model alone does not promise: see packed.md, "No GPU-scope fences".
__device__ __forceinline__ void cluster_arrive_relaxed() {
  asm volatile("barrier.cluster.arrive.relaxed.aligned;\n" ::: "memory");
}
// Waits for the cluster barrier (acquire).
__device__ __forceinline__ void cluster_wait() { asm volatile("barrier.cluster.wait.aligned;\n" ::: "memory"); }

__device__ __forceinline__ uint32_t cluster_ctarank() {
  uint32_t rank;
  asm volatile("mov.u32 %0, %%cluster_ctarank;\n" : "=r"(rank));
  return rank;
}
__device__ __forceinline__ uint32_t cluster_nctarank() {
  uint32_t count;
  asm volatile("mov.u32 %0, %%cluster_nctarank;\n" : "=r"(count));
  return count;
}

// The address of the same shared-memory location in CTA `rank` of the cluster.
__device__ __forceinline__ uint32_t map_to_peer(uint32_t smem_addr, uint32_t rank) {
  uint32_t result;
  asm volatile("mapa.shared::cluster.u32 %0, %1, %2;\n" : "=r"(result) : "r"(smem_addr), "r"(rank));
  return result;
}

__device__ __forceinline__ void mbarrier_init(uint32_t barrier, uint32_t arrivals) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(barrier), "r"(arrivals) : "memory");
  asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
}
__device__ __forceinline__ void mbarrier_arrive_expect_tx(uint32_t barrier, uint32_t bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(barrier), "r"(bytes) : "memory");
}
// Release form: the arriving thread's earlier shared-memory reads and writes come first.
__device__ __forceinline__ void mbarrier_arrive(uint32_t barrier) {
  asm volatile("mbarrier.arrive.release.cta.shared::cta.b64 _, [%0];\n" ::"r"(barrier) : "memory");
}
// Waits for the phase of `parity` to complete, acquiring at CTA scope (the
// KV tiles' barriers: bulk copies and this CTA's warps; an acquire at
// cluster scope invalidates L1 at every wait, CCTL.IVALL) or, for barriers
// that peers' DSMEM writes complete, at cluster scope.
template <bool kClusterScope>
__device__ __forceinline__ void mbarrier_wait_parity_at(uint32_t barrier, uint32_t parity) {
#define SPARSE_DECODE_TRY_WAIT(scope)                                                              \
  "{ .reg .pred ready;\n  mbarrier.try_wait.parity.acquire." scope ".shared::cta.b64 ready, [%1], %2;\n" \
  "  selp.u32 %0, 1, 0, ready; }\n"
  uint32_t done = 0;
  while (!done) {
    if constexpr (kClusterScope) {
      asm volatile(SPARSE_DECODE_TRY_WAIT("cluster") : "=r"(done) : "r"(barrier), "r"(parity) : "memory");
    } else {
      asm volatile(SPARSE_DECODE_TRY_WAIT("cta") : "=r"(done) : "r"(barrier), "r"(parity) : "memory");
    }
  }
#undef SPARSE_DECODE_TRY_WAIT
}
__device__ __forceinline__ void mbarrier_wait_parity(uint32_t barrier, uint32_t parity) {
  mbarrier_wait_parity_at<false>(barrier, parity);
}
__device__ __forceinline__ void mbarrier_wait_parity_cluster(uint32_t barrier, uint32_t parity) {
  mbarrier_wait_parity_at<true>(barrier, parity);
}

// A CTA barrier among `threads` threads (whole warps) on hardware barrier `id` (0 is __syncthreads').
__device__ __forceinline__ void named_barrier_sync(uint32_t id, uint32_t threads) {
  asm volatile("bar.sync %0, %1;\n" ::"r"(id), "r"(threads) : "memory");
}
// Arrives on hardware barrier `id` (of `threads` threads) without waiting: the
// signal of a producer/consumer handoff whose other side waits with named_barrier_sync.
__device__ __forceinline__ void named_barrier_arrive(uint32_t id, uint32_t threads) {
  asm volatile("bar.arrive %0, %1;\n" ::"r"(id), "r"(threads) : "memory");
}

// Registers of the executing warpgroup's threads (all of its warps execute it):
// give some back to the CTA's pool, or take some from it (waits until there are).
template <int kRegisters>
__device__ __forceinline__ void setmaxnreg_dec() {
  asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(kRegisters));
}
template <int kRegisters>
__device__ __forceinline__ void setmaxnreg_inc() {
  asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(kRegisters));
}

// Stores to a peer CTA's shared memory that complete bytes on its mbarrier
// (fire and forget: the receiver waits on its barrier, the sender never waits).
__device__ __forceinline__ void st_async_peer(uint32_t peer_addr, float4 value, uint32_t peer_barrier) {
  asm volatile("st.async.shared::cluster.mbarrier::complete_tx::bytes.v4.f32 [%0], {%1, %2, %3, %4}, [%5];\n" ::"r"(
                   peer_addr),
               "f"(value.x), "f"(value.y), "f"(value.z), "f"(value.w), "r"(peer_barrier)
               : "memory");
}
__device__ __forceinline__ void st_async_peer(uint32_t peer_addr, uint2 value, uint32_t peer_barrier) {
  asm volatile("st.async.shared::cluster.mbarrier::complete_tx::bytes.v2.b32 [%0], {%1, %2}, [%3];\n" ::"r"(peer_addr),
               "r"(value.x), "r"(value.y), "r"(peer_barrier)
               : "memory");
}
__device__ __forceinline__ void st_async_peer(uint32_t peer_addr, uint32_t value, uint32_t peer_barrier) {
  asm volatile("st.async.shared::cluster.mbarrier::complete_tx::bytes.b32 [%0], %1, [%2];\n" ::"r"(peer_addr),
               "r"(value), "r"(peer_barrier)
               : "memory");
}
__device__ __forceinline__ void st_async_peer(uint32_t peer_addr, float2 value, uint32_t peer_barrier) {
  asm volatile("st.async.shared::cluster.mbarrier::complete_tx::bytes.v2.f32 [%0], {%1, %2}, [%3];\n" ::"r"(
                   peer_addr),
               "f"(value.x), "f"(value.y), "r"(peer_barrier)
               : "memory");
}

// Bulk copy (TMA) of `bytes` (a multiple of 16, both addresses 16-byte
// aligned) from global to this CTA's shared memory, completing its bytes on
// `barrier`. The issuing thread does not wait for it.
__device__ __forceinline__ void cp_async_bulk_g2s(uint32_t dst, const void* src, uint32_t bytes, uint32_t barrier) {
  asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];\n" ::"r"(dst),
               "l"(src), "r"(bytes), "r"(barrier)
               : "memory");
}
__device__ __forceinline__ void st_shared_zero16(uint32_t address) {
  asm volatile("st.shared.v4.b32 [%0], {%1, %1, %1, %1};\n" ::"r"(address), "r"(0) : "memory");
}

// ---- warpgroup MMA (sm_90a) ----

// Shared-memory matrix descriptor of a K-major operand without swizzle: core
// matrices of 8 rows x 16 bytes stored contiguously, `k_stride` bytes apart
// along K (leading dimension) and `row_group_stride` bytes apart along M/N.
__device__ __forceinline__ uint64_t wgmma_descriptor(uint32_t smem_addr, uint32_t k_stride, uint32_t row_group_stride) {
  return static_cast<uint64_t>((smem_addr & 0x3FFFF) >> 4) | (static_cast<uint64_t>(k_stride >> 4) << 16) |
         (static_cast<uint64_t>(row_group_stride >> 4) << 32);
}
// The descriptor of the operand `bytes` further along (a multiple of 16): the
// address field (bits 0-13, address / 16) cannot carry into the strides while
// the address stays below 256 KiB, so only the low word changes.
__device__ __forceinline__ uint64_t wgmma_descriptor_advance(uint64_t descriptor, uint32_t bytes) {
  const uint32_t low = static_cast<uint32_t>(descriptor) + (bytes >> 4);
  return (descriptor & 0xFFFFFFFF00000000ull) | low;
}
__device__ __forceinline__ void wgmma_fence() { asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void wgmma_commit() { asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void wgmma_wait_all() { asm volatile("wgmma.wait_group.sync.aligned 0;\n" ::: "memory"); }
// Waits until at most kPending committed wgmma groups are in flight.
template <int kPending>
__device__ __forceinline__ void wgmma_wait() {
  asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(kPending) : "memory");
}
// Makes generic-proxy writes to shared memory (cp.async, st.shared) visible to wgmma.
__device__ __forceinline__ void fence_proxy_async_shared() {
  asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
}

// D (64 x 16, FP32) (+)= A (64 x 32 E4M3, registers: the mma.m16n8k32 A
// fragment of the warp's 16 rows) * B (32 x 16 E4M3, smem, K-major).
__device__ __forceinline__ void wgmma_e4m3_64x16x32_rs(float (&d)[8], const uint32_t (&a)[4], uint64_t b,
                                                       bool accumulate) {
  asm volatile(
      "{\n .reg .pred p;\n setp.ne.b32 p, %13, 0;\n"
      " wgmma.mma_async.sync.aligned.m64n16k32.f32.e4m3.e4m3 {%0, %1, %2, %3, %4, %5, %6, %7}, {%8, %9, %10, %11}, "
      "%12, p, 1, 1;\n}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b), "r"(static_cast<int>(accumulate)));
}
// D (64 x 16, FP32) (+)= A (64 x 16 BF16, registers) * B (16 x 16 BF16, smem, K-major).
__device__ __forceinline__ void wgmma_bf16_64x16x16_rs(float (&d)[8], const uint32_t (&a)[4], uint64_t b,
                                                       bool accumulate) {
  asm volatile(
      "{\n .reg .pred p;\n setp.ne.b32 p, %13, 0;\n"
      " wgmma.mma_async.sync.aligned.m64n16k16.f32.bf16.bf16 {%0, %1, %2, %3, %4, %5, %6, %7}, {%8, %9, %10, %11}, "
      "%12, p, 1, 1, 0;\n}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b), "r"(static_cast<int>(accumulate)));
}

// D (64 x 16, FP32) (+)= A (64 x 16 FP16, registers) * B (16 x 16 FP16, smem, K-major).
__device__ __forceinline__ void wgmma_f16_64x16x16_rs(float (&d)[8], const uint32_t (&a)[4], uint64_t b,
                                                      bool accumulate) {
  asm volatile(
      "{\n .reg .pred p;\n setp.ne.b32 p, %13, 0;\n"
      " wgmma.mma_async.sync.aligned.m64n16k16.f32.f16.f16 {%0, %1, %2, %3, %4, %5, %6, %7}, {%8, %9, %10, %11}, "
      "%12, p, 1, 1, 0;\n}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b), "r"(static_cast<int>(accumulate)));
}

// D (64 x 64, FP32) (+)= A (64 x 32 E4M3, registers) * B (32 x 64 E4M3, smem, K-major).
__device__ __forceinline__ void wgmma_e4m3_64x64x32_rs(float (&d)[32], const uint32_t (&a)[4], uint64_t b,
                                                       bool accumulate) {
  asm volatile(
      "{\n .reg .pred p;\n setp.ne.b32 p, %37, 0;\n"
      " wgmma.mma_async.sync.aligned.m64n64k32.f32.e4m3.e4m3 "
      "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
      "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}, {%32, %33, %34, %35}, %36, "
      "p, 1, 1;\n}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
        "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]),
        "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),
        "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b), "r"(static_cast<int>(accumulate)));
}

}  // namespace sparse_decode::ptx
