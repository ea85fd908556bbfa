// Host side of dsv4_decode before the launch: the plans, the support
// check, kAuto's choice (its bounds: dispatch_rules.h) and the split path's
// workspace.
#include "dsv4/dispatch.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <iterator>
#include <string>

#include "common/device_support.h"
#include "common/launch.h"
#include "common/per_device.h"
#include "common/validation.h"
#include "dsv4/configs.cuh"
#include "dsv4/dispatch_rules.h"
#include "dsv4/launch.h"
#include "dsv4/smem.cuh"

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

static_assert(SplitWorkspace<Traits16>::kValueBytes == SplitWorkspace<SplitTraitsBf16>::kValueBytes &&
                  SplitWorkspace<Traits16>::kAlignment == SplitWorkspace<Traits64>::kAlignment,
              "one workspace layout for every dtype, and one alignment for every head group size");
static_assert(4 * SplitWorkspace<Traits16>::kValueBytes == SplitWorkspace<Traits64>::kValueBytes &&
                  4 * SplitWorkspace<Traits16>::kStatsBytes == SplitWorkspace<Traits64>::kStatsBytes,
              "a 64-head unit's group record is four 16-head records: workspace_size(args) is the same at H = 64, 128");

// Whether a call runs its stream kernel and split path with 64-head groups
// (docs/kernels/heads64.md): FP8 rows, H = 64 or 128, and groups of one
// chunk (W <= 1024: the 64-head stream kernel folds a group's P V a dim
// block at a time as it is computed). Depends on H, W and the dtype only, never on T:
// kAuto picks among the kernels of one head group size, so the bits of a
// token do not depend on its batch.
bool heads64(const Dsv4DecodeArgs& args) {
  return args.dtype == DType::kFloat8E4M3 && args.num_heads % Traits64::kHeads == 0 &&
         chunk_plan(args.width).chunks_per_group == 1;
}

int dtype_slot(DType dtype) { return dtype == DType::kBFloat16 ? 1 : 0; }
int unit_heads_slot(int unit_heads) { return unit_heads == Traits64::kHeads ? 1 : 0; }

// Split CTAs of `unit_heads` heads the current device holds at once (0
// without a device); cached.
int64_t split_slots(DType dtype, int unit_heads) {
  static PerDeviceCache<int64_t, std::size(kServedDtypes) * std::size(kUnitHeads)> cache;
  const int device = current_device();
  if (device < 0 || !configure_kernels().ok()) {
    cudaGetLastError();
    return 0;
  }
  const size_t key = dtype_slot(dtype) * std::size(kUnitHeads) + unit_heads_slot(unit_heads);
  return cache.get(device, key, [&]() -> int64_t {
    const KernelSet kernels = kernels_for(dtype, unit_heads);
    int per_sm = 0;
    if (cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernels.split, Traits16::kThreads,
                                                      kernels.split_smem) != cudaSuccess) {
      cudaGetLastError();
      return 0;
    }
    return int64_t{per_sm} * device_sm_count();
  });
}

}  // namespace

ChunkPlan chunk_plan(int32_t width) {
  ChunkPlan plan;
  plan.chunks = (width + Traits16::kChunkColumns - 1) / Traits16::kChunkColumns;
  plan.chunks_per_group = (plan.chunks + Traits16::kMaxGroups - 1) / Traits16::kMaxGroups;
  plan.column_groups = (plan.chunks + plan.chunks_per_group - 1) / plan.chunks_per_group;
  return plan;
}

int unit_heads(const Dsv4DecodeArgs& args, Dsv4Kernel kernel) {
  return kernel != Dsv4Kernel::kCluster && heads64(args) ? Traits64::kHeads : Traits16::kHeads;
}

int32_t head_groups(int32_t heads, int unit_heads) { return (heads + unit_heads - 1) / unit_heads; }

SplitPlan split_plan(const Dsv4DecodeArgs& args) {
  const int32_t groups = chunk_plan(args.width).column_groups;
  const int heads = unit_heads(args, Dsv4Kernel::kSplit);
  const int64_t units =
      std::max<int64_t>(validation::saturating_mul(args.num_tokens, head_groups(args.num_heads, heads)), 1);
  const int64_t fit = std::clamp<int64_t>(split_slots(args.dtype, heads) / units, 1, groups);
  const int32_t per_cta = static_cast<int32_t>((groups + fit - 1) / fit);
  return {(groups + per_cta - 1) / per_cta, per_cta};
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
  const int heads = unit_heads(args, kernel);
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
  constexpr DispatchRules rules = kDispatchRules;
  // Head groups of one token are independent work, like more tokens.
  const int heads = unit_heads(args, Dsv4Kernel::kAuto);
  const int64_t units = validation::saturating_mul(args.num_tokens, head_groups(args.num_heads, heads));
  const ChunkPlan plan = chunk_plan(args.width);
  const bool wide = plan.chunks_per_group > 1;
  const bool splittable = plan.column_groups > rules.split_min_groups;
  const bool fp8 = args.dtype == DType::kFloat8E4M3;
  const int64_t min_ctas = heads == Traits64::kHeads ? rules.split_min_ctas_64_heads
                           : !wide                   ? rules.split_min_ctas
                           : fp8                     ? rules.split_min_ctas_wide_fp8
                                                     : rules.split_min_ctas_wide_bf16;
  // Width 128 (2 groups): BF16 runs the split path for the fewest units,
  // each unit's 2 CTAs at once.
  const bool narrow_bf16 =
      plan.column_groups == rules.split_min_groups && !fp8 && units <= rules.split_max_units_narrow_bf16;
  const int64_t ctas_a_unit = splittable ? min_ctas : narrow_bf16 ? rules.split_min_groups : 0;
  const bool split = split_workspace && ctas_a_unit > 0 &&
                     split_slots(args.dtype, heads) >= validation::saturating_mul(ctas_a_unit, units);
  // 64-head calls: only the 64-head kernels (the cluster kernel's 16-head
  // groups would give other bits; docs/kernels/heads64.md).
  if (heads == Traits64::kHeads) return split ? Dsv4Kernel::kSplit : Dsv4Kernel::kStream;
  const ClusterBounds& bounds = fp8 ? rules.cluster_fp8 : rules.cluster_bf16;
  const int64_t most = !splittable        ? 0
                       : split_workspace ? (wide ? bounds.before_split_wide : 0)
                                         : (wide ? bounds.without_split_wide : bounds.without_split);
  // No cluster fits without a device or on a partitioned GPU: cluster_max_tokens() is 0.
  if (units <= most && cluster_max_tokens(args.width, args.dtype) > 0) return Dsv4Kernel::kCluster;
  return split ? Dsv4Kernel::kSplit : Dsv4Kernel::kStream;
}

size_t split_workspace_bytes(const Dsv4DecodeArgs& args) {
  if (args.num_tokens <= 0 || args.width < kSwaColumns) return 0;
  const int heads = unit_heads(args, Dsv4Kernel::kSplit);
  // Saturates: a T beyond any buffer asks for more bytes than exist instead of wrapping.
  const int64_t units = validation::saturating_mul(args.num_tokens, head_groups(args.num_heads, heads));
  const int32_t groups = chunk_plan(args.width).column_groups;
  const int64_t record = heads == Traits64::kHeads ? SplitWorkspace<Traits64>::kRecordBytes
                                                   : SplitWorkspace<Traits16>::kRecordBytes;
  return static_cast<size_t>(validation::saturating_mul(validation::saturating_mul(units, groups), record));
}

size_t call_workspace_bytes(const Dsv4DecodeArgs& args) {
  return choose_kernel(args) == Dsv4Kernel::kSplit ? split_workspace_bytes(args) : 0;
}

bool split_workspace_fits(const Dsv4DecodeArgs& args, const void* workspace, size_t workspace_bytes) {
  return workspace && workspace_bytes >= split_workspace_bytes(args) &&
         reinterpret_cast<uintptr_t>(workspace) % SplitWorkspace<Traits16>::kAlignment == 0;
}

}  // namespace sparse_decode::dsv4
