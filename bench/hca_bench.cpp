#include "bench/hca_bench.h"

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <functional>
#include <stdexcept>
#include <string>
#include <vector>

#include "bench/bench_layers.h"
#include "bench/bench_run.h"
#include "bench/cuda_check.h"
#include "bench/graph_timer.h"
#include "bench/layer_check.h"
#include "common/instrument.h"
#include "sparse_decode/dsv4_decode.h"
#include "sparse_decode/introspection.h"
#include "sparse_decode/dsv4_decode_hca.h"
#include "testing/device_buffer.h"

namespace sparse_decode::bench {

std::string check_hca_options(const BenchOptions& o) {
  if (o.dtype != DType::kFloat8E4M3) return "--dtype: expected fp8 with --layout hca (FP8 E4M3 rows), got bf16";
  if (o.kernels.size() != 1 || o.kernels[0] != Dsv4Kernel::kAuto) {
    return "--kernel: expected auto with --layout hca, got " + kernels_name(o);
  }
  for (int32_t w : o.widths) {
    if (w < kSwaColumns || (w - kSwaColumns) % kBenchPageSize != 0) {
      return "--widths: expected 128 + whole pages of 64 top-k rows with --layout hca, got " + std::to_string(w);
    }
  }
  return check_common_options(o);
}

namespace {

// A layer's HCA metadata over the plain layer's rows: swa_rows are the
// layer's first 128 columns (stride W), the block table its top-k pages in
// column order; one request a token (q_len 1), so that hca_seq_lens bounds
// each token alone. Its own output, so that both decodes can be compared.
// `expansion`: dsv4_decode on HCA's expansion (section 1's table [T, W'],
// W' = 128 + max_pages * 64, -1 past the top-k, and the tokens' lens), the
// call a caller without the page walk makes; it writes the plain output.
struct HcaLayer {
  testing::DeviceBuffer swa_lens, block_table, lens, hca_seq_lens, out, expanded_indices;
  Dsv4HcaDecodeArgs args;
  Dsv4DecodeArgs expansion;
};

HcaLayer make_hca_layer(const BenchLayer& plain, const KvPools& pools, int index, const BenchShape& s,
                        CUstream_st* stream) {
  const int32_t topk = s.width - kSwaColumns;
  const int32_t max_pages = std::max<int32_t>(1, topk / static_cast<int32_t>(kBenchPageSize));
  const auto tokens = static_cast<size_t>(s.tokens);
  const std::vector<int32_t> indices = download<int32_t>(plain.indices.get(), tokens * static_cast<size_t>(s.width));
  std::vector<int32_t> table(tokens * static_cast<size_t>(max_pages), -1);
  for (size_t t = 0; t < tokens; ++t) {
    for (int32_t p = 0; p < topk / kBenchPageSize; ++p) {
      table[t * max_pages + p] = indices[t * s.width + kSwaColumns + p * kBenchPageSize] / kBenchPageSize;
    }
  }
  HcaLayer layer;
  layer.swa_lens = testing::DeviceBuffer(std::vector<int32_t>(tokens, kSwaColumns));
  layer.block_table = testing::DeviceBuffer(table);
  layer.lens = testing::DeviceBuffer(std::vector<int32_t>(tokens, s.width));
  layer.hca_seq_lens =
      testing::DeviceBuffer(std::vector<int32_t>(tokens, kSwaColumns + max_pages * static_cast<int32_t>(kBenchPageSize)));
  layer.out = testing::DeviceBuffer(plain.out.bytes());
  layer.out.fill_bytes(0xFF, stream);  // BF16 NaN: an element the decode never writes differs from the plain output

  const Dsv4DecodeArgs& p = plain.args;
  const int32_t expanded_width = kSwaColumns + max_pages * static_cast<int32_t>(kBenchPageSize);
  layer.expansion = p;
  if (expanded_width != s.width) {
    std::vector<int32_t> expanded(tokens * static_cast<size_t>(expanded_width), -1);
    for (size_t t = 0; t < tokens; ++t) {
      std::copy_n(indices.begin() + static_cast<std::ptrdiff_t>(t * s.width), s.width,
                  expanded.begin() + static_cast<std::ptrdiff_t>(t * expanded_width));
    }
    layer.expanded_indices = testing::DeviceBuffer(expanded);
    layer.expansion.indices = layer.expanded_indices.as<int32_t>();
    layer.expansion.width = expanded_width;
    layer.expansion.indices_stride = expanded_width;
    layer.expansion.compressed_kv = pools.compressed_region(index);  // none at W = 128
  }
  layer.expansion.lens = layer.lens.as<int32_t>();
  layer.expansion.lens_token_stride = 1;
  Dsv4HcaDecodeArgs& a = layer.args;
  a.memory = MemorySpace::kDevice;
  a.num_tokens = s.tokens;
  a.num_heads = s.heads;
  a.q = p.q;
  a.q_token_stride = p.q_token_stride;
  a.q_head_stride = p.q_head_stride;
  a.swa_kv = p.swa_kv;
  a.compressed_kv = pools.compressed_region(index);
  a.swa_rows = p.indices;
  a.swa_rows_stride = s.width;
  a.swa_lens = layer.swa_lens.as<int32_t>();
  a.block_table = layer.block_table.as<int32_t>();
  a.max_pages = max_pages;
  a.block_table_stride = max_pages;
  a.lens = layer.lens.as<int32_t>();
  a.hca_seq_lens = layer.hca_seq_lens.as<int32_t>();
  a.num_requests = static_cast<int32_t>(s.tokens);
  a.q_len = 1;
  a.bmm1_scale = p.bmm1_scale.value;
  a.bmm2_scale = p.bmm2_scale.value;
  a.sinks = p.sinks;
  a.out = layer.out.get();
  a.out_token_stride = p.out_token_stride;
  a.out_head_stride = p.out_head_stride;
  a.enable_pdl = s.enable_pdl;
  return layer;
}

void print_header(const BenchOptions& o, const KvPools& pools, const GraphTimer& timer, BenchMode mode) {
  print_mode_note(mode, true);
  std::printf("dsv4_decode_hca (SPEC section 3): FP8 rows; the compressed stream by pages of %lld rows (top-k = whole\n"
              "pages%s), one request a token; beside dsv4_decode on the same rows (the table of HCA's expansion)\n",
              static_cast<long long>(kBenchPageSize),
              mode == BenchMode::kDistinct ? ", no page read twice in a layer" : "");
  std::printf("%d layers a graph, each its own indices and pool region; pools %.2f GiB; L2 flushed with %zu MiB\n",
              o.layers, pools.total_bytes() / double(1 << 30), timer.flush_bytes() / kMiB);
  std::printf("sinks on, every column active; median of %d replays (per layer = replay / L)%s\n", o.replays,
              o.enable_pdl ? ", PDL on" : "");
  print_gather_note(o);
  std::printf("plain_us: dsv4_decode's plain form; general_us: its general form (one lens value, stride 0), which\n"
              "the page walk builds on; expansion_us: dsv4_decode on HCA's expansion (the [T, W'] table and the\n"
              "tokens' lens); the four calls' replays interleaved\n");
  std::printf("%6s %6s %5s %-8s %9s %-15s %9s %10s %12s %11s %7s %10s %10s %6s\n", "T", "width", "heads", "mode",
              "hca_us", "plain kernel", "plain_us", "general_us", "expansion_us", "gather_us", "rows/w", "fraction",
              "check_err", "bits");
}

struct HcaRow {
  BenchRow plain;         // dsv4_decode on the expanded rows (its plain form)
  double general_us = 0.0;  // the same call in the general form, which the page walk builds on
  double expansion_us = 0.0;  // dsv4_decode on HCA's expansion
  Dsv4Kernel expansion_ran = Dsv4Kernel::kAuto;
  double hca_us = 0.0;
};

// One CSV row of the shape: `call` (kernel,path) timed at `us` a layer, with
// the bytes and the gather of the plain row.
void write_csv_row(std::ofstream& csv, const BenchRow& p, const std::string& call, double us) {
  csv << call << ',' << p.tokens << ',' << p.width << ',' << p.heads << ',' << p.layers << ',' << us << ','
      << p.gathered_bytes << ',' << (us > 0 ? p.gathered_bytes / us / 1e3 : 0.0) << ',' << p.gather_us << ','
      << (us > 0 ? p.gather_us / us : 0.0) << ',' << mode_name(p.mode) << '\n';
}

void write_csv_rows(std::ofstream& csv, const HcaRow& r) {
  const BenchRow& p = r.plain;
  write_csv_row(csv, p, "dsv4_decode_hca,hca", r.hca_us);
  write_csv_row(csv, p, std::string("dsv4_decode,auto:") + kernel_name(p.ran), p.decode_us);
  write_csv_row(csv, p, std::string("dsv4_decode,general:") + kernel_name(p.ran), r.general_us);
  write_csv_row(csv, p, std::string("dsv4_decode,expansion:") + kernel_name(r.expansion_ran), r.expansion_us);
  csv.flush();
}

enum class ShapeOutcome { kTimed, kSkipped, kCheckFailed };

ShapeOutcome run_shape(const BenchOptions& o, CUstream_st* stream, const KvPools& pools, GraphTimer& timer,
                       BenchShape shape, HcaRow& row) {
  shape.page_aligned_topk = true;
  const BenchLayers layers(pools, shape, o.seed + 7919ull * shape.tokens + shape.width, stream);
  std::vector<HcaLayer> hca;
  for (int i = 0; i < layers.count(); ++i) hca.push_back(make_hca_layer(layers.layer(i), pools, i, shape, stream));
  SPARSE_DECODE_CUDA_CHECK(cudaStreamSynchronize(stream));
  for (Status status : {supports(layers.layer(0).args), supports(hca[0].args)}) {
    if (!status.ok()) {
      std::printf("skip T=%lld width=%d heads=%d: %s\n", static_cast<long long>(shape.tokens), shape.width,
                  shape.heads, status.message().c_str());
      return ShapeOutcome::kSkipped;
    }
  }
  size_t workspace_bytes = 0;
  for (int i = 0; i < layers.count(); ++i) {
    workspace_bytes = std::max({workspace_bytes, workspace_size(layers.layer(i).args), workspace_size(hca[i].args),
                                workspace_size(hca[i].expansion)});
  }
  const testing::DeviceBuffer workspace(workspace_bytes);

  // The general form: one lens value for every token (lens stride 0), the width.
  const testing::DeviceBuffer one_len(std::vector<int32_t>{shape.width});
  std::vector<Dsv4DecodeArgs> general;
  for (int i = 0; i < layers.count(); ++i) {
    Dsv4DecodeArgs a = layers.layer(i).args;
    a.lens = one_len.as<int32_t>();
    a.lens_token_stride = 0;
    general.push_back(a);
  }

  // Layer i of each call compared (dsv4_decode's plain and general forms,
  // dsv4_decode_hca, dsv4_decode on the expansion), as checked and as timed.
  const std::vector<std::function<void(int, CUstream_st*)>> calls = {
      [&](int i, CUstream_st* s) {
        if (Status status = dsv4_decode(layers.layer(i).args, workspace.get(), workspace_bytes, s); !status.ok()) {
          throw std::runtime_error("dsv4_decode: " + status.message());
        }
      },
      [&](int i, CUstream_st* s) {
        if (Status status = dsv4_decode(general[i], workspace.get(), workspace_bytes, s); !status.ok()) {
          throw std::runtime_error("dsv4_decode (general form): " + status.message());
        }
      },
      [&](int i, CUstream_st* s) {
        if (Status status = dsv4_decode_hca(hca[i].args, workspace.get(), workspace_bytes, s); !status.ok()) {
          throw std::runtime_error("dsv4_decode_hca: " + status.message());
        }
      },
      [&](int i, CUstream_st* s) {
        if (Status status = dsv4_decode(hca[i].expansion, workspace.get(), workspace_bytes, s); !status.ok()) {
          throw std::runtime_error("dsv4_decode (expansion): " + status.message());
        }
      }};

  // Layer 0: the plain decode against the fp64 reference, then HCA's bits
  // against the plain decode's, then the general form's and the
  // expansion's (each into the plain output) against HCA's.
  const LayerCheck check = check_layer(layers.layer(0).args, o.check_tokens, stream);
  calls[2](0, stream);
  SPARSE_DECODE_CUDA_CHECK(cudaStreamSynchronize(stream));
  const size_t out_bytes = layers.layer(0).out.bytes();
  const std::vector<uint8_t> hca_out = download<uint8_t>(hca[0].out.get(), out_bytes);
  bool same_bits = download<uint8_t>(layers.layer(0).out.get(), out_bytes) == hca_out;
  for (int call : {1, 3}) {
    calls[call](0, stream);
    SPARSE_DECODE_CUDA_CHECK(cudaStreamSynchronize(stream));
    same_bits = same_bits && download<uint8_t>(layers.layer(0).out.get(), out_bytes) == hca_out;
  }
  // A diagnostic build's stage skips (instrument.h) make the outputs wrong
  // by design: time them anyway.
  if ((!check.passes() || !same_bits) && instrument::skip_stages() == 0) {
    std::printf("FAIL T=%lld width=%d heads=%d mode %s, not timed: %s%s\n", static_cast<long long>(shape.tokens),
                shape.width, shape.heads, mode_name(shape.mode), check.summary().c_str(),
                same_bits ? "" : "; the outputs of dsv4_decode_hca and dsv4_decode (plain, general, expansion) differ");
    return ShapeOutcome::kCheckFailed;
  }

  const GatherTime gather =
      time_reference_gather(timer, o, layers.count(), [&](int i) -> const GatherLayer& { return layers.layer(i).gather; });
  BenchRow& p = row.plain;
  p.tokens = shape.tokens;
  p.width = shape.width;
  p.heads = shape.heads;
  p.mode = shape.mode;
  p.layers = layers.count();
  p.ran = dsv4_chosen_kernel(layers.layer(0).args);
  p.gathered_bytes = layers.gathered_bytes_per_layer();
  p.gather_us = gather.us;
  p.gather_rows_per_warp = gather.rows_per_warp;
  p.check_error = check.first_tokens.relative_l2;
  // Interleaved: at large T the GPU's clocks settle lower over a run, which
  // would weigh on whichever call is timed last.
  const std::vector<double> us = time_per_layer_interleaved(timer, o, layers.count(), calls);
  p.decode_us = us[0];
  row.general_us = us[1];
  row.hca_us = us[2];
  row.expansion_us = us[3];
  row.expansion_ran = dsv4_chosen_kernel(hca[0].expansion);
  return ShapeOutcome::kTimed;
}

}  // namespace

int run_hca_bench(const BenchOptions& options) {
  std::ofstream csv;
  if (const int status = start_run(options, check_hca_options(options), csv); status != 0) return status;
  if (const int status = check_distinct_memory(options, kHeadDim, 1); status != 0) return status;
  const Stream stream = make_stream();

  int failed = 0;
  for (BenchMode mode : options.modes) {
    // Each mode its own pools (the shared mode's are the defaults).
    const PoolBytes bytes = pool_bytes_for(mode, options.tokens, options.widths, options.layers, kHeadDim,
                                           default_pool_bytes(options));
    const KvPools pools(bytes.swa, bytes.compressed, options.layers, DType::kFloat8E4M3, options.seed, stream.get());
    GraphTimer timer(stream.get(), options.flush_bytes);
    print_header(options, pools, timer, mode);
    for_each_shape(options, mode, [&](const BenchShape& shape) {
      HcaRow row;
      const ShapeOutcome outcome = run_shape(options, stream.get(), pools, timer, shape, row);
      failed += outcome == ShapeOutcome::kCheckFailed;
      if (outcome != ShapeOutcome::kTimed) return;
      const BenchRow& p = row.plain;
      std::printf("%6lld %6d %5d %-8s %9.2f %-15s %9.2f %10.2f %12.2f %11.2f %7d %10.3f %10.2e %6s\n",
                  static_cast<long long>(p.tokens), p.width, p.heads, mode_name(p.mode), row.hca_us,
                  (std::string("auto:") + kernel_name(p.ran)).c_str(), p.decode_us, row.general_us,
                  row.expansion_us, p.gather_us,
                  p.gather_rows_per_warp, row.hca_us > 0 ? p.gather_us / row.hca_us : 0.0, p.check_error, "same");
      std::fflush(stdout);
      if (csv.is_open()) write_csv_rows(csv, row);
    });
  }
  std::printf("\nfraction = gather_us / hca_us; bits: dsv4_decode_hca's output against dsv4_decode's, plain and "
              "general form, expansion (layer 0)\n");
  return finish_run(options, csv.is_open(), failed);
}

}  // namespace sparse_decode::bench
