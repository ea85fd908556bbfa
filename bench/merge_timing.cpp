// sparse_decode_merge_bench: the time of merge_states alone (SPEC section 5),
// measured as DESIGN.md "How performance is measured" says: L merges in one
// CUDA graph, each with its own partials, lse and output, the L2 flushed
// before every replay, the median of the replays divided by L. Beside each
// time: the bytes a merge moves (every rank's partial and lse read, out and
// out_lse written), its rate, and the floor of those bytes at 4.8 TB/s
// (docs/kernels/merge.md). Layer 0's first tokens are checked against the
// fp64 reference.
//
//   sparse_decode_merge_bench [--ranks 2,4,8] [--tokens 1,...,2048] [--heads 16,64,128]
//       [--head-dim 512] [--partial-dtype bf16|fp32] [--out-dtype bf16|fp32]
//       [--layers 8] [--replays 30] [--pdl] [--csv FILE]
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "bench/accuracy.h"
#include "bench/bench_run.h"
#include "bench/cuda_check.h"
#include "bench/graph_timer.h"
#include "reference/merge_reference.h"
#include "sparse_decode/merge_states.h"
#include "testing/device_buffer.h"

namespace sparse_decode::bench {
namespace {

constexpr double kHbmBytesPerUs = 4.8e6;         // H200 HBM3e: 4.8 TB/s
constexpr size_t kLayerBudget = size_t{3} << 30;  // bytes of inputs and outputs over all L layers
constexpr int kCheckTokens = 4;

struct MergeOptions {
  std::vector<int64_t> ranks = {2, 4, 8};
  std::vector<int64_t> tokens = {1, 6, 12, 48, 128, 512, 2048};
  std::vector<int64_t> heads = {16, 64, 128};
  int head_dim = kHeadDim;
  MergeDType partial_dtype = MergeDType::kBFloat16;
  MergeDType out_dtype = MergeDType::kBFloat16;
  int layers = 8;
  int replays = 30;
  int warmup = 3;
  bool pdl = false;
  std::string csv;
};

[[noreturn]] void usage(const std::string& problem) {
  std::fprintf(stderr,
               "%s\nusage: sparse_decode_merge_bench [--ranks 2,4,8] [--tokens 1,6,...,2048] [--heads 16,64,128]\n"
               "  [--head-dim 512] [--partial-dtype bf16|fp32] [--out-dtype bf16|fp32] [--layers 8] [--replays 30]\n"
               "  [--pdl] [--csv FILE]\n",
               problem.c_str());
  std::exit(2);
}

std::vector<int64_t> parse_list(const std::string& option, const std::string& text) {
  std::vector<int64_t> values;
  size_t at = 0;
  while (at <= text.size()) {
    const size_t comma = std::min(text.find(',', at), text.size());
    char* end = nullptr;
    const std::string item = text.substr(at, comma - at);
    const long long value = std::strtoll(item.c_str(), &end, 10);
    if (item.empty() || *end != '\0' || value < 1) usage(option + ": expected positive integers, got " + text);
    values.push_back(value);
    at = comma + 1;
  }
  return values;
}

MergeDType parse_dtype(const std::string& option, const std::string& text) {
  if (text == "bf16") return MergeDType::kBFloat16;
  if (text == "fp32") return MergeDType::kFloat32;
  usage(option + ": expected bf16 or fp32, got " + text);
}

MergeOptions parse(int argc, char** argv) {
  MergeOptions o;
  for (int i = 1; i < argc; ++i) {
    const std::string option = argv[i];
    if (option == "--pdl") {
      o.pdl = true;
      continue;
    }
    if (option == "--help" || option == "-h") usage("the time of merge_states alone");
    if (i + 1 >= argc) usage(option + ": expected a value");
    const std::string value = argv[++i];
    if (option == "--ranks") o.ranks = parse_list(option, value);
    else if (option == "--tokens") o.tokens = parse_list(option, value);
    else if (option == "--heads") o.heads = parse_list(option, value);
    else if (option == "--head-dim") o.head_dim = static_cast<int>(parse_list(option, value).at(0));
    else if (option == "--partial-dtype") o.partial_dtype = parse_dtype(option, value);
    else if (option == "--out-dtype") o.out_dtype = parse_dtype(option, value);
    else if (option == "--layers") o.layers = static_cast<int>(parse_list(option, value).at(0));
    else if (option == "--replays") o.replays = static_cast<int>(parse_list(option, value).at(0));
    else if (option == "--csv") o.csv = value;
    else usage("unknown option " + option);
  }
  return o;
}

const char* dtype_name(MergeDType dtype) { return dtype == MergeDType::kFloat32 ? "fp32" : "bf16"; }

// One merge's buffers: partials [R, T, H, D] (a pattern of small finite
// values), lse [R, T, H] (random, every rank non-empty: the most bytes),
// out [T, H, D], out_lse [T, H].
struct MergeLayer {
  testing::DeviceBuffer partials, lse, out, out_lse;
  MergeStatesArgs args;
};

MergeLayer make_layer(const MergeOptions& o, int64_t ranks, int64_t tokens, int64_t heads, std::mt19937_64& rng) {
  const int64_t in_bytes = o.partial_dtype == MergeDType::kFloat32 ? 4 : 2;
  const int64_t out_bytes = o.out_dtype == MergeDType::kFloat32 ? 4 : 2;
  const int64_t row = heads * o.head_dim;
  MergeLayer layer{testing::DeviceBuffer(ranks * tokens * row * in_bytes),
                   testing::DeviceBuffer(ranks * tokens * heads * 4), testing::DeviceBuffer(tokens * row * out_bytes),
                   testing::DeviceBuffer(tokens * heads * 4), {}};
  layer.partials.fill_bytes(0x3E);  // BF16 0.186, float32 0.186: finite, non-zero
  std::uniform_real_distribution<float> uniform(-3.0f, 3.0f);
  std::vector<float> lse(static_cast<size_t>(ranks * tokens * heads));
  for (float& v : lse) v = uniform(rng);
  SPARSE_DECODE_CUDA_CHECK(cudaMemcpy(layer.lse.get(), lse.data(), lse.size() * 4, cudaMemcpyHostToDevice));
  MergeStatesArgs& a = layer.args;
  a.num_ranks = static_cast<int32_t>(ranks);
  a.num_tokens = tokens;
  a.num_heads = static_cast<int32_t>(heads);
  a.head_dim = o.head_dim;
  a.partial_dtype = o.partial_dtype;
  a.partial_base = layer.partials.get();
  a.partial_rank_stride = tokens * row;
  a.partial_token_stride = row;
  a.partial_head_stride = o.head_dim;
  a.lse_base = layer.lse.as<float>();
  a.lse_rank_stride = tokens * heads;
  a.lse_token_stride = heads;
  a.out_dtype = o.out_dtype;
  a.out = layer.out.get();
  a.out_token_stride = row;
  a.out_head_stride = o.head_dim;
  a.out_lse = layer.out_lse.as<float>();
  a.out_lse_token_stride = heads;
  a.enable_pdl = o.pdl;
  return layer;
}

// Relative L2 error of layer 0's first tokens against the fp64 reference.
double check_layer(const MergeOptions& o, const MergeLayer& layer) {
  SPARSE_DECODE_CUDA_CHECK(cudaDeviceSynchronize());
  const MergeStatesArgs& a = layer.args;
  const int64_t tokens = std::min<int64_t>(a.num_tokens, kCheckTokens);
  const int64_t in_bytes = o.partial_dtype == MergeDType::kFloat32 ? 4 : 2;
  const int64_t row = int64_t{a.num_heads} * a.head_dim;
  std::vector<uint8_t> partials(static_cast<size_t>(a.num_ranks * tokens * row * in_bytes));
  std::vector<float> lse(static_cast<size_t>(a.num_ranks * tokens * a.num_heads));
  for (int r = 0; r < a.num_ranks; ++r) {
    SPARSE_DECODE_CUDA_CHECK(cudaMemcpy(&partials[r * tokens * row * in_bytes], a.partial_of(r),
                                        tokens * row * in_bytes, cudaMemcpyDeviceToHost));
    SPARSE_DECODE_CUDA_CHECK(cudaMemcpy(&lse[r * tokens * a.num_heads], a.lse_of(r), tokens * a.num_heads * 4,
                                        cudaMemcpyDeviceToHost));
  }
  MergeStatesArgs host = a;
  host.memory = MemorySpace::kHost;
  host.num_tokens = tokens;
  host.partial_base = partials.data();
  host.partial_rank_stride = tokens * row;
  host.lse_base = lse.data();
  host.lse_rank_stride = tokens * a.num_heads;
  const reference::MergeResult ref = reference::merge_states(host);
  if (o.out_dtype == MergeDType::kBFloat16) {
    const std::vector<uint16_t> out = download<uint16_t>(a.out, static_cast<size_t>(tokens * row));
    return compare_bf16(out.data(), ref.out).relative_l2;
  }
  const std::vector<float> out = download<float>(a.out, static_cast<size_t>(tokens * row));
  double err2 = 0.0, ref2 = 0.0;
  for (size_t i = 0; i < out.size(); ++i) {
    err2 += (out[i] - ref.out[i]) * (out[i] - ref.out[i]);
    ref2 += ref.out[i] * ref.out[i];
  }
  return ref2 > 0 ? std::sqrt(err2 / ref2) : std::sqrt(err2);
}

int run(const MergeOptions& o) {
  std::string why;
  if (!testing::cuda_device_available(&why)) {
    std::fprintf(stderr, "sparse_decode_merge_bench: no CUDA device: %s\n", why.c_str());
    return 2;
  }
  std::ofstream csv;
  if (!o.csv.empty()) {
    csv.open(o.csv);
    csv << "ranks,tokens,heads,head_dim,partial_dtype,out_dtype,layers,us_per_merge,bytes,gbps,floor_us,check_error\n";
  }
  Stream stream = make_stream();
  GraphTimer timer(stream.get(), size_t{512} << 20);
  std::mt19937_64 rng(1);
  std::printf("merge_states, %s partials -> %s out, D = %d; median of %d replays (per merge = replay / L)%s\n",
              dtype_name(o.partial_dtype), dtype_name(o.out_dtype), o.head_dim, o.replays, o.pdl ? ", PDL on" : "");
  std::printf("%5s %6s %5s %3s %10s %12s %8s %9s %7s %9s\n", "R", "T", "H", "L", "us", "bytes", "GB/s", "floor us",
              "x floor", "check");
  int failed = 0;
  for (int64_t heads : o.heads) {
    for (int64_t ranks : o.ranks) {
      for (int64_t tokens : o.tokens) {
        const int64_t in_bytes = o.partial_dtype == MergeDType::kFloat32 ? 4 : 2;
        const int64_t out_bytes = o.out_dtype == MergeDType::kFloat32 ? 4 : 2;
        const int64_t pairs = tokens * heads;
        const int64_t bytes = ranks * pairs * (o.head_dim * in_bytes + 4) + pairs * (o.head_dim * out_bytes + 4);
        const int layers = static_cast<int>(std::clamp<int64_t>(kLayerBudget / bytes, 1, o.layers));
        std::vector<MergeLayer> merges;
        for (int i = 0; i < layers; ++i) merges.push_back(make_layer(o, ranks, tokens, heads, rng));
        if (Status s = supports(merges[0].args); !s.ok()) {
          std::printf("R %lld T %lld H %lld: %s\n", static_cast<long long>(ranks), static_cast<long long>(tokens),
                      static_cast<long long>(heads), s.message().c_str());
          continue;
        }
        const std::vector<double> replays = timer.time_replays(
            [&](CUstream_st* s) {
              for (const MergeLayer& m : merges) {
                if (Status status = merge_states(m.args, s); !status.ok()) throw std::runtime_error(status.message());
              }
            },
            o.replays, o.warmup);
        const double us = median(replays) / layers;
        const double error = check_layer(o, merges[0]);
        const bool pass = error <= kRelativeL2Bound;
        failed += !pass;
        const double floor_us = bytes / kHbmBytesPerUs;
        std::printf("%5lld %6lld %5lld %3d %10.2f %12lld %8.0f %9.2f %7.2f %9.1e%s\n", static_cast<long long>(ranks),
                    static_cast<long long>(tokens), static_cast<long long>(heads), layers, us,
                    static_cast<long long>(bytes), bytes / us / 1e3, floor_us, us / floor_us, error,
                    pass ? "" : " FAIL");
        if (csv.is_open()) {
          csv << ranks << ',' << tokens << ',' << heads << ',' << o.head_dim << ',' << dtype_name(o.partial_dtype)
              << ',' << dtype_name(o.out_dtype) << ',' << layers << ',' << us << ',' << bytes << ','
              << bytes / us / 1e3 << ',' << floor_us << ',' << error << '\n';
        }
      }
    }
  }
  if (failed) std::printf("%d shapes failed their check\n", failed);
  return failed ? 1 : 0;
}

}  // namespace
}  // namespace sparse_decode::bench

int main(int argc, char** argv) {
  try {
    return sparse_decode::bench::run(sparse_decode::bench::parse(argc, argv));
  } catch (const std::exception& error) {
    std::fprintf(stderr, "sparse_decode_merge_bench: %s\n", error.what());
    return 1;
  }
}
