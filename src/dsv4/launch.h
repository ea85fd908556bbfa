// The dsv4 kernels as the host launches them: the instances of one dtype and
// head group size with their launch shapes (from the registry,
// instantiations/kernels.h), their one-time configuration per device, and
// the launch of a call.
#pragma once

#include <cstddef>

#include "dsv4/params.h"
#include "sparse_decode/dsv4_decode.h"

namespace sparse_decode::dsv4 {

// The dtypes and the heads a unit of the registry's kernels serve (BF16
// has 16-head kernels only).
inline constexpr DType kServedDtypes[] = {DType::kFloat8E4M3, DType::kBFloat16};
inline constexpr int kUnitHeads[] = {16, 64};

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

// A combine kernel instance: its CTAs a unit and threads a CTA.
struct CombineKernel {
  const void* kernel;
  int slices;   // CTAs a unit
  int threads;  // a CTA
};

// The kernels of one dtype and head group size and the dynamic shared
// memory each requests (its plan's size; the combine kernels have none).
// The cluster kernel is always the 16-head one; the deep stream kernel (4
// KV tiles, 1 CTA an SM) serves at most one unit an SM, and the stream
// kernel in dim halves at most one unit per two SMs, where there is one
// (kernel null where not).
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

// The forms of a kernel (traits.cuh): plain; general (request views, a lens
// stride, lse with the sink); page walk (the general form reading HCA
// metadata instead of indices and lens: FP8 only).
enum class KernelForm { kPlain, kGeneral, kPageWalk };

// The kernels of a dtype and head group size in one form (the page walk's
// combine kernels are the general form's: they read no column).
KernelSet kernels_for(DType dtype, int unit_heads, KernelForm form = KernelForm::kPlain);

// Raises the kernels' shared-memory limits and allows 16-CTA clusters, once
// a device.
Status configure_kernels();

// Launches the chosen kernel on `stream` (where kAuto's kSplit has no
// workspace that fits, the choice without the split path); arguments must
// have passed kernels_support(), and a forced kSplit split_workspace_fits().
// With `pages` the kernels' page-walk form runs: args give the rows' geometry
// (width, pools, q, outputs, cum_seq_lens_q or q_len; indices, lens and
// seq_lens unused) and `pages` the columns (dsv4_decode_hca).
Status launch_dsv4(const Dsv4DecodeArgs& args, void* workspace, size_t workspace_bytes, CUstream_st* stream,
                   const PageWalkParams* pages = nullptr);

}  // namespace sparse_decode::dsv4
