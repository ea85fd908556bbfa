#include "bench/layer_check.h"

#include <algorithm>
#include <stdexcept>
#include <unordered_map>
#include <vector>

#include "bench/cuda_check.h"
#include "reference/dsv4_reference.h"

namespace sparse_decode::bench {
namespace {

int64_t element_bytes(DType dtype) { return dtype == DType::kFloat8E4M3 ? 1 : 2; }

float scalar_value(const ScalarArg& arg) { return arg.device ? download<float>(arg.device, 1)[0] : arg.value; }

// The rows a pool's active columns name, copied into a compact host pool
// (one row after another) with a map from device row to compact row.
class CompactPool {
 public:
  CompactPool(const KvPool& device_pool, DType dtype)
      : device_(device_pool), row_bytes_(kHeadDim * element_bytes(dtype)), element_bytes_(element_bytes(dtype)) {}

  int32_t add(int64_t row) {
    const auto [it, inserted] = compact_of_.try_emplace(row, static_cast<int32_t>(compact_of_.size()));
    if (inserted) {
      const int64_t offset = (row / device_.page_size) * device_.page_stride + (row % device_.page_size) * device_.row_stride;
      bytes_.resize(bytes_.size() + row_bytes_);
      const auto* source = static_cast<const uint8_t*>(device_.data) + offset * element_bytes_;
      SPARSE_DECODE_CUDA_CHECK(
          cudaMemcpy(bytes_.data() + bytes_.size() - row_bytes_, source, row_bytes_, cudaMemcpyDeviceToHost));
    }
    return it->second;
  }

  // Valid while this object lives and no row is added.
  KvPool host_pool() const {
    return KvPool{bytes_.data(), static_cast<int64_t>(compact_of_.size()), 1, kHeadDim, kHeadDim};
  }

 private:
  KvPool device_;
  size_t row_bytes_;
  int64_t element_bytes_;
  std::unordered_map<int64_t, int32_t> compact_of_;
  std::vector<uint8_t> bytes_;
};

// The fp64 reference output [tokens, H, 512] of the first `tokens` tokens.
std::vector<double> reference_of_first_tokens(const Dsv4DecodeArgs& device_args, int64_t tokens) {
  const Dsv4DecodeArgs& d = device_args;
  if (tokens <= 0) return {};
  const int64_t q_elements = (tokens - 1) * d.q_token_stride + (d.num_heads - 1) * d.q_head_stride + kHeadDim;
  const std::vector<uint8_t> q = download<uint8_t>(d.q, static_cast<size_t>(q_elements * element_bytes(d.dtype)));
  std::vector<int32_t> indices = download<int32_t>(d.indices, static_cast<size_t>(tokens * d.indices_stride));
  const std::vector<int32_t> lens = d.lens ? download<int32_t>(d.lens, static_cast<size_t>(tokens)) : std::vector<int32_t>{};
  const std::vector<float> sinks = d.sinks ? download<float>(d.sinks, static_cast<size_t>(d.num_heads)) : std::vector<float>{};

  // Active columns point at compact rows; inactive ones become -1 (never read).
  CompactPool swa(d.swa_kv, d.dtype), compressed(d.compressed_kv, d.dtype);
  for (int64_t t = 0; t < tokens; ++t) {
    for (int32_t c = 0; c < d.width; ++c) {
      int32_t& index = indices[static_cast<size_t>(t * d.indices_stride + c)];
      const KvPool& pool = c < kSwaColumns ? d.swa_kv : d.compressed_kv;
      const bool active = index >= 0 && index < pool.rows() && (lens.empty() || c < lens[static_cast<size_t>(t)]);
      index = !active ? -1 : (c < kSwaColumns ? swa : compressed).add(index);
    }
  }

  Dsv4DecodeArgs host = d;
  host.memory = MemorySpace::kHost;
  host.num_tokens = tokens;
  host.q = q.data();
  host.swa_kv = swa.host_pool();
  host.compressed_kv = compressed.host_pool();
  host.indices = indices.data();
  host.lens = lens.empty() ? nullptr : lens.data();
  host.sinks = sinks.empty() ? nullptr : sinks.data();
  host.bmm1_scale = ScalarArg{scalar_value(d.bmm1_scale), nullptr};
  host.bmm2_scale = ScalarArg{scalar_value(d.bmm2_scale), nullptr};
  host.out = nullptr;
  host.lse = nullptr;
  host.out_of_range_count = nullptr;
  return reference::dsv4_decode(host).out;
}

}  // namespace

std::string LayerCheck::summary() const {
  std::string text = "first " + std::to_string(tokens_checked) + " token(s): " + first_tokens.summary();
  if (whole_output.nonfinite) text += "; whole output: " + std::to_string(whole_output.nonfinite) + " non-finite";
  if (!whole_output.any_nonzero) text += "; whole output is zero";
  return text;
}

LayerCheck check_layer(const Dsv4DecodeArgs& args, int64_t max_tokens, CUstream_st* stream) {
  if (args.memory != MemorySpace::kDevice || args.seq_lens) {
    throw std::invalid_argument("check_layer: expects device memory and no seq_lens");
  }
  const size_t workspace_bytes = workspace_size(args);
  const testing::DeviceBuffer workspace(workspace_bytes);
  if (Status status = dsv4_decode(args, workspace.get(), workspace_bytes, stream); !status.ok()) {
    throw std::runtime_error("dsv4_decode: " + status.message());
  }
  return check_output(args.out, args.out_token_stride, args.out_head_stride, args.num_tokens, args.num_heads, max_tokens,
                      stream, [&](int64_t tokens) { return reference_of_first_tokens(args, tokens); });
}

LayerCheck check_output(const void* out, int64_t out_token_stride, int64_t out_head_stride, int64_t tokens,
                        int32_t heads, int64_t max_tokens, CUstream_st* stream,
                        const std::function<std::vector<double>(int64_t)>& reference) {
  const int64_t values_per_token = int64_t{heads} * kHeadDim;
  if (out_token_stride != values_per_token || out_head_stride != kHeadDim) {
    throw std::invalid_argument("check: expects a contiguous out [T, H, 512]");
  }
  SPARSE_DECODE_CUDA_CHECK(cudaStreamSynchronize(stream));
  const std::vector<uint16_t> host_out = download<uint16_t>(out, static_cast<size_t>(tokens * values_per_token));
  LayerCheck check;
  check.tokens_checked = std::min(tokens, max_tokens);
  check.whole_output = inspect_bf16(host_out.data(), static_cast<int64_t>(host_out.size()));
  check.first_tokens = compare_bf16(host_out.data(), reference(check.tokens_checked));
  return check;
}

}  // namespace sparse_decode::bench
