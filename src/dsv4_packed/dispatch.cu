// Host side of the packed-row kernel: plan, support check, launch.
#include "dsv4_packed/dispatch.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <string>

#include "common/device_support.h"
#include "common/per_device.h"
#include "common/math.cuh"
#include "common/validation.h"
#include "dsv4_packed/cluster_smem.cuh"
#include "dsv4_packed/instantiations/kernels.h"
#include "dsv4_packed/params.h"
#include "dsv4_packed/split_workspace.cuh"
#include "dsv4_packed/stream_smem.cuh"

namespace sparse_decode::dsv4_packed {

namespace {

constexpr size_t kSmemBytes = sizeof(ClusterSmem);

int set_kernel_attributes() {
  cudaError_t e = cudaFuncSetAttribute(cluster_kernel_pointer(), cudaFuncAttributeMaxDynamicSharedMemorySize,
                                       static_cast<int>(kSmemBytes));
  if (e == cudaSuccess) e = cudaFuncSetAttribute(cluster_kernel_pointer(), cudaFuncAttributeNonPortableClusterSizeAllowed, 1);
  return e;
}

// Raises the cluster kernel's shared-memory limit and allows 16-CTA clusters.
Status configure_kernel() {
  static OncePerDevice configured(set_kernel_attributes, "configuring the packed-row kernel");
  return configured.run();
}

int set_stream_kernel_attributes() {
  // The stream kernel's setmaxnreg plan assumes the launch allocation it was
  // compiled for: with fewer registers setmaxnreg.inc would wait forever, so
  // a build that compiled it otherwise is refused (InvalidDeviceFunction).
  cudaError_t e = cudaSuccess;
  for (int unit_ctas : {0, 1, 2}) {
    cudaFuncAttributes attributes{};
    if (e == cudaSuccess) e = cudaFuncGetAttributes(&attributes, stream_kernel_pointer(unit_ctas));
    if (e == cudaSuccess && attributes.numRegs != StreamTraits::kLaunchRegisters) {
      e = cudaErrorInvalidDeviceFunction;
    }
    if (e == cudaSuccess) {
      // The split path (unit_ctas 0) may ask for an SM alone (split_launch_smem).
      const size_t most = std::max(sizeof(StreamSmem), unit_ctas == 0 ? kSmAloneSmemBytes : 0);
      e = cudaFuncSetAttribute(stream_kernel_pointer(unit_ctas), cudaFuncAttributeMaxDynamicSharedMemorySize,
                               static_cast<int>(most));
    }
  }
  return e;
}

// Raises the stream kernel's shared-memory limit, after checking its register count.
Status configure_stream_kernel() {
  static_assert(StreamTraits::kLaunchRegisters == 80, "the message below names the register count");
  static OncePerDevice configured(set_stream_kernel_attributes,
                                  "configuring the packed-row stream kernel (it must compile to 80 registers a thread)");
  return configured.run();
}

int head_groups_of(int32_t heads) { return (heads + ClusterTraits::kHeads - 1) / ClusterTraits::kHeads; }

// Clusters of the grid: one a (token, 16-head group).
int64_t clusters_of(const Dsv4PackedDecodeArgs& args) {
  return validation::saturating_mul(args.num_tokens, head_groups_of(args.num_heads));
}

int32_t chunks_of(int32_t width) { return (width + ClusterTraits::kChunkColumns - 1) / ClusterTraits::kChunkColumns; }

SegmentParams segment_params(const PackedSegment& segment) {
  SegmentParams params{};
  params.pool = segment.pool.data;
  params.page_stride = segment.pool.page_stride;
  params.scale_offset = segment.pool.page_size * kPackedDataBytes;
  params.rows = segment.pool.rows();
  // An int32 index is below 2^31: a larger page size puts every index in page 0.
  params.page_size = static_cast<uint32_t>(std::min<int64_t>(segment.pool.page_size, int64_t{1} << 31));
  params.indices = segment.indices;
  params.indices_stride = segment.indices_stride;
  params.width = segment.width;
  params.chunks = chunks_of(segment.width);
  params.lens = segment.lens;
  return params;
}

}  // namespace

ClusterPlan packed_plan(int32_t swa_width, int32_t extra_width, int64_t clusters) {
  ClusterPlan plan;
  plan.chunks = chunks_of(swa_width) + chunks_of(extra_width);
  // As many CTAs a cluster as one wave of the grid has room for, between 1
  // and 16 (docs/kernels/packed.md, v3): beyond a wave, a CTA that walks
  // more chunks costs less than the exchange and the waves of small CTAs.
  const int64_t room = kOneWaveCtas / std::max<int64_t>(clusters, 1);
  const int max_ctas = static_cast<int>(std::clamp<int64_t>(room, 1, ClusterTraits::kMaxClusterCtas));
  plan.chunks_per_cta = (plan.chunks + max_ctas - 1) / max_ctas;
  plan.cluster_ctas = (plan.chunks + plan.chunks_per_cta - 1) / plan.chunks_per_cta;
  return plan;
}

// kAuto's choice without the split path (packed.md, "Dispatch"; units are
// (token, 16-head group) pairs): a token of at most 2 chunks (W <= 128)
// runs the stream kernel with one CTA a unit; otherwise up to
// kClusterMaxUnits units the cluster kernel, up to kPairMaxUnits the stream
// kernel with two CTAs a unit (each walking half of the chunks: one pair an
// SM of a 132-SM part), beyond it one CTA a unit. Constants, not the
// device's SM count, so that the choice (and with it the bits) is the same
// on every Hopper part.
constexpr int64_t kClusterMaxUnits = 16;
constexpr int64_t kPairMaxUnits = 66;
constexpr int32_t kStreamMaxChunksAlways = 2;

int32_t token_chunks(const Dsv4PackedDecodeArgs& args) {
  return chunks_of(args.swa.width) + (args.extra.given() ? chunks_of(args.extra.width) : 0);
}

// With the workspace, whether the split path serves `units` units of
// `chunks` chunks a token: where it measured faster than the cluster and
// stream kernels (packed.md, "Fourteenth session": 16 and 64 heads, W = 128
// to 4224, T = 1 to 192, with and without PDL). Past kSplitMaxUnits one wave
// holds a single CTA a unit, so there is nothing to split.
constexpr int64_t kSplitMaxUnits = kOneWaveCtas / 2;

bool split_serves(int32_t chunks, int64_t units) {
  if (units > kSplitMaxUnits || chunks < 2) return false;
  if (chunks <= 2) return units <= 64;  // W = 128: two CTAs a unit beat one walking both chunks (tie at 64)
  if (chunks <= 4) return units <= 32;  // W = 256; from 40 units the stream kernel
  // W = 640: from 1 unit (since the combine kernel's loads issue at once:
  // T = 1 8.7 against the cluster kernel's 10.0 µs); past 32 the stream
  // kernel's pair (and from 67 units one CTA a unit) wins.
  if (chunks <= 10) return units <= 32;
  // W = 1152: the pair wins between 49 and 66 units (a tie at 48); beyond,
  // one CTA a unit walking 18 chunks loses to the split path's two.
  if (chunks <= 18) return units <= 48 || units > kPairMaxUnits;
  return true;  // W = 2176 and 4224: faster at every unit count up to one wave
}

Dsv4PackedKernel packed_kernel_choice(const Dsv4PackedDecodeArgs& args, bool split_workspace) {
  if (args.kernel != Dsv4PackedKernel::kAuto) return args.kernel;
  const int64_t units = clusters_of(args);
  if (split_workspace && split_serves(token_chunks(args), units)) return Dsv4PackedKernel::kSplit;
  if (token_chunks(args) <= kStreamMaxChunksAlways) return Dsv4PackedKernel::kStream;
  return units > kClusterMaxUnits ? Dsv4PackedKernel::kStream : Dsv4PackedKernel::kCluster;
}

SplitPlan packed_split_plan(int32_t chunks, int64_t units) {
  const int64_t most = std::min<int64_t>(chunks, SplitWorkspace::kMaxShares);
  const int64_t fit = std::clamp<int64_t>(kOneWaveCtas / std::max<int64_t>(units, 1), 1, std::max<int64_t>(most, 1));
  SplitPlan plan;
  plan.chunks_per_cta = static_cast<int32_t>((chunks + fit - 1) / fit);
  plan.ctas = plan.chunks_per_cta > 0 ? (chunks + plan.chunks_per_cta - 1) / plan.chunks_per_cta : 1;
  return plan;
}

// The split path's plan of a call.
SplitPlan split_plan_of(const Dsv4PackedDecodeArgs& args) {
  return packed_split_plan(token_chunks(args), clusters_of(args));
}

size_t packed_split_workspace_bytes(const Dsv4PackedDecodeArgs& args) {
  if (args.num_tokens <= 0) return 0;
  // Saturates: a T beyond any buffer asks for more bytes than exist instead of wrapping.
  const int64_t shares = validation::saturating_mul(clusters_of(args), split_plan_of(args).ctas);
  return static_cast<size_t>(
      validation::saturating_mul(shares, static_cast<int64_t>(SplitWorkspace::kShareBytes)));
}

bool packed_split_workspace_fits(const Dsv4PackedDecodeArgs& args, const void* workspace, size_t workspace_bytes) {
  return workspace && workspace_bytes >= packed_split_workspace_bytes(args) &&
         reinterpret_cast<uintptr_t>(workspace) % SplitWorkspace::kAlignment == 0;
}

// CTAs a unit of the stream kernel (kAuto's rule, also when it is forced).
int stream_unit_ctas(const Dsv4PackedDecodeArgs& args) {
  return clusters_of(args) <= kPairMaxUnits && token_chunks(args) > kStreamMaxChunksAlways ? 2 : 1;
}

Status packed_supports(const Dsv4PackedDecodeArgs& args) {
  const Dsv4PackedKernel choice = packed_kernel_choice(args);
  if (choice == Dsv4PackedKernel::kSplit) {
    // The split kernel's grid (ctas a unit) and the combine kernel's (a CTA a unit's warp).
    const int64_t ctas = std::max<int64_t>(split_plan_of(args).ctas, StreamTraits::kWarps);
    if (clusters_of(args) > int64_t{0x7fffffff} / ctas) {
      return Status::NotSupported("dsv4_decode_packed: num_tokens: at most " +
                                  std::to_string(int64_t{0x7fffffff} / ctas) +
                                  " (token, 16-head group) units a call on the split path (grid size)");
    }
    return hopper_device_status("dsv4_decode_packed: ");
  }
  if (choice == Dsv4PackedKernel::kStream) {
    if (clusters_of(args) > int64_t{0x7fffffff}) {
      return Status::NotSupported("dsv4_decode_packed: num_tokens: at most 2^31 - 1 (token, 16-head group) units a call");
    }
    return hopper_device_status("dsv4_decode_packed: ");
  }
  const ClusterPlan plan = packed_plan(args.swa.width, args.extra.given() ? args.extra.width : 0, clusters_of(args));
  if (args.num_tokens > int64_t{0x7fffffff} / plan.cluster_ctas) {
    return Status::NotSupported("dsv4_decode_packed: num_tokens: at most " +
                                std::to_string(int64_t{0x7fffffff} / plan.cluster_ctas) +
                                " tokens a call at these widths (grid size), got " + std::to_string(args.num_tokens));
  }
  return hopper_device_status("dsv4_decode_packed: ");
}

Status launch_packed(const Dsv4PackedDecodeArgs& args, void* workspace, size_t workspace_bytes, CUstream_st* stream) {
  const bool has_extra = args.extra.given();
  Dsv4PackedKernel kernel_kind = packed_kernel_choice(args);
  if (kernel_kind == Dsv4PackedKernel::kSplit && !packed_split_workspace_fits(args, workspace, workspace_bytes)) {
    kernel_kind = packed_kernel_choice(args, false);  // only kAuto gets here: a forced kSplit is refused before
  }
  const bool split = kernel_kind == Dsv4PackedKernel::kSplit;
  const bool stream_kernel = split || kernel_kind == Dsv4PackedKernel::kStream;
  if (Status status = stream_kernel ? configure_stream_kernel() : configure_kernel(); !status.ok()) return status;
  const ClusterPlan plan = stream_kernel ? ClusterPlan{}
                                        : packed_plan(args.swa.width, has_extra ? args.extra.width : 0, clusters_of(args));

  Params p{};
  p.q = static_cast<const uint16_t*>(args.q);
  p.q_token_stride = args.q_token_stride;
  p.q_head_stride = args.q_head_stride;
  p.swa = segment_params(args.swa);
  if (has_extra) p.extra = segment_params(args.extra);
  p.num_heads = args.num_heads;
  p.chunks_per_cta = plan.chunks_per_cta;
  p.scale_log2 = args.softmax_scale * kLog2e;
  p.sinks = args.sinks;
  p.out = static_cast<uint16_t*>(args.out);
  p.out_token_stride = args.out_token_stride;
  p.out_head_stride = args.out_head_stride;
  p.lse = args.lse;
  p.lse_token_stride = args.lse_token_stride;
  p.out_of_range_count = args.out_of_range_count;
  const SplitPlan split_plan = split ? split_plan_of(args) : SplitPlan{};
  if (split) {
    p.workspace = static_cast<uint8_t*>(workspace);
    p.split_ctas = split_plan.ctas;
  }

  // Every launch has a cluster dimension (1 or 2 CTAs a stream unit, the
  // plan's CTAs a cluster kernel token; 1 for the split path) and PDL on request.
  const void* kernel = nullptr;
  dim3 grid, block;
  size_t smem_bytes = 0;
  unsigned cluster_ctas = 1;
  if (stream_kernel) {
    const int unit_ctas = split ? split_plan.ctas : stream_unit_ctas(args);
    kernel = stream_kernel_pointer(split ? 0 : unit_ctas);
    grid = dim3(static_cast<unsigned>(clusters_of(args) * unit_ctas));
    block = dim3(StreamTraits::kLaunchThreads);
    smem_bytes = sizeof(StreamSmem);
    if (split) smem_bytes = split_launch_smem(smem_bytes, grid.x, args.enable_pdl);
    cluster_ctas = split ? 1u : static_cast<unsigned>(unit_ctas);
  } else {
    kernel = cluster_kernel_pointer();
    grid = dim3(static_cast<unsigned>(args.num_tokens * plan.cluster_ctas), head_groups_of(args.num_heads));
    block = dim3(ClusterTraits::kThreads);
    smem_bytes = kSmemBytes;
    cluster_ctas = static_cast<unsigned>(plan.cluster_ctas);
  }
  const char* what = stream_kernel ? "launching the packed-row stream kernel" : "launching the packed-row kernel";
  if (Status status =
          launch_kernel(kernel, LaunchConfig(grid, block, smem_bytes, args.enable_pdl, stream, cluster_ctas), &p, what);
      !status.ok() || !split) {
    return status;
  }
  // The combine kernel always overlaps the split kernel's tail (PDL): it
  // waits for the shares before it reads them.
  return launch_kernel(combine_kernel_pointer(split_plan.ctas),
                       LaunchConfig(clusters_of(args) * StreamTraits::kWarps,
                                    SplitWorkspace::kCombineThreads, 0, true, stream, 1u),
                       &p, "launching the packed-row combine kernel");
}

}  // namespace sparse_decode::dsv4_packed
