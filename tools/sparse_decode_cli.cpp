// sparse-decode: the command-line program of the library.
//   demo   one DeepSeek-V4 decode step, checked against the fp64 reference
//   bench  per-layer times the DESIGN.md way (GPU only)
#include <cstdio>
#include <cstring>
#include <exception>
#include <string>
#include <vector>

#include "bench/dsa_bench.h"
#include "bench/dsv4_bench.h"
#include "bench/hca_bench.h"
#include "bench/packed_bench.h"
#include "cli_args.h"
#include "demo.h"
#include "sparse_decode/dsa_decode.h"

namespace sparse_decode::cli {
namespace {

constexpr const char* kUsageLine = "usage: sparse-decode <command> [options]\n";

constexpr const char* kDemoHelp = R"(  demo    one DeepSeek-V4-shaped decode step (16 heads, FP8 E4M3 synthetic data),
          on the GPU when one serves the call, else on the CPU backend; checks the
          BF16 output against the fp64 reference (relative L2 error <= 3e-3).
            --tokens N   query tokens, requests of 6: 1..65536 (default 6)
            --width W    128 SWA + top-k columns: a multiple of 4 in 128..16512
                         (default 640)
            --seed S     random seed: 0..9223372036854775807 (default 1)
            --ragged     per-token active lengths in [W/2, W] (default: all W active)
            --cpu        run the CPU backend even when a GPU is present
)";

constexpr const char* kBenchHelp = R"(  bench   per-layer time of dsv4_decode inside a CUDA graph of L layers, L2 flushed
          before each replay, beside a plain gather of the same rows (needs a GPU).
            --tokens 1,6,12,...   T of each shape, 1..65536 (default 1,6,12,48,128,512,2048)
            --widths 640,128      widths, multiples of 4 in 128..16512 (default 640,128)
            --heads 16,64         query heads (default 16): 8, 16, 32, 64 or 128
            --layers L            layers a graph, each its own rows: 1..1024 (default 8)
            --replays R           timed replays, median reported: 1..100000 (default 30)
            --csv PATH            also write the rows as CSV
            --pdl                 enable programmatic dependent launch
            --layout L            plain (default: dsv4_decode), packed (dsv4_decode_packed,
                                  584-byte rows; width W = SWA 128 + extra W - 128), hca
                                  (dsv4_decode_hca, FP8: top-k as whole pages of 64 rows,
                                  widths 128 + a multiple of 64, beside dsv4_decode on the
                                  same rows) or dsa (dsa_decode, SPEC section 4; options below)
            --dtype D             fp8 (default) or bf16: q and pools (BF16: 1024-byte rows);
                                  packed and hca: fp8 only; dsa: the cache (q, out and gate
                                  are BF16)
            --kernel K            auto (default), cluster, stream, split, or all (each of them
                                  a shape); packed: not all; hca and dsa: auto only
            --gather-rows N       rows each warp of the reference gather keeps in flight:
                                  1, 2, 4 or 8; 0 (default) times all four and keeps
                                  the fastest for each shape (not with dsa)
            --seed S              random seed: 0..9223372036854775807 (default 1)
          --layout dsa: rows = tokens x G, each reading R regions of `block` keys (all
          visible: R x block keys a row) through a per-request block table into one
          region of a >= 2 GiB cache per layer; --heads is per group (1..16, default 16);
          --widths, --kernel and --gather-rows do not apply. Lists time every combination.
            --groups 1,4          G: KV groups, 1..128 (default 1)
            --block 64            keys a region and a page, 1..4096 (default 64)
            --regions 16          R: regions a row, 1..4096 (default 16)
            --splits 0,1,4        splits of dsa_decode, 0..32; 0 (default) = dsa_splits_for(rows)
            --cache-mib N         cache size in MiB, 1..1048576 (default: enough for distinct
                                  pages across requests at the largest T, >= 2 GiB, <= half
                                  the free memory)
)";

constexpr const char* kHelpHelp = R"(  help    this text (also --help, -h); `sparse-decode help demo` or
          `sparse-decode demo --help` print the options of one command
)";

void print_help(const std::string& command) {
  if (command == "demo") {
    std::printf("usage: sparse-decode demo [options]\n\n%s", kDemoHelp);
  } else if (command == "bench") {
    std::printf("usage: sparse-decode bench [options]\n\n%s", kBenchHelp);
  } else {
    std::printf("%s\ncommands:\n%s%s%s", kUsageLine, kDemoHelp, kBenchHelp, kHelpHelp);
  }
}

DemoOptions parse_demo(ArgReader& args) {
  DemoOptions o;
  while (!args.done()) {
    const std::string option = args.next_option();
    if (option == "--tokens") o.tokens = args.int_value(option, 1, 65536);
    else if (option == "--width") o.width = static_cast<int32_t>(args.int_value(option, 128, 128 + 16384));
    else if (option == "--seed") o.seed = static_cast<uint64_t>(args.int_value(option, 0, INT64_MAX));
    else if (option == "--ragged") o.ragged = true;
    else if (option == "--cpu") o.force_cpu = true;
    else throw CliError("demo: unknown option " + option);
  }
  if (o.width % 4 != 0) throw CliError("--width: expected a multiple of 4");
  return o;
}

std::vector<int32_t> int32_list(ArgReader& args, const std::string& option, int32_t min, int32_t max) {
  std::vector<int32_t> values;
  for (int64_t v : args.int_list(option, min, max)) values.push_back(static_cast<int32_t>(v));
  return values;
}

bench::BenchOptions parse_bench(ArgReader& args) {
  bench::BenchOptions o;
  while (!args.done()) {
    const std::string option = args.next_option();
    if (option == "--tokens") {
      o.tokens = args.int_list(option, 1, 65536);
    } else if (option == "--widths") {
      o.widths.clear();
      for (int64_t w : args.int_list(option, 128, 128 + 16384)) o.widths.push_back(static_cast<int32_t>(w));
    } else if (option == "--heads") {
      o.heads.clear();
      for (int64_t h : args.int_list(option, 1, 128)) o.heads.push_back(static_cast<int32_t>(h));
    } else if (option == "--layers") {
      o.layers = static_cast<int>(args.int_value(option, 1, 1024));
    } else if (option == "--replays") {
      o.replays = static_cast<int>(args.int_value(option, 1, 100000));
    } else if (option == "--csv") {
      o.csv_path = args.string_value(option);
    } else if (option == "--gather-rows") {
      o.gather_rows_per_warp = static_cast<int>(args.int_value(option, 0, 8));
    } else if (option == "--pdl") {
      o.enable_pdl = true;
    } else if (option == "--layout") {
      const std::string layout = args.string_value(option);
      if (layout == "plain") {
        o.layout = bench::BenchLayout::kPlain;
      } else if (layout == "packed") {
        o.layout = bench::BenchLayout::kPacked;
      } else if (layout == "hca") {
        o.layout = bench::BenchLayout::kHca;
      } else if (layout == "dsa") {
        o.layout = bench::BenchLayout::kDsa;
      } else {
        throw CliError("bench: --layout expects plain, packed, hca or dsa, got '" + layout + "'");
      }
    } else if (option == "--dtype") {
      const std::string dtype = args.string_value(option);
      if (dtype != "fp8" && dtype != "bf16") throw CliError("bench: --dtype expects fp8 or bf16, got '" + dtype + "'");
      o.dtype = dtype == "bf16" ? DType::kBFloat16 : DType::kFloat8E4M3;
    } else if (option == "--kernel") {
      const std::string kernel = args.string_value(option);
      if (kernel == "auto") {
        o.kernels = {Dsv4Kernel::kAuto};
      } else if (kernel == "cluster") {
        o.kernels = {Dsv4Kernel::kCluster};
      } else if (kernel == "stream") {
        o.kernels = {Dsv4Kernel::kStream};
      } else if (kernel == "split") {
        o.kernels = {Dsv4Kernel::kSplit};
      } else if (kernel == "all") {
        o.kernels = {Dsv4Kernel::kCluster, Dsv4Kernel::kStream, Dsv4Kernel::kSplit, Dsv4Kernel::kAuto};
      } else {
        throw CliError("bench: --kernel expects auto, cluster, stream, split or all, got '" + kernel + "'");
      }
    } else if (option == "--groups") {
      o.dsa_groups = int32_list(args, option, 1, 128);
    } else if (option == "--block") {
      o.dsa_block_sizes = int32_list(args, option, 1, 4096);
    } else if (option == "--regions") {
      o.dsa_regions = int32_list(args, option, 1, 4096);
    } else if (option == "--splits") {
      o.dsa_splits = int32_list(args, option, 0, kDsaMaxSplits);
    } else if (option == "--cache-mib") {
      o.dsa_cache_bytes = static_cast<size_t>(args.int_value(option, 1, int64_t{1} << 20)) * bench::kMiB;
    } else if (option == "--seed") {
      o.seed = static_cast<uint64_t>(args.int_value(option, 0, INT64_MAX));
    } else {
      throw CliError("bench: unknown option " + option);
    }
  }
  if (o.layers < 8) std::fprintf(stderr, "bench: note: DESIGN.md asks for >= 8 layers, got %d\n", o.layers);
  if (o.replays < 30) std::fprintf(stderr, "bench: note: DESIGN.md asks for >= 30 replays, got %d\n", o.replays);
  return o;
}

// Exit codes: 0 done (or help), 1 a check failed, 2 a usage error.
int run(int argc, char** argv) {
  const std::string command = argc > 1 ? argv[1] : "";
  if (command == "help" || command == "--help" || command == "-h") {
    const std::string topic = argc > 2 ? argv[2] : "";
    if (!topic.empty() && topic != "demo" && topic != "bench" && topic != "help") {
      std::fprintf(stderr, "sparse-decode help: unknown command '%s' (commands: demo, bench, help)\n", topic.c_str());
      return 2;
    }
    print_help(topic);
    return 0;
  }
  if (command != "demo" && command != "bench") {
    if (command.empty()) {
      std::fprintf(stderr, "%s(commands: demo, bench, help; see sparse-decode --help)\n", kUsageLine);
    } else {
      std::fprintf(stderr, "sparse-decode: unknown command '%s' (commands: demo, bench, help; see sparse-decode "
                   "--help)\n", command.c_str());
    }
    return 2;
  }
  if (asks_for_help(argc, argv, 2)) {
    print_help(command);
    return 0;
  }
  ArgReader args(argc, argv, 2);
  if (command == "demo") return run_demo(parse_demo(args));
  const bench::BenchOptions options = parse_bench(args);
  switch (options.layout) {
    case bench::BenchLayout::kPacked: return bench::run_packed_bench(options);
    case bench::BenchLayout::kHca: return bench::run_hca_bench(options);
    case bench::BenchLayout::kDsa: return bench::run_dsa_bench(options);
    default: return bench::run_dsv4_bench(options);
  }
}

}  // namespace
}  // namespace sparse_decode::cli

int main(int argc, char** argv) {
  try {
    return sparse_decode::cli::run(argc, argv);
  } catch (const sparse_decode::cli::CliError& error) {
    std::fprintf(stderr, "sparse-decode: %s (see sparse-decode --help)\n", error.what());
    return 2;
  } catch (const std::exception& error) {
    std::fprintf(stderr, "sparse-decode: error: %s\n", error.what());
    return 1;
  }
}
