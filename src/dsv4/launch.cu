// The launch of dsv4_decode's kernels: the registry's instances with their
// launch shapes, their configuration once a device, the parameter block of
// a call, and the launch through LaunchConfig / launch_kernel.
#include "dsv4/launch.h"

#include <cuda_runtime.h>

#include <algorithm>

#include "common/device_support.h"
#include "common/instrument.cuh"
#include "common/instrument.h"
#include "common/launch.h"
#include "common/per_device.h"
#include "dsv4/configs.cuh"
#include "dsv4/dispatch.h"
#include "dsv4/dispatch_rules.h"
#include "dsv4/instantiations/kernels.h"
#include "dsv4/params.h"
#include "dsv4/smem.cuh"
#include "dsv4/traits.cuh"
#include "dsv4/validate_views.h"

namespace sparse_decode::dsv4 {
namespace {

static_assert(kUnitHeads[0] == ClusterTraitsFp8::kHeads && kUnitHeads[1] == StreamTraitsFp8H64::kHeads,
              "the head group sizes of the registry's instances");

template <class StreamT>
StreamKernel stream_kernel_of(const void* kernel) {
  int registers = 0;
  if constexpr (StreamT::kProducerWarps > 0) {
    registers = ProducerRegisters<StreamT, resident_ctas(sizeof(StreamSmem<StreamT>))>::kLaunch;
  }
  return {kernel, sizeof(StreamSmem<StreamT>), StreamT::kLaunchThreads, registers, StreamT::kDimParts};
}

template <class SplitT>
CombineKernel combine_kernel_of(const void* kernel, int slices) {
  return {kernel, slices, SplitT::kHeads * SplitT::kGranules / slices};
}

// The plan sizes are the plain form's: the other forms have the same plans.
template <class ClusterT, class StreamT, class SplitT>
KernelSet kernel_set(const void* cluster, const void* stream, const void* split, const void* (*combine)(bool, bool),
                     bool general) {
  using Workspace = SplitWorkspace<SplitT>;
  static_assert(sizeof(StreamSmem<StreamT>) == sizeof(StreamSmem<GeneralTraits<StreamT>>) &&
                    sizeof(ClusterSmem<ClusterT>) == sizeof(ClusterSmem<GeneralTraits<ClusterT>>) &&
                    sizeof(SplitSmem<SplitT>) == sizeof(SplitSmem<GeneralTraits<SplitT>>),
                "every form of a kernel has one shared-memory plan");
  return {cluster,
          stream_kernel_of<StreamT>(stream),
          split,
          combine_kernel_of<SplitT>(combine(false, general), Workspace::kCombineSlices),
          combine_kernel_of<SplitT>(combine(true, general), Workspace::kFewUnitsSlices),
          sizeof(ClusterSmem<ClusterT>),
          sizeof(SplitSmem<SplitT>)};
}

int set_kernel_attributes() {
  cudaError_t e = cudaSuccess;
  for (DType dtype : kServedDtypes) {
    for (int heads : kUnitHeads) {  // BF16 has 16-head kernels only: set twice
      for (KernelForm form : {KernelForm::kPlain, KernelForm::kGeneral, KernelForm::kPageWalk}) {
        if (form == KernelForm::kPageWalk && dtype != DType::kFloat8E4M3) continue;
        const KernelSet k = kernels_for(dtype, heads, form);
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
  }
  return e;
}

PoolParams pool_params(const KvPool& pool, int64_t element_bytes) {
  PoolParams params{static_cast<const uint8_t*>(pool.data), pool.rows(), pool.page_size,
                    pool.page_stride * element_bytes, pool.row_stride * element_bytes};
  // page_size 1 in the kernel means "rows evenly spaced by row_stride".
  if (pool.page_size == 1) params.row_stride = params.page_stride;
  if (pool.page_stride == pool.page_size * pool.row_stride) params.page_size = 1;
  return params;
}

// How a call's tokens are laid out for the kernels: the plain form takes
// flat arguments (a view that merges into one token stride counts as flat:
// validate_views.h), lens at stride 1 and lse without the sink; anything
// else runs the general form. The page walk's metadata (always the general
// form) takes part in the choice of request_tokens and gets its strides
// resolved in `pages`.
struct TokenLayout {
  bool general = false;
  uint32_t request_tokens = 1;  // q_len of the views (general form), 1 without any
  validation::TokenStrides q, indices, lens, out, lse;
};

TokenLayout token_layout(const Dsv4DecodeArgs& args, PageWalkParams* pages = nullptr) {
  TokenLayout l;
  const bool walk = pages != nullptr;
  const PageWalkParams given = walk ? *pages : PageWalkParams{};
  validation::TokenStrides swa_rows, swa_lens, block_table, walk_lens;  // the page walk's
  l.request_tokens = validation::resolve_token_strides(
      {{&l.q, args.q_token_stride, args.q_request_stride, true},
       {&l.indices, args.indices_stride, args.indices_request_stride, true},
       {&l.lens, args.lens_token_stride, args.lens_request_stride, args.lens != nullptr},
       {&l.out, args.out_token_stride, args.out_request_stride, true},
       {&l.lse, args.lse_token_stride, args.lse_request_stride, args.lse != nullptr},
       {&swa_rows, given.swa_rows_stride, given.swa_rows_request_stride, walk},
       {&swa_lens, given.swa_lens_token_stride, given.swa_lens_request_stride, walk},
       {&block_table, given.block_table_stride, given.block_table_request_stride, walk},
       {&walk_lens, given.lens_token_stride, given.lens_request_stride, walk}},
      args.q_len);
  const bool lse_with_sink = args.sink_term == SinkTerm::kInOutputAndLse && args.sinks && args.lse;
  l.general = l.request_tokens != 1 || (args.lens && l.lens.token_stride != 1) || lse_with_sink;
  if (walk) {
    pages->swa_rows_stride = swa_rows.token_stride;
    pages->swa_rows_request_stride = swa_rows.request_stride;
    pages->swa_lens_token_stride = swa_lens.token_stride;
    pages->swa_lens_request_stride = swa_lens.request_stride;
    pages->block_table_stride = block_table.token_stride;
    pages->block_table_request_stride = block_table.request_stride;
    pages->lens_token_stride = walk_lens.token_stride;
    pages->lens_request_stride = walk_lens.request_stride;
  }
  return l;
}

Dsv4Params kernel_params(const Dsv4DecodeArgs& args, Dsv4Kernel kernel, const TokenLayout& layout) {
  const ChunkPlan plan = chunk_plan(args.width);
  const int64_t q_bytes = args.dtype == DType::kFloat8E4M3 ? 1 : 2;
  Dsv4Params p{};
  p.q = static_cast<const uint8_t*>(args.q);
  p.q_token_stride = layout.q.token_stride * q_bytes;
  p.q_head_stride = args.q_head_stride * q_bytes;
  p.swa = pool_params(args.swa_kv, q_bytes);
  p.compressed = args.compressed_kv.data ? pool_params(args.compressed_kv, q_bytes) : PoolParams{p.swa.data, 0, 1, 0, 0};
  p.indices = args.indices;
  p.indices_stride = layout.indices.token_stride;
  p.width = args.width;
  p.lens = args.lens;
  p.seq_lens = args.seq_lens;
  p.cum_seq_lens_q = args.cum_seq_lens_q;
  p.q_len = args.q_len;
  p.num_requests = args.num_requests;
  p.sinks = args.sink_term == SinkTerm::kNone ? nullptr : args.sinks;
  p.bmm1_scale = args.bmm1_scale.value;
  p.bmm1_scale_ptr = args.bmm1_scale.device;
  p.bmm2_scale = args.bmm2_scale.value;
  p.bmm2_scale_ptr = args.bmm2_scale.device;
  p.out = static_cast<uint16_t*>(args.out);
  p.out_token_stride = layout.out.token_stride;
  p.out_head_stride = args.out_head_stride;
  p.lse = args.lse;
  p.lse_token_stride = layout.lse.token_stride;
  p.out_of_range_count = args.out_of_range_count;
  p.num_tokens = args.num_tokens;
  p.num_heads = args.num_heads;
  p.head_groups = head_groups(args.num_heads, unit_heads(args, kernel));
  p.chunks = plan.chunks;
  p.chunks_per_group = plan.chunks_per_group;
  p.column_groups = plan.column_groups;
  const SplitPlan split = split_plan(args);
  p.split_ctas = split.ctas;
  p.split_groups = split.groups;
  instrument::set_skip_stages(p);
  p.request_tokens = fast_divisor(layout.request_tokens);
  p.q_request_stride = layout.q.request_stride * q_bytes;
  p.indices_request_stride = layout.indices.request_stride;
  p.lens_token_stride = layout.lens.token_stride;
  p.lens_request_stride = layout.lens.request_stride;
  p.out_request_stride = layout.out.request_stride;
  p.lse_request_stride = layout.lse.request_stride;
  p.lse_with_sink = args.sink_term == SinkTerm::kInOutputAndLse && p.sinks ? 1 : 0;
  return p;
}

// The stream kernel of a call of `units` units on `sms` SMs: at most one
// unit per two SMs, the stream kernel in dim halves (same bits, twice the
// CTAs); at most one unit an SM, the deep stream kernel (FP8, 16 heads: same
// bits, more rows in flight), with P V warps where a token has at least
// pv_warps_min_chunks chunks (docs/kernels/large_batch.md). A diagnostic
// build can force the deep kernel without (1) or with (2) P V warps
// (instrument::deep_kernel).
const StreamKernel& stream_kernel_for(const KernelSet& kernels, int64_t units, int64_t sms, int32_t chunks) {
  const int deep_override = instrument::deep_kernel();
  const bool pv_warps = deep_override == 1   ? false
                        : deep_override == 2 ? true
                                             : chunks >= kDispatchRules.pv_warps_min_chunks;
  const StreamKernel& deep = pv_warps && kernels.stream_pv_warps.kernel ? kernels.stream_pv_warps : kernels.stream_deep;
  return kernels.stream_halves.kernel && 2 * units <= sms ? kernels.stream_halves
         : deep.kernel && units <= sms                    ? deep
                                                          : kernels.stream;
}

// The page-walk form's kernels (FP8).
template <class Traits>
constexpr bool kPageWalkPlanIsPlain = sizeof(StreamSmem<Traits>) == sizeof(StreamSmem<PageWalkTraits<Traits>>) &&
                                      sizeof(ClusterSmem<Traits>) == sizeof(ClusterSmem<PageWalkTraits<Traits>>) &&
                                      sizeof(SplitSmem<Traits>) == sizeof(SplitSmem<PageWalkTraits<Traits>>);
static_assert(kPageWalkPlanIsPlain<ClusterTraitsFp8> && kPageWalkPlanIsPlain<StreamTraitsFp8> &&
                  kPageWalkPlanIsPlain<StreamDeepTraitsFp8> && kPageWalkPlanIsPlain<StreamPvWarpsTraitsFp8> &&
                  kPageWalkPlanIsPlain<StreamHalvesTraitsFp8> && kPageWalkPlanIsPlain<SplitTraitsFp8> &&
                  kPageWalkPlanIsPlain<StreamTraitsFp8H64> && kPageWalkPlanIsPlain<StreamHalvesTraitsFp8H64> &&
                  kPageWalkPlanIsPlain<SplitTraitsFp8H64>,
              "the page-walk form of a kernel has the plain form's shared-memory plan (kernel_set's sizes)");

KernelSet page_walk_kernels(int unit_heads) {
  if (unit_heads == StreamTraitsFp8H64::kHeads) {
    KernelSet fp8 = kernel_set<ClusterTraitsFp8, StreamTraitsFp8H64, SplitTraitsFp8H64>(
        page_walk_cluster_kernel_fp8_h16(), page_walk_stream_kernel_fp8_h64(), page_walk_split_kernel_fp8_h64(),
        combine_kernel_fp8_h64, true);
    fp8.stream_halves = stream_kernel_of<StreamHalvesTraitsFp8H64>(page_walk_stream_halves_kernel_fp8_h64());
    return fp8;
  }
  KernelSet fp8 = kernel_set<ClusterTraitsFp8, StreamTraitsFp8, SplitTraitsFp8>(
      page_walk_cluster_kernel_fp8_h16(), page_walk_stream_kernel_fp8_h16(), page_walk_split_kernel_fp8_h16(),
      combine_kernel_fp8_h16, true);
  fp8.stream_deep = stream_kernel_of<StreamDeepTraitsFp8>(page_walk_stream_deep_kernel_fp8_h16());
  fp8.stream_pv_warps = stream_kernel_of<StreamPvWarpsTraitsFp8>(page_walk_stream_pv_warps_kernel_fp8_h16());
  fp8.stream_halves = stream_kernel_of<StreamHalvesTraitsFp8>(page_walk_stream_halves_kernel_fp8_h16());
  return fp8;
}

}  // namespace

KernelSet kernels_for(DType dtype, int unit_heads, KernelForm form) {
  if (form == KernelForm::kPageWalk) return page_walk_kernels(unit_heads);
  const bool g = form == KernelForm::kGeneral;
  if (dtype == DType::kBFloat16) {
    KernelSet bf16 = kernel_set<ClusterTraitsBf16, StreamTraitsBf16, SplitTraitsBf16>(
        cluster_kernel_bf16_h16(g), stream_kernel_bf16_h16(g), split_kernel_bf16_h16(g), combine_kernel_bf16_h16, g);
    bf16.stream_halves = stream_kernel_of<StreamHalvesTraitsBf16>(stream_halves_kernel_bf16_h16(g));
    return bf16;
  }
  if (unit_heads == StreamTraitsFp8H64::kHeads) {
    KernelSet fp8 = kernel_set<ClusterTraitsFp8, StreamTraitsFp8H64, SplitTraitsFp8H64>(
        cluster_kernel_fp8_h16(g), stream_kernel_fp8_h64(g), split_kernel_fp8_h64(g), combine_kernel_fp8_h64, g);
    fp8.stream_halves = stream_kernel_of<StreamHalvesTraitsFp8H64>(stream_halves_kernel_fp8_h64(g));
    return fp8;
  }
  KernelSet fp8 = kernel_set<ClusterTraitsFp8, StreamTraitsFp8, SplitTraitsFp8>(
      cluster_kernel_fp8_h16(g), stream_kernel_fp8_h16(g), split_kernel_fp8_h16(g), combine_kernel_fp8_h16, g);
  fp8.stream_deep = stream_kernel_of<StreamDeepTraitsFp8>(stream_deep_kernel_fp8_h16(g));
  fp8.stream_pv_warps = stream_kernel_of<StreamPvWarpsTraitsFp8>(stream_pv_warps_kernel_fp8_h16(g));
  fp8.stream_halves = stream_kernel_of<StreamHalvesTraitsFp8>(stream_halves_kernel_fp8_h16(g));
  return fp8;
}

Status configure_kernels() {
  static OncePerDevice configured(set_kernel_attributes, "configuring the dsv4 kernels");
  return configured.run();
}

Status launch_dsv4(const Dsv4DecodeArgs& args, void* workspace, size_t workspace_bytes, CUstream_st* stream,
                   const PageWalkParams* pages) {
  if (Status status = configure_kernels(); !status.ok()) return status;
  Dsv4Kernel kernel = choose_kernel(args);
  if (kernel == Dsv4Kernel::kSplit && !split_workspace_fits(args, workspace, workspace_bytes)) {
    kernel = choose_kernel(args, false);  // only kAuto gets here: dsv4_decode refuses a forced kSplit
  }
  PageWalkParams walk = pages ? *pages : PageWalkParams{};
  const TokenLayout layout = token_layout(args, pages ? &walk : nullptr);
  Dsv4Params p = kernel_params(args, kernel, layout);
  if (pages) p.pages = walk;
  const bool cluster = kernel == Dsv4Kernel::kCluster, split = kernel == Dsv4Kernel::kSplit;
  const ChunkPlan plan = chunk_plan(args.width);
  const KernelForm form = pages ? KernelForm::kPageWalk : layout.general ? KernelForm::kGeneral : KernelForm::kPlain;
  const KernelSet kernels = kernels_for(args.dtype, unit_heads(args, kernel), form);
  const int64_t units = args.num_tokens * p.head_groups;
  if (split) p.workspace = static_cast<uint8_t*>(workspace);

  const StreamKernel& streamed =
      cluster || split ? kernels.stream : stream_kernel_for(kernels, units, device_sm_count(), plan.chunks);
  const int64_t ctas = units * (cluster ? plan.column_groups : split ? p.split_ctas : streamed.dim_parts);
  const size_t smem = cluster ? kernels.cluster_smem
                      : split ? split_launch_smem(kernels.split_smem, ctas, args.enable_pdl)
                              : streamed.smem;
  const void* first = cluster ? kernels.cluster : split ? kernels.split : streamed.kernel;
  const int threads = cluster || split ? ClusterTraitsFp8::kThreads : streamed.threads;
  const LaunchConfig launch(ctas, threads, smem, args.enable_pdl, stream,
                            cluster ? static_cast<unsigned>(plan.column_groups) : 0u);
  if (Status status = launch_kernel(first, launch, &p, "launching a dsv4 kernel");
      !status.ok() || !split || instrument::skips(p, instrument::kSkipCombineLaunch)) {
    return status;
  }
  // The combine kernel always overlaps the split kernel's tail (PDL): it
  // waits for the split kernel's results before it reads them.
  const CombineKernel& combine =
      units <= SplitWorkspace<ClusterTraitsFp8>::kFewUnits ? kernels.combine_few_units : kernels.combine;
  return launch_kernel(combine.kernel, LaunchConfig(units * combine.slices, combine.threads, 0, true, stream), &p,
                       "launching the dsv4 combine kernel");
}

}  // namespace sparse_decode::dsv4
