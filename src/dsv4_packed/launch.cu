// The launch of dsv4_decode_packed's kernels: each kernel's one-time
// configuration on a device, the parameter block, and the launches through
// launch_kernel.
#include "dsv4_packed/launch.h"

#include <cuda_runtime.h>

#include <algorithm>

#include "common/device_support.h"
#include "common/launch.h"
#include "common/math.cuh"
#include "common/per_device.h"
#include "dsv4/validate_views.h"
#include "dsv4_packed/cluster_smem.cuh"
#include "dsv4_packed/dispatch.h"
#include "dsv4_packed/instantiations/kernels.h"
#include "dsv4_packed/params.h"
#include "dsv4_packed/split_h64_workspace.cuh"
#include "dsv4_packed/split_workspace.cuh"
#include "dsv4_packed/stream_h64_smem.cuh"
#include "dsv4_packed/stream_smem.cuh"

namespace sparse_decode::dsv4_packed {

namespace {

int set_cluster_kernel_attributes() {
  cudaError_t e = cudaSuccess;
  for (bool general : {false, true}) {
    if (e == cudaSuccess) {
      e = cudaFuncSetAttribute(cluster_kernel_pointer(general), cudaFuncAttributeMaxDynamicSharedMemorySize,
                               static_cast<int>(sizeof(ClusterSmem)));
    }
    if (e == cudaSuccess) {
      e = cudaFuncSetAttribute(cluster_kernel_pointer(general), cudaFuncAttributeNonPortableClusterSizeAllowed, 1);
    }
  }
  return e;
}

// Raises the cluster kernel's shared-memory limit and allows 16-CTA clusters.
Status configure_cluster_kernel() {
  static OncePerDevice configured(set_cluster_kernel_attributes, "configuring the packed-row kernel");
  return configured.run();
}

int set_stream_kernel_attributes() {
  // The stream kernel's setmaxnreg plan assumes the launch allocation it was
  // compiled for: with fewer registers setmaxnreg.inc would wait forever, so
  // a build that compiled it otherwise is refused (InvalidDeviceFunction).
  cudaError_t e = cudaSuccess;
  for (bool general : {false, true}) {
    for (int unit_ctas : {0, 1, 2}) {
      const void* kernel = stream_kernel_pointer(unit_ctas, general);
      cudaFuncAttributes attributes{};
      if (e == cudaSuccess) e = cudaFuncGetAttributes(&attributes, kernel);
      if (e == cudaSuccess && attributes.numRegs != StreamTraits::kLaunchRegisters) {
        e = cudaErrorInvalidDeviceFunction;
      }
      if (e == cudaSuccess) {
        // The split path (unit_ctas 0) may ask for an SM alone (split_launch_smem).
        const size_t most = std::max(sizeof(StreamSmem), unit_ctas == 0 ? kSmAloneSmemBytes : 0);
        e = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(most));
      }
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

int set_stream_h64_kernel_attributes() {
  cudaError_t e = cudaSuccess;
  for (bool general : {false, true}) {
    const void* kernel = stream_h64_kernel_pointer(general);
    cudaFuncAttributes attributes{};
    if (e == cudaSuccess) e = cudaFuncGetAttributes(&attributes, kernel);
    if (e == cudaSuccess && attributes.numRegs != StreamH64Traits::kLaunchRegisters) {
      e = cudaErrorInvalidDeviceFunction;  // setmaxnreg's plan, as for the 16-head kernel
    }
    if (e == cudaSuccess) {
      e = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                               static_cast<int>(sizeof(StreamH64Smem)));
    }
  }
  return e;
}

// Raises the 64-head stream kernel's shared-memory limit, after checking its register count.
Status configure_stream_h64_kernel() {
  static_assert(StreamH64Traits::kLaunchRegisters == 168, "the message below names the register count");
  static OncePerDevice configured(
      set_stream_h64_kernel_attributes,
      "configuring the packed-row 64-head stream kernel (it must compile to 168 registers a thread)");
  return configured.run();
}

// How a call's tokens are laid out for the kernels: the plain form takes
// flat arguments (a view that merges into one token stride counts as flat:
// validate_views.h), lens at stride 1, no seq_lens window and lse without the
// sink; anything else runs the general form.
struct TokenLayout {
  bool general = false;
  uint32_t request_tokens = 1;  // q_len of the views (general form), 1 without any
  validation::TokenStrides q, swa_indices, swa_lens, extra_indices, extra_lens, out, lse;
};

TokenLayout token_layout(const Dsv4PackedDecodeArgs& args) {
  const bool extra = args.extra.given();
  TokenLayout l;
  l.request_tokens = validation::resolve_token_strides(
      {{&l.q, args.q_token_stride, args.q_request_stride, true},
       {&l.swa_indices, args.swa.indices_stride, args.swa.indices_request_stride, true},
       {&l.swa_lens, args.swa.lens_token_stride, args.swa.lens_request_stride, args.swa.lens != nullptr},
       {&l.extra_indices, args.extra.indices_stride, args.extra.indices_request_stride, extra},
       {&l.extra_lens, args.extra.lens_token_stride, args.extra.lens_request_stride, extra && args.extra.lens},
       {&l.out, args.out_token_stride, args.out_request_stride, true},
       {&l.lse, args.lse_token_stride, args.lse_request_stride, args.lse != nullptr}},
      args.q_len);
  const bool lse_with_sink = args.sink_term == SinkTerm::kInOutputAndLse && args.sinks && args.lse;
  const bool lens_strided = (args.swa.lens && l.swa_lens.token_stride != 1) ||
                            (extra && args.extra.lens && l.extra_lens.token_stride != 1);
  l.general = l.request_tokens != 1 || lens_strided || args.seq_lens || lse_with_sink;
  return l;
}

SegmentParams segment_params(const PackedSegment& segment, const validation::TokenStrides& indices) {
  SegmentParams params{};
  params.pool = segment.pool.data;
  params.page_stride = segment.pool.page_stride;
  params.scale_offset = segment.pool.page_size * kPackedDataBytes;
  params.rows = segment.pool.rows();
  // An int32 index is below 2^31: a larger page size puts every index in page 0.
  params.page_size = static_cast<uint32_t>(std::min<int64_t>(segment.pool.page_size, int64_t{1} << 31));
  params.indices = segment.indices;
  params.indices_stride = indices.token_stride;
  params.width = segment.width;
  params.chunks = chunks_of(segment.width);
  params.lens = segment.lens;
  return params;
}

// The kernels' parameter block: `chunks_per_cta` for the cluster kernel,
// `workspace` and `split_ctas` for the split path (else 0 and null).
Params params_of(const Dsv4PackedDecodeArgs& args, const TokenLayout& l, int32_t chunks_per_cta, void* workspace,
                 int32_t split_ctas) {
  Params p{};
  p.q = static_cast<const uint16_t*>(args.q);
  p.q_token_stride = l.q.token_stride;
  p.q_head_stride = args.q_head_stride;
  p.swa = segment_params(args.swa, l.swa_indices);
  if (args.extra.given()) p.extra = segment_params(args.extra, l.extra_indices);
  p.num_heads = args.num_heads;
  p.chunks_per_cta = chunks_per_cta;
  p.scale_log2 = args.softmax_scale * kLog2e;
  p.sinks = args.sink_term == SinkTerm::kNone ? nullptr : args.sinks;
  p.out = static_cast<uint16_t*>(args.out);
  p.out_token_stride = l.out.token_stride;
  p.out_head_stride = args.out_head_stride;
  p.lse = args.lse;
  p.lse_token_stride = l.lse.token_stride;
  p.out_of_range_count = args.out_of_range_count;
  p.workspace = static_cast<uint8_t*>(workspace);
  p.split_ctas = split_ctas;
  p.request_tokens = fast_divisor(l.request_tokens);
  p.q_request_stride = l.q.request_stride;
  p.out_request_stride = l.out.request_stride;
  p.lse_request_stride = l.lse.request_stride;
  p.swa_views = {l.swa_indices.request_stride, l.swa_lens.token_stride, l.swa_lens.request_stride};
  p.extra_views = {l.extra_indices.request_stride, l.extra_lens.token_stride, l.extra_lens.request_stride};
  p.seq_lens = args.seq_lens;
  p.cum_seq_lens_q = args.cum_seq_lens_q;
  p.q_len = args.q_len;
  p.num_requests = args.num_requests;
  p.lse_with_sink = args.sink_term == SinkTerm::kInOutputAndLse && p.sinks ? 1 : 0;
  return p;
}

// The cluster kernel: a cluster of the plan's CTAs a token along x, a grid
// row a 16-head group.
Status launch_cluster(const Dsv4PackedDecodeArgs& args, const TokenLayout& layout, CUstream_st* stream) {
  const ClusterPlan plan =
      cluster_plan(args.swa.width, args.extra.given() ? args.extra.width : 0, units_of(args));
  Params p = params_of(args, layout, plan.chunks_per_cta, nullptr, 0);
  const dim3 grid(static_cast<unsigned>(args.num_tokens * plan.cluster_ctas), head_groups_of(args.num_heads));
  return launch_kernel(cluster_kernel_pointer(layout.general),
                       LaunchConfig(grid, dim3(ClusterTraits::kThreads), sizeof(ClusterSmem), args.enable_pdl, stream,
                                    static_cast<unsigned>(plan.cluster_ctas)),
                       &p, "launching the packed-row kernel");
}

// The stream kernel, one CTA or a cluster pair a unit.
Status launch_stream(const Dsv4PackedDecodeArgs& args, const TokenLayout& layout, CUstream_st* stream) {
  const int unit_ctas = stream_unit_ctas(args);
  Params p = params_of(args, layout, 0, nullptr, 0);
  return launch_kernel(stream_kernel_pointer(unit_ctas, layout.general),
                       LaunchConfig(units_of(args) * unit_ctas, StreamTraits::kLaunchThreads, sizeof(StreamSmem),
                                    args.enable_pdl, stream, static_cast<unsigned>(unit_ctas)),
                       &p, "launching the packed-row stream kernel");
}

// The stream kernel's 64-head form: one CTA a (token, 64-head group) unit.
Status launch_stream_h64(const Dsv4PackedDecodeArgs& args, const TokenLayout& layout, CUstream_st* stream) {
  Params p = params_of(args, layout, 0, nullptr, 0);
  const int64_t units = args.num_tokens * (args.num_heads / StreamH64Traits::kHeads);
  return launch_kernel(stream_h64_kernel_pointer(layout.general),
                       LaunchConfig(units, StreamH64Traits::kLaunchThreads, sizeof(StreamH64Smem), args.enable_pdl,
                                    stream, 1u),
                       &p, "launching the packed-row 64-head stream kernel");
}

// The 64-head split path: the 64-head form's CTAs write their shares, then
// its combine kernel folds them (a CTA a unit's head pair), overlapping the
// split kernel's tail (PDL) as on the 16-head split path.
Status launch_split_h64(const Dsv4PackedDecodeArgs& args, const TokenLayout& layout, void* workspace,
                        CUstream_st* stream) {
  const SplitPlan plan = split_plan_of(args);
  Params p = params_of(args, layout, plan.chunks_per_cta, workspace, plan.ctas);
  const int64_t units = h64_units_of(args);
  if (Status status = launch_kernel(stream_h64_kernel_pointer(layout.general),
                                    LaunchConfig(units * plan.ctas, StreamH64Traits::kLaunchThreads,
                                                 sizeof(StreamH64Smem), args.enable_pdl, stream, 1u),
                                    &p, "launching the packed-row 64-head stream kernel");
      !status.ok()) {
    return status;
  }
  return launch_kernel(combine_h64_kernel_pointer(plan.ctas, layout.general),
                       LaunchConfig(units * SplitH64Workspace::kCombineCtas, SplitH64Workspace::kCombineThreads, 0,
                                    true, stream, 1u),
                       &p, "launching the packed-row 64-head combine kernel");
}

// The split path: the stream kernel's CTAs write their shares, then the
// combine kernel folds them. The combine kernel always overlaps the split
// kernel's tail (PDL): it waits for the shares before it reads them.
Status launch_split(const Dsv4PackedDecodeArgs& args, const TokenLayout& layout, void* workspace,
                    CUstream_st* stream) {
  const SplitPlan plan = split_plan_of(args);
  Params p = params_of(args, layout, 0, workspace, plan.ctas);
  const int64_t ctas = units_of(args) * plan.ctas;
  const size_t smem = split_launch_smem(sizeof(StreamSmem), static_cast<unsigned>(ctas), args.enable_pdl);
  if (Status status = launch_kernel(stream_kernel_pointer(0, layout.general),
                                    LaunchConfig(ctas, StreamTraits::kLaunchThreads, smem, args.enable_pdl, stream, 1u),
                                    &p, "launching the packed-row stream kernel");
      !status.ok()) {
    return status;
  }
  return launch_kernel(combine_kernel_pointer(plan.ctas, layout.general),
                       LaunchConfig(units_of(args) * StreamTraits::kWarps, SplitWorkspace::kCombineThreads, 0, true,
                                    stream, 1u),
                       &p, "launching the packed-row combine kernel");
}

}  // namespace

Status launch(const Dsv4PackedDecodeArgs& args, void* workspace, size_t workspace_bytes, CUstream_st* stream) {
  Dsv4PackedKernel kernel = choose_kernel(args);
  if (is_split(kernel) && !split_workspace_fits(args, workspace, workspace_bytes)) {
    kernel = choose_kernel(args, false);  // only kAuto gets here: a forced kSplit or kSplitH64 is refused before
  }
  const TokenLayout layout = token_layout(args);
  if (kernel == Dsv4PackedKernel::kCluster) {
    if (Status status = configure_cluster_kernel(); !status.ok()) return status;
    return launch_cluster(args, layout, stream);
  }
  if (kernel == Dsv4PackedKernel::kStreamH64 || kernel == Dsv4PackedKernel::kSplitH64) {
    if (Status status = configure_stream_h64_kernel(); !status.ok()) return status;
    return kernel == Dsv4PackedKernel::kSplitH64 ? launch_split_h64(args, layout, workspace, stream)
                                                 : launch_stream_h64(args, layout, stream);
  }
  if (Status status = configure_stream_kernel(); !status.ok()) return status;
  return kernel == Dsv4PackedKernel::kSplit ? launch_split(args, layout, workspace, stream)
                                            : launch_stream(args, layout, stream);
}

}  // namespace sparse_decode::dsv4_packed
