#include "bench/packed_check.h"

#include <algorithm>
#include <stdexcept>
#include <vector>

#include "bench/cuda_check.h"
#include "reference/dsv4_packed_reference.h"

namespace sparse_decode::bench {
namespace {

// Host copies of one segment's first `tokens` rows of indices and lens.
struct HostSegment {
  std::vector<int32_t> indices, lens;

  HostSegment(const PackedSegment& segment, int64_t tokens) {
    if (!segment.given() || tokens == 0) return;
    indices = download<int32_t>(segment.indices, static_cast<size_t>((tokens - 1) * segment.indices_stride + segment.width));
    if (segment.lens) lens = download<int32_t>(segment.lens, static_cast<size_t>(tokens));
  }

  PackedSegment on_host(const PackedSegment& device, const PackedPool& host_pool) const {
    if (!device.given()) return PackedSegment{};
    PackedSegment host = device;
    host.pool = host_pool;
    host.indices = indices.data();
    host.lens = lens.empty() ? nullptr : lens.data();
    return host;
  }
};

// The fp64 reference output [tokens, H, 512] of the first `tokens` tokens.
std::vector<double> reference_of_first_tokens(const Dsv4PackedDecodeArgs& d, const PackedPool& host_swa,
                                              const PackedPool& host_extra, int64_t tokens) {
  if (tokens <= 0) return {};
  const int64_t q_elements = (tokens - 1) * d.q_token_stride + (d.num_heads - 1) * d.q_head_stride + kHeadDim;
  const std::vector<uint16_t> q = download<uint16_t>(d.q, static_cast<size_t>(q_elements));
  const std::vector<float> sinks = d.sinks ? download<float>(d.sinks, static_cast<size_t>(d.num_heads)) : std::vector<float>{};
  const HostSegment swa(d.swa, tokens), extra(d.extra, tokens);

  Dsv4PackedDecodeArgs host = d;
  host.memory = MemorySpace::kHost;
  host.num_tokens = tokens;
  host.q = q.data();
  host.swa = swa.on_host(d.swa, host_swa);
  host.extra = extra.on_host(d.extra, host_extra);
  host.sinks = sinks.empty() ? nullptr : sinks.data();
  host.out = nullptr;
  host.lse = nullptr;
  host.out_of_range_count = nullptr;
  return reference::dsv4_decode_packed(host).out;
}

}  // namespace

LayerCheck check_packed_layer(const Dsv4PackedDecodeArgs& args, const PackedPool& host_swa,
                              const PackedPool& host_extra, int64_t max_tokens, CUstream_st* stream) {
  if (args.memory != MemorySpace::kDevice) throw std::invalid_argument("check_packed_layer: expects device memory");
  const size_t workspace_bytes = workspace_size(args);
  const testing::DeviceBuffer workspace(workspace_bytes);
  if (Status status = dsv4_decode_packed(args, workspace.get(), workspace_bytes, stream); !status.ok()) {
    throw std::runtime_error("dsv4_decode_packed: " + status.message());
  }
  return check_output(args.out, args.out_token_stride, args.out_head_stride, args.num_tokens, args.num_heads, max_tokens,
                      stream, [&](int64_t tokens) { return reference_of_first_tokens(args, host_swa, host_extra, tokens); });
}

}  // namespace sparse_decode::bench
