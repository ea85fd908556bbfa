// Host side of the dsv4 kernels: plan, support check, choice, workspace, launch.
#include "dsv4/dispatch.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <iterator>
#include <string>

#include "common/device_support.h"
#include "common/instrument.cuh"
#include "common/per_device.h"
#include "common/validation.h"
#include "dsv4/configs.cuh"
#include "dsv4/instantiations/kernels.h"
#include "dsv4/params.h"
#include "dsv4/smem.cuh"
#include "dsv4/traits.cuh"

namespace sparse_decode::dsv4 {
namespace {

// The geometry that the chunk plan and the grid depend on; the same for
// every instantiation but for the heads a CTA (16, or 64: Traits64).
using Traits16 = ClusterTraitsFp8;
using Traits64 = StreamTraitsFp8H64;
template <class Traits>
constexpr bool kSameGeometry = Traits::kThreads == Traits16::kThreads &&
                               Traits::kChunkColumns == Traits16::kChunkColumns &&
                               Traits::kMaxGroups == Traits16::kMaxGroups;
static_assert(kSameGeometry<StreamTraitsFp8> && kSameGeometry<StreamDeepTraitsFp8> &&
                  kSameGeometry<StreamPvWarpsTraitsFp8> &&
                  kSameGeometry<ClusterTraitsBf16> && kSameGeometry<StreamTraitsBf16> &&
                  kSameGeometry<SplitTraitsFp8> && kSameGeometry<SplitTraitsBf16> &&
                  kSameGeometry<StreamTraitsFp8H64> && kSameGeometry<SplitTraitsFp8H64> &&
                  kSameGeometry<StreamHalvesTraitsFp8> && kSameGeometry<StreamHalvesTraitsFp8H64> &&
                  kSameGeometry<StreamHalvesTraitsBf16>,
              "chunk_plan, the grid and the block size are shared by every kernel instantiation");
static_assert(ClusterTraitsFp8::kHeads == 16 && ClusterTraitsBf16::kHeads == 16 && StreamTraitsBf16::kHeads == 16 &&
                  SplitTraitsBf16::kHeads == 16 && StreamTraitsFp8::kHeads == 16 && SplitTraitsFp8::kHeads == 16 &&
                  Traits64::kHeads == 64 && SplitTraitsFp8H64::kHeads == 64,
              "head groups: 16 heads, or 64 for the FP8 stream kernel and split path of 64-head calls");

// A stream kernel: its block (with a producer warpgroup, more than
// kThreads), its dynamic shared memory, with producers the registers a
// thread it must be compiled with (its setmaxnreg moves, ProducerRegisters,
// assume exactly these; 0 without producers), and its CTAs a unit.
struct StreamKernel {
  const void* kernel = nullptr;
  size_t smem = 0;
  int threads = 0;
  int registers = 0;
  int dim_parts = 1;
};

template <class StreamT>
StreamKernel stream_kernel_of(const void* kernel) {
  int registers = 0;
  if constexpr (StreamT::kProducerWarps > 0) {
    registers = ProducerRegisters<StreamT, resident_ctas(sizeof(StreamSmem<StreamT>))>::kLaunch;
  }
  return {kernel, sizeof(StreamSmem<StreamT>), StreamT::kLaunchThreads, registers, StreamT::kDimParts};
}

// A combine kernel instance: its CTAs a unit and threads a CTA.
struct CombineKernel {
  const void* kernel;
  int slices;   // CTAs a unit
  int threads;  // a CTA
};

// The kernels of one dtype and head group size and the dynamic shared
// memory each requests (its plan's size; the combine kernels have none).
// The cluster kernel is always the 16-head one;
// the deep stream kernel (4 tiles, 1 CTA an SM) serves at most one unit an
// SM, and the stream kernel in dim halves at most one unit per two SMs,
// where there is one (kernel null where not).
struct KernelSet {
  const void* cluster;
  StreamKernel stream;
  const void* split;
  CombineKernel combine;
  CombineKernel combine_few_units;  // calls of at most SplitWorkspace::kFewUnits units
  size_t cluster_smem;
  size_t split_smem;
  StreamKernel stream_deep = {};
  StreamKernel stream_halves = {};
  StreamKernel stream_pv_warps = {};  // the deep kernel with P V warps
};

template <class SplitT>
CombineKernel combine_kernel_of(const void* kernel, int slices) {
  return {kernel, slices, SplitT::kHeads * SplitT::kGranules / slices};
}

template <class ClusterT, class StreamT, class SplitT>
KernelSet kernel_set(const void* cluster, const void* stream, const void* split, const void* (*combine)(bool)) {
  using Workspace = SplitWorkspace<SplitT>;
  return {cluster,
          stream_kernel_of<StreamT>(stream),
          split,
          combine_kernel_of<SplitT>(combine(false), Workspace::kCombineSlices),
          combine_kernel_of<SplitT>(combine(true), Workspace::kFewUnitsSlices),
          sizeof(ClusterSmem<ClusterT>),
          sizeof(SplitSmem<SplitT>)};
}

KernelSet kernels_for(DType dtype, int group_heads) {
  if (dtype == DType::kBFloat16) {
    KernelSet bf16 = kernel_set<ClusterTraitsBf16, StreamTraitsBf16, SplitTraitsBf16>(
        cluster_kernel_bf16_h16(), stream_kernel_bf16_h16(), split_kernel_bf16_h16(), combine_kernel_bf16_h16);
    bf16.stream_halves = stream_kernel_of<StreamHalvesTraitsBf16>(stream_halves_kernel_bf16_h16());
    return bf16;
  }
  if (group_heads == Traits64::kHeads) {
    KernelSet fp8 = kernel_set<ClusterTraitsFp8, StreamTraitsFp8H64, SplitTraitsFp8H64>(
        cluster_kernel_fp8_h16(), stream_kernel_fp8_h64(), split_kernel_fp8_h64(), combine_kernel_fp8_h64);
    fp8.stream_halves = stream_kernel_of<StreamHalvesTraitsFp8H64>(stream_halves_kernel_fp8_h64());
    return fp8;
  }
  KernelSet fp8 = kernel_set<ClusterTraitsFp8, StreamTraitsFp8, SplitTraitsFp8>(
      cluster_kernel_fp8_h16(), stream_kernel_fp8_h16(), split_kernel_fp8_h16(), combine_kernel_fp8_h16);
  fp8.stream_deep = stream_kernel_of<StreamDeepTraitsFp8>(stream_deep_kernel_fp8_h16());
  fp8.stream_pv_warps = stream_kernel_of<StreamPvWarpsTraitsFp8>(stream_pv_warps_kernel_fp8_h16());
  fp8.stream_halves = stream_kernel_of<StreamHalvesTraitsFp8>(stream_halves_kernel_fp8_h16());
  return fp8;
}

static_assert(SplitWorkspace<Traits16>::kValueBytes == SplitWorkspace<SplitTraitsBf16>::kValueBytes &&
                  SplitWorkspace<Traits16>::kAlignment == SplitWorkspace<Traits64>::kAlignment,
              "one workspace layout for every dtype, and one alignment for every head group size");
static_assert(4 * SplitWorkspace<Traits16>::kValueBytes == SplitWorkspace<Traits64>::kValueBytes &&
                  4 * SplitWorkspace<Traits16>::kStatsBytes == SplitWorkspace<Traits64>::kStatsBytes,
              "a 64-head unit's group record is four 16-head records: workspace_size(args) is the same at H = 64, 128");

// Whether a call runs its stream kernel and split path with 64-head groups
// (docs/kernels/heads64.md): FP8 rows, H = 64 or 128, and groups of one
// chunk (W <= 1024: the 64-head stream kernel folds a group's P V by dim
// group as it is computed). Depends on H, W and the dtype only, never on T:
// kAuto picks among the kernels of one head group size, so the bits of a
// token do not depend on its batch.
bool heads64(const Dsv4DecodeArgs& args) {
  return args.dtype == DType::kFloat8E4M3 && args.num_heads % Traits64::kHeads == 0 &&
         chunk_plan(args.width).chunks_per_group == 1;
}

// Heads a work unit of `kernel` serves: 64 for the stream kernel and the
// split path of heads64() calls, else 16 (the cluster kernel always).
int group_heads(const Dsv4DecodeArgs& args, Dsv4Kernel kernel) {
  return kernel != Dsv4Kernel::kCluster && heads64(args) ? Traits64::kHeads : Traits16::kHeads;
}

constexpr DType kServedDtypes[] = {DType::kFloat8E4M3, DType::kBFloat16};
int dtype_slot(DType dtype) { return dtype == DType::kBFloat16 ? 1 : 0; }
constexpr int kGroupSizes[] = {Traits16::kHeads, Traits64::kHeads};
int group_slot(int group_heads) { return group_heads == Traits64::kHeads ? 1 : 0; }

// The split path (split + combine kernels) serves widths of more than
// kSplitMinGroups groups (at width 128 the stream kernel is faster, except
// for the fewest BF16 units: kSplitMaxUnitsNarrowBf16) while
// the GPU holds at least min CTAs a unit at once. 64 heads: 5 (the stream
// kernel's dim halves, ~30.5 µs at W = 640 up to 66 units, beat the split
// path's 35.3 at 32 units; split 21.4 at 16). 16 heads up to W = 1024: 7
// (the dim halves beat split from ~38 units, FP8 and BF16: FP8 15.9 against
// 16.7 at 48, BF16 22.6 against 23.8). Above W = 1024: FP8 4 (split 3 %
// faster at 48 tokens, 1.6 % slower at 64), BF16 6 (split 5 % slower at 48).
// The cluster kernel keeps the fewest units: none up to W = 1024 (split
// faster from 1 token at W = 640; at W = 128 the stream kernel's halves
// from 1 token, FP8 6.7 against 7.7 µs, BF16 8.1 against 8.8); above
// W = 1024 none with FP8 since the combine kernel loads all its inputs at
// once (twelfth session, W = 2176: split 12.7 against 14.1 at 1 token, 18.5
// against 19.9 at 16), BF16 8 units (18.7 against split 19.4 at 6, 34.1
// against 24.8 at 12). Without the split workspace, against the
// stream kernel (eighth session, halves included): FP8 20 units at
// W <= 1024 (12.0 against 15.4 at 20, 18.4 against 15.3 at 24) and 32 above
// (42.8 against 42.1 at 32, 50.0 against 42.3 at 40); BF16 12 (18.3
// against 20.4 at 12, 26.1 against 20.5 at 16) and 16 (50.1 against 55.4
// at 16, 66.5 against 55.8 at 24). Measurements: docs/kernels/dispatch.md.
constexpr int32_t kSplitMinGroups = 2;
// Width 128 with BF16 rows: the split path up to 16 units (twelfth session:
// 7.05 against the stream kernel's 7.79 µs at 6 tokens, 7.37 against 7.90
// at 12, a tie at 24: 8.05 against 8.15; FP8 ties at 1-12 tokens, 6.20
// against 6.25, and loses from 24).
constexpr int64_t kSplitMaxUnitsNarrowBf16 = 16;
constexpr int64_t kSplitMinCtas64Heads = 5;
constexpr int64_t kSplitMinCtas = 7;
constexpr int64_t kSplitMinCtasWideFp8 = 4;  // widths above 1024 (groups of 2+ chunks)
constexpr int64_t kSplitMinCtasWideBf16 = 6;
struct ClusterBounds {
  int64_t before_split_wide;   // with the split workspace, W > 1024 (none at W <= 1024)
  int64_t without_split;       // without it, W <= 1024
  int64_t without_split_wide;  // without it, W > 1024
};
constexpr ClusterBounds kClusterBoundsFp8 = {0, 20, 32};
constexpr ClusterBounds kClusterBoundsBf16 = {8, 12, 16};

// The deep stream kernel's P V warps pay from 5 chunks a token (W > 256;
// measured at 4 chunks +0.5 %, at 6 -1 %, at 10 -2.5 %, at 34 -6 %).
constexpr int kPvWarpsMinChunks = 5;

int set_kernel_attributes() {
  cudaError_t e = cudaSuccess;
  for (DType dtype : kServedDtypes) {
    for (int heads : kGroupSizes) {  // BF16 has 16-head kernels only: set twice
      const KernelSet k = kernels_for(dtype, heads);
      if (e == cudaSuccess) {
        e = cudaFuncSetAttribute(k.cluster, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                 static_cast<int>(k.cluster_smem));
      }
      if (e == cudaSuccess) e = cudaFuncSetAttribute(k.cluster, cudaFuncAttributeNonPortableClusterSizeAllowed, 1);
      if (e == cudaSuccess) {
        e = cudaFuncSetAttribute(k.split, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                 static_cast<int>(std::max(k.split_smem, kSmAloneSmemBytes)));
      }
      for (const StreamKernel& stream : {k.stream, k.stream_deep, k.stream_halves, k.stream_pv_warps}) {
        if (e != cudaSuccess || !stream.kernel) continue;
        e = cudaFuncSetAttribute(stream.kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                 static_cast<int>(stream.smem));
        // A producer kernel compiled with another register count than planned
        // would wait forever in setmaxnreg.inc: refuse to run it.
        cudaFuncAttributes attributes{};
        if (e == cudaSuccess && stream.registers > 0) e = cudaFuncGetAttributes(&attributes, stream.kernel);
        if (e == cudaSuccess && stream.registers > 0 && attributes.numRegs != stream.registers) {
          e = cudaErrorInvalidKernelImage;
        }
      }
    }
  }
  return e;
}

// Raises the kernels' shared-memory limits and allows 16-CTA clusters.
Status configure_kernels() {
  static OncePerDevice configured(set_kernel_attributes, "configuring the dsv4 kernels");
  return configured.run();
}

// Split CTAs of `group_heads` heads the current device holds at once (0
// without a device); cached.
int64_t split_slots(DType dtype, int group_heads) {
  static PerDeviceCache<int64_t, std::size(kServedDtypes) * std::size(kGroupSizes)> cache;
  const int device = current_device();
  if (device < 0 || !configure_kernels().ok()) {
    cudaGetLastError();
    return 0;
  }
  const size_t key = dtype_slot(dtype) * std::size(kGroupSizes) + group_slot(group_heads);
  return cache.get(device, key, [&]() -> int64_t {
    const KernelSet kernels = kernels_for(dtype, group_heads);
    int per_sm = 0;
    if (cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernels.split, Traits16::kThreads,
                                                      kernels.split_smem) != cudaSuccess) {
      cudaGetLastError();
      return 0;
    }
    return int64_t{per_sm} * device_sm_count();
  });
}

int32_t head_groups(int32_t heads, int group_heads) { return (heads + group_heads - 1) / group_heads; }

// How the split kernel covers a unit's groups: as many CTAs a unit as the
// GPU holds at once for all units (at most one a group), the groups dealt
// in equal runs. The bits do not depend on it (each group restarts).
struct SplitPlan {
  int32_t ctas;    // CTAs a unit
  int32_t groups;  // groups a CTA (the last one may walk fewer)
};

SplitPlan split_plan(const Dsv4DecodeArgs& args) {
  const int32_t groups = chunk_plan(args.width).column_groups;
  const int heads = group_heads(args, Dsv4Kernel::kSplit);
  const int64_t units = std::max<int64_t>(validation::saturating_mul(args.num_tokens, head_groups(args.num_heads, heads)), 1);
  const int64_t fit = std::clamp<int64_t>(split_slots(args.dtype, heads) / units, 1, groups);
  const int32_t per_cta = static_cast<int32_t>((groups + fit - 1) / fit);
  return {(groups + per_cta - 1) / per_cta, per_cta};
}

PoolParams pool_params(const KvPool& pool, int64_t element_bytes) {
  PoolParams params{static_cast<const uint8_t*>(pool.data), pool.rows(), pool.page_size,
                    pool.page_stride * element_bytes, pool.row_stride * element_bytes};
  // page_size 1 in the kernel means "rows evenly spaced by row_stride".
  if (pool.page_size == 1) params.row_stride = params.page_stride;
  if (pool.page_stride == pool.page_size * pool.row_stride) params.page_size = 1;
  return params;
}

Dsv4Params kernel_params(const Dsv4DecodeArgs& args, Dsv4Kernel kernel) {
  const ChunkPlan plan = chunk_plan(args.width);
  const int64_t q_bytes = args.dtype == DType::kFloat8E4M3 ? 1 : 2;
  Dsv4Params p{};
  p.q = static_cast<const uint8_t*>(args.q);
  p.q_token_stride = args.q_token_stride * q_bytes;
  p.q_head_stride = args.q_head_stride * q_bytes;
  p.swa = pool_params(args.swa_kv, q_bytes);
  p.compressed = args.compressed_kv.data ? pool_params(args.compressed_kv, q_bytes) : PoolParams{p.swa.data, 0, 1, 0, 0};
  p.indices = args.indices;
  p.indices_stride = args.indices_stride;
  p.width = args.width;
  p.lens = args.lens;
  p.seq_lens = args.seq_lens;
  p.cum_seq_lens_q = args.cum_seq_lens_q;
  p.q_len = args.q_len;
  p.num_requests = args.num_requests;
  p.sinks = args.sinks;
  p.bmm1_scale = args.bmm1_scale.value;
  p.bmm1_scale_ptr = args.bmm1_scale.device;
  p.bmm2_scale = args.bmm2_scale.value;
  p.bmm2_scale_ptr = args.bmm2_scale.device;
  p.out = static_cast<uint16_t*>(args.out);
  p.out_token_stride = args.out_token_stride;
  p.out_head_stride = args.out_head_stride;
  p.lse = args.lse;
  p.lse_token_stride = args.lse_token_stride;
  p.out_of_range_count = args.out_of_range_count;
  p.num_tokens = args.num_tokens;
  p.num_heads = args.num_heads;
  p.head_groups = head_groups(args.num_heads, group_heads(args, kernel));
  p.chunks = plan.chunks;
  p.chunks_per_group = plan.chunks_per_group;
  p.column_groups = plan.column_groups;
  const SplitPlan split = split_plan(args);
  p.split_ctas = split.ctas;
  p.split_groups = split.groups;
  instrument::set_skip_stages(p);
  return p;
}

}  // namespace

ChunkPlan chunk_plan(int32_t width) {
  ChunkPlan plan;
  plan.chunks = (width + Traits16::kChunkColumns - 1) / Traits16::kChunkColumns;
  plan.chunks_per_group = (plan.chunks + Traits16::kMaxGroups - 1) / Traits16::kMaxGroups;
  plan.column_groups = (plan.chunks + plan.chunks_per_group - 1) / plan.chunks_per_group;
  return plan;
}

Status kernels_support(const Dsv4DecodeArgs& args) {
  if (Status status = hopper_device_status(""); !status.ok()) return status;
  const Dsv4Kernel kernel = choose_kernel(args);
  const int64_t groups = chunk_plan(args.width).column_groups;
  // The combine kernel folds only 2..kMaxGroups groups (with_group_count);
  // every validated width (W >= 128) has that many.
  if (kernel == Dsv4Kernel::kSplit && (groups < 2 || groups > Traits16::kMaxGroups)) {
    return Status::NotSupported("width: the split path folds 2 to " + std::to_string(Traits16::kMaxGroups) +
                                " column groups, got " + std::to_string(groups));
  }
  const int heads = group_heads(args, kernel);
  const int64_t ctas_a_unit =
      kernel == Dsv4Kernel::kCluster ? groups
      : kernel == Dsv4Kernel::kSplit
          ? std::max<int64_t>(split_plan(args).ctas, kernels_for(args.dtype, heads).combine.slices)
          : 1;
  const int64_t ctas_a_token = head_groups(args.num_heads, heads) * ctas_a_unit;
  if (args.num_tokens > int64_t{0x7fffffff} / ctas_a_token) {
    return Status::NotSupported("num_tokens: at most " + std::to_string(int64_t{0x7fffffff} / ctas_a_token) +
                                " tokens a call with this kernel, heads and width (grid size), got " +
                                std::to_string(args.num_tokens));
  }
  return Status::Ok();
}

int64_t cluster_max_tokens(int32_t width, DType dtype) {
  // Cached per device, dtype and group count: the occupancy query is not free.
  static PerDeviceCache<int64_t, std::size(kServedDtypes) * (Traits16::kMaxGroups + 1)> cache;
  const int device = current_device();
  if (device < 0 || !configure_kernels().ok()) {
    cudaGetLastError();
    return 0;
  }
  const ChunkPlan plan = chunk_plan(width);
  return cache.get(device, dtype_slot(dtype) * (Traits16::kMaxGroups + 1) + plan.column_groups, [&]() -> int64_t {
    const KernelSet kernels = kernels_for(dtype, Traits16::kHeads);
    const LaunchConfig launch(plan.column_groups, Traits16::kThreads, kernels.cluster_smem, false, nullptr,
                              static_cast<unsigned>(plan.column_groups));
    int clusters = 0;
    if (cudaOccupancyMaxActiveClusters(&clusters, kernels.cluster, &launch.config) != cudaSuccess) {
      cudaGetLastError();
      return 0;
    }
    return clusters;
  });
}

Dsv4Kernel choose_kernel(const Dsv4DecodeArgs& args, bool split_workspace) {
  if (args.kernel != Dsv4Kernel::kAuto) return args.kernel;
  // Head groups of one token are independent work, like more tokens.
  const int heads = group_heads(args, Dsv4Kernel::kAuto);
  const int64_t units = validation::saturating_mul(args.num_tokens, head_groups(args.num_heads, heads));
  const ChunkPlan plan = chunk_plan(args.width);
  const bool wide = plan.chunks_per_group > 1;
  const bool splittable = plan.column_groups > kSplitMinGroups;
  const bool fp8 = args.dtype == DType::kFloat8E4M3;
  const int64_t min_ctas = heads == Traits64::kHeads ? kSplitMinCtas64Heads
                           : !wide                   ? kSplitMinCtas
                           : fp8                     ? kSplitMinCtasWideFp8
                                                     : kSplitMinCtasWideBf16;
  // Width 128 (2 groups): BF16 runs the split path for the fewest units,
  // each unit's 2 CTAs at once.
  const bool narrow_bf16 = plan.column_groups == kSplitMinGroups && !fp8 && units <= kSplitMaxUnitsNarrowBf16;
  const int64_t ctas_a_unit = splittable ? min_ctas : narrow_bf16 ? kSplitMinGroups : 0;
  const bool split = split_workspace && ctas_a_unit > 0 &&
                     split_slots(args.dtype, heads) >= validation::saturating_mul(ctas_a_unit, units);
  // 64-head calls: only the 64-head kernels (the cluster kernel's 16-head
  // groups would give other bits; docs/kernels/heads64.md).
  if (heads == Traits64::kHeads) return split ? Dsv4Kernel::kSplit : Dsv4Kernel::kStream;
  const ClusterBounds& bounds = fp8 ? kClusterBoundsFp8 : kClusterBoundsBf16;
  const int64_t most = !splittable        ? 0
                       : split_workspace ? (wide ? bounds.before_split_wide : 0)
                                         : (wide ? bounds.without_split_wide : bounds.without_split);
  // No cluster fits without a device or on a partitioned GPU: cluster_max_tokens() is 0.
  if (units <= most && cluster_max_tokens(args.width, args.dtype) > 0) return Dsv4Kernel::kCluster;
  return split ? Dsv4Kernel::kSplit : Dsv4Kernel::kStream;
}

size_t split_workspace_bytes(const Dsv4DecodeArgs& args) {
  if (args.num_tokens <= 0 || args.width < kSwaColumns) return 0;
  const int heads = group_heads(args, Dsv4Kernel::kSplit);
  // Saturates: a T beyond any buffer asks for more bytes than exist instead of wrapping.
  const int64_t units = validation::saturating_mul(args.num_tokens, head_groups(args.num_heads, heads));
  const int32_t groups = chunk_plan(args.width).column_groups;
  const int64_t record = heads == Traits64::kHeads ? SplitWorkspace<Traits64>::kRecordBytes
                                                   : SplitWorkspace<Traits16>::kRecordBytes;
  return static_cast<size_t>(validation::saturating_mul(validation::saturating_mul(units, groups), record));
}

bool split_workspace_fits(const Dsv4DecodeArgs& args, const void* workspace, size_t workspace_bytes) {
  return workspace && workspace_bytes >= split_workspace_bytes(args) &&
         reinterpret_cast<uintptr_t>(workspace) % SplitWorkspace<Traits16>::kAlignment == 0;
}

Status launch_dsv4(const Dsv4DecodeArgs& args, void* workspace, size_t workspace_bytes, CUstream_st* stream) {
  if (Status status = configure_kernels(); !status.ok()) return status;
  Dsv4Kernel kernel = choose_kernel(args);
  if (kernel == Dsv4Kernel::kSplit && !split_workspace_fits(args, workspace, workspace_bytes)) {
    kernel = choose_kernel(args, false);  // only kAuto gets here: dsv4_decode refuses a forced kSplit
  }
  Dsv4Params p = kernel_params(args, kernel);
  const bool cluster = kernel == Dsv4Kernel::kCluster, split = kernel == Dsv4Kernel::kSplit;
  const ChunkPlan plan = chunk_plan(args.width);
  const KernelSet kernels = kernels_for(args.dtype, group_heads(args, kernel));
  const int64_t units = args.num_tokens * p.head_groups;
  if (split) p.workspace = static_cast<uint8_t*>(workspace);

  // At most one unit per two SMs: the stream kernel in dim halves (same
  // bits, twice the CTAs); at most one unit an SM: the deep stream kernel
  // (FP8, 16 heads: same bits, more rows in flight), with P V warps where a
  // token has more than kPvWarpsMinChunks - 1 chunks
  // (docs/kernels/large_batch.md). A diagnostic build can force the deep
  // kernel without (1) or with (2) P V warps (instrument::deep_kernel).
  const int64_t sms = cluster || split ? 0 : device_sm_count();
  const int deep_override = instrument::deep_kernel();
  const bool pv_warps = deep_override == 1   ? false
                        : deep_override == 2 ? true
                                             : plan.chunks >= kPvWarpsMinChunks;
  const StreamKernel& deep = pv_warps && kernels.stream_pv_warps.kernel ? kernels.stream_pv_warps : kernels.stream_deep;
  const StreamKernel& streamed = cluster || split                                   ? kernels.stream
                                 : kernels.stream_halves.kernel && 2 * units <= sms ? kernels.stream_halves
                                 : deep.kernel && units <= sms                      ? deep
                                                                                    : kernels.stream;
  const int64_t ctas = units * (cluster ? plan.column_groups : split ? p.split_ctas : streamed.dim_parts);
  const size_t smem = cluster ? kernels.cluster_smem
                      : split ? split_launch_smem(kernels.split_smem, ctas, args.enable_pdl)
                              : streamed.smem;
  const void* first = cluster ? kernels.cluster : split ? kernels.split : streamed.kernel;
  const LaunchConfig launch(ctas, cluster || split ? Traits16::kThreads : streamed.threads, smem, args.enable_pdl, stream,
                            cluster ? static_cast<unsigned>(plan.column_groups) : 0u);
  if (Status status = launch_kernel(first, launch, &p, "launching a dsv4 kernel");
      !status.ok() || !split || instrument::skips(p, instrument::kSkipCombineLaunch)) {
    return status;
  }
  // The combine kernel always overlaps the split kernel's tail (PDL): it
  // waits for the split kernel's results before it reads them.
  const CombineKernel& combine =
      units <= SplitWorkspace<Traits16>::kFewUnits ? kernels.combine_few_units : kernels.combine;
  return launch_kernel(combine.kernel, LaunchConfig(units * combine.slices, combine.threads, 0, true, stream), &p,
                       "launching the dsv4 combine kernel");
}

}  // namespace sparse_decode::dsv4
