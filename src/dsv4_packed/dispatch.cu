// Host side of dsv4_decode_packed before a launch: plans, the kernel
// choice, the split path's workspace, the support check.
#include "dsv4_packed/dispatch.h"

#include <algorithm>
#include <string>

#include "common/device_support.h"
#include "common/validation.h"
#include "dsv4_packed/cluster_traits.cuh"
#include "dsv4_packed/dispatch_rules.h"
#include "dsv4_packed/split_h64_workspace.cuh"
#include "dsv4_packed/split_workspace.cuh"
#include "dsv4_packed/stream_h64_traits.cuh"
#include "dsv4_packed/stream_traits.cuh"

namespace sparse_decode::dsv4_packed {

namespace {

// With the workspace, whether the split path serves `units` units of
// `chunks` chunks a token (kDispatchRules.split).
bool split_serves(int32_t chunks, int64_t units) {
  if (units > kSplitMaxUnits || chunks < 2) return false;
  for (const SplitBound& bound : kDispatchRules.split) {
    if (chunks <= bound.max_chunks) {
      return units <= bound.max_units || (bound.past_pair && units > kDispatchRules.pair_max_units);
    }
  }
  return false;  // the last row holds every width
}

// A grid of `ctas` CTAs for each of `units` units (of `unit` heads, run by
// `kernel`) stays within 2^31 - 1 CTAs; else the refusal naming num_tokens.
Status grid_fits(int64_t units, int64_t ctas, const char* unit, const char* kernel) {
  if (units <= int64_t{0x7fffffff} / ctas) return Status::Ok();
  return Status::NotSupported("dsv4_decode_packed: num_tokens: at most " + std::to_string(int64_t{0x7fffffff} / ctas) +
                              " (token, " + unit + " group) units a call with " + kernel + " (grid size)");
}

}  // namespace

int head_groups_of(int32_t heads) { return (heads + ClusterTraits::kHeads - 1) / ClusterTraits::kHeads; }

int64_t units_of(const Dsv4PackedDecodeArgs& args) {
  return validation::saturating_mul(args.num_tokens, head_groups_of(args.num_heads));
}

int64_t h64_units_of(const Dsv4PackedDecodeArgs& args) {
  return validation::saturating_mul(args.num_tokens, std::max(args.num_heads / StreamH64Traits::kHeads, 1));
}

bool is_split(Dsv4PackedKernel kernel) {
  return kernel == Dsv4PackedKernel::kSplit || kernel == Dsv4PackedKernel::kSplitH64;
}

int32_t chunks_of(int32_t width) {
  return (width + ClusterTraits::kChunkColumns - 1) / ClusterTraits::kChunkColumns;
}

int32_t token_chunks(const Dsv4PackedDecodeArgs& args) {
  return chunks_of(args.swa.width) + (args.extra.given() ? chunks_of(args.extra.width) : 0);
}

ClusterPlan cluster_plan(int32_t swa_width, int32_t extra_width, int64_t units) {
  ClusterPlan plan;
  plan.chunks = chunks_of(swa_width) + chunks_of(extra_width);
  // As many CTAs a cluster as one wave of the grid has room for, between 1
  // and 16: beyond a wave, a CTA that walks more chunks costs less than the
  // exchange and the waves of small CTAs.
  const int64_t room = kOneWaveCtas / std::max<int64_t>(units, 1);
  const int max_ctas = static_cast<int>(std::clamp<int64_t>(room, 1, ClusterTraits::kMaxClusterCtas));
  plan.chunks_per_cta = (plan.chunks + max_ctas - 1) / max_ctas;
  plan.cluster_ctas = (plan.chunks + plan.chunks_per_cta - 1) / plan.chunks_per_cta;
  return plan;
}

SplitPlan split_plan(int32_t chunks, int64_t units, int64_t wave_ctas) {
  static_assert(SplitWorkspace::kMaxShares == SplitH64Workspace::kMaxShares, "one bound on the shares of both paths");
  const int64_t most = std::min<int64_t>(chunks, SplitWorkspace::kMaxShares);
  const int64_t fit = std::clamp<int64_t>(wave_ctas / std::max<int64_t>(units, 1), 1, std::max<int64_t>(most, 1));
  SplitPlan plan;
  plan.chunks_per_cta = static_cast<int32_t>((chunks + fit - 1) / fit);
  plan.ctas = plan.chunks_per_cta > 0 ? (chunks + plan.chunks_per_cta - 1) / plan.chunks_per_cta : 1;
  return plan;
}

SplitPlan split_plan_of(const Dsv4PackedDecodeArgs& args) {
  return choose_kernel(args) == Dsv4PackedKernel::kSplitH64
             ? split_plan(token_chunks(args), h64_units_of(args), kOneWaveH64Ctas)
             : split_plan(token_chunks(args), units_of(args), kOneWaveCtas);
}

// kAuto's rule, also when kStream is forced; one CTA a unit for batch invariance.
int stream_unit_ctas(const Dsv4PackedDecodeArgs& args) {
  return !args.batch_invariant && units_of(args) <= kDispatchRules.pair_max_units &&
                 token_chunks(args) > kDispatchRules.stream_max_chunks_always
             ? 2
             : 1;
}

Dsv4PackedKernel choose_kernel(const Dsv4PackedDecodeArgs& args, bool split_workspace) {
  if (args.kernel != Dsv4PackedKernel::kAuto) return args.kernel;
  if (args.batch_invariant) return Dsv4PackedKernel::kStream;
  if (args.num_heads % StreamH64Traits::kHeads == 0 && token_chunks(args) <= kDispatchRules.h64_max_chunks) {
    const int64_t h64_units = h64_units_of(args);
    if (h64_units >= kDispatchRules.h64_min_units) return Dsv4PackedKernel::kStreamH64;
    if (split_workspace && h64_units >= kDispatchRules.h64_split_min_units &&
        token_chunks(args) >= kDispatchRules.h64_split_min_chunks) {
      return Dsv4PackedKernel::kSplitH64;
    }
  }
  const int64_t units = units_of(args);
  if (split_workspace && split_serves(token_chunks(args), units)) return Dsv4PackedKernel::kSplit;
  if (token_chunks(args) <= kDispatchRules.stream_max_chunks_always) return Dsv4PackedKernel::kStream;
  return units > kDispatchRules.cluster_max_units ? Dsv4PackedKernel::kStream : Dsv4PackedKernel::kCluster;
}

size_t split_workspace_bytes(const Dsv4PackedDecodeArgs& args) {
  if (args.num_tokens <= 0) return 0;
  const bool h64 = choose_kernel(args) == Dsv4PackedKernel::kSplitH64;
  if (h64 && args.num_heads % StreamH64Traits::kHeads != 0) return 0;  // refused by kernels_support
  // Saturates: a T beyond any buffer asks for more bytes than exist instead of wrapping.
  const int64_t units = h64 ? h64_units_of(args) : units_of(args);
  const int64_t shares = validation::saturating_mul(units, split_plan_of(args).ctas);
  const size_t share_bytes = h64 ? SplitH64Workspace::kShareBytes : SplitWorkspace::kShareBytes;
  return static_cast<size_t>(validation::saturating_mul(shares, static_cast<int64_t>(share_bytes)));
}

bool split_workspace_fits(const Dsv4PackedDecodeArgs& args, const void* workspace, size_t workspace_bytes) {
  static_assert(SplitWorkspace::kAlignment == SplitH64Workspace::kAlignment, "one alignment for both paths");
  return workspace && workspace_bytes >= split_workspace_bytes(args) &&
         reinterpret_cast<uintptr_t>(workspace) % SplitWorkspace::kAlignment == 0;
}

namespace {

// The grid of `choice` within 2^31 - 1 CTAs: kSplit's CTAs a unit and its
// combine kernel's (a CTA a unit's warp), kSplitH64's and its combine
// kernel's (a CTA a unit's head pair), the cluster kernel's clusters a token.
Status grid_status(const Dsv4PackedDecodeArgs& args, Dsv4PackedKernel choice) {
  switch (choice) {
    case Dsv4PackedKernel::kSplit:
      return grid_fits(units_of(args), std::max<int64_t>(split_plan_of(args).ctas, StreamTraits::kWarps), "16-head",
                       "kSplit");
    case Dsv4PackedKernel::kSplitH64:
      return grid_fits(h64_units_of(args),
                       std::max<int64_t>(split_plan_of(args).ctas, SplitH64Workspace::kCombineCtas), "64-head",
                       "kSplitH64");
    case Dsv4PackedKernel::kStreamH64:
      return grid_fits(h64_units_of(args), 1, "64-head", "kStreamH64");
    case Dsv4PackedKernel::kStream:
      return grid_fits(units_of(args), 1, "16-head", "kStream");
    default: {  // kCluster (choose_kernel resolves kAuto)
      const ClusterPlan plan =
          cluster_plan(args.swa.width, args.extra.given() ? args.extra.width : 0, units_of(args));
      if (args.num_tokens <= int64_t{0x7fffffff} / plan.cluster_ctas) return Status::Ok();
      return Status::NotSupported("dsv4_decode_packed: num_tokens: at most " +
                                  std::to_string(int64_t{0x7fffffff} / plan.cluster_ctas) +
                                  " tokens a call at these widths (grid size), got " +
                                  std::to_string(args.num_tokens));
    }
  }
}

}  // namespace

Status kernels_support(const Dsv4PackedDecodeArgs& args) {
  const Dsv4PackedKernel choice = choose_kernel(args);
  if (choice == Dsv4PackedKernel::kStreamH64 || choice == Dsv4PackedKernel::kSplitH64) {
    const char* name = choice == Dsv4PackedKernel::kStreamH64 ? "kStreamH64" : "kSplitH64";
    if (args.num_heads % StreamH64Traits::kHeads != 0) {
      return Status::NotSupported(std::string("dsv4_decode_packed: num_heads: kernel ") + name +
                                  " serves 64 or 128 heads, got " + std::to_string(args.num_heads));
    }
  }
  const Status grid = grid_status(args, choice);
  return grid.ok() ? hopper_device_status("dsv4_decode_packed: ") : grid;
}

}  // namespace sparse_decode::dsv4_packed
