// sparse-decode: the command-line program of the library.
//   demo   one DeepSeek-V4 decode step: on the GPU, checked against the fp64
//          reference; else on the CPU backend (that reference)
//   bench  per-layer times the DESIGN.md way (GPU only)
#include <cstdio>
#include <exception>
#include <string>
#include <vector>

#include "bench/dsa_bench.h"
#include "bench/dsv4_bench.h"
#include "bench/hca_bench.h"
#include "bench/packed_bench.h"
#include "cli_args.h"
#include "cuda_device.h"
#include "demo.h"
#include "sparse_decode/dsa_decode.h"

namespace sparse_decode::cli {
namespace {

constexpr const char* kUsageLine = "usage: sparse-decode <command> [options]\n";

constexpr const char* kDemoHelp = R"(  demo    one DeepSeek-V4-shaped decode step (16 heads, FP8 E4M3 synthetic data).
          On the GPU when one serves the call: its BF16 output is checked against
          the fp64 reference (relative L2 error <= 3e-3). Else on the CPU backend,
          which is that reference: it runs, and no accuracy check is possible.
          CPU work longer than a few seconds (the CPU backend, or the reference
          check of a GPU run) prints an estimate, then its progress (stderr).
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
            --heads 16,64         query heads: 8, 16, 32, 64 or 128 (default 16,64,128;
                                  hca: 16)
            --mode M              input rows: shared (requests of 6 tokens whose 128-row
                                  windows overlap; top-k rows may repeat across tokens),
                                  distinct (one request a token, its own window, no row
                                  read twice in a layer: every row from DRAM; the pools
                                  grow to hold every row of the largest shape once), or
                                  all (shared, then distinct; the default, except with dsa:
                                  distinct; dsa's shared mode: runs of 6 tokens share a
                                  block table, their R regions sliding by one a token)
            --layers L            layers a graph, each its own rows: 1..1024 (default 8)
            --replays R           timed replays, median reported: 1..100000 (default 30)
            --csv PATH            also write the rows as CSV (column `mode` says which)
            --pdl                 enable programmatic dependent launch
            --batch-invariant     packed only: the calls' batch_invariant flag (one kernel
                                  at every batch; CSV path packed+invariant[+pdl])
            --layout L            plain (default: dsv4_decode), packed (dsv4_decode_packed,
                                  584-byte rows; width W = SWA 128 + extra W - 128), hca
                                  (dsv4_decode_hca, FP8: top-k as whole pages of 64 rows,
                                  widths 128 + a multiple of 64, beside dsv4_decode on the
                                  same rows) or dsa (dsa_decode, SPEC section 4; options below)
            --dtype D             fp8 (default) or bf16: q and pools (BF16: 1024-byte rows);
                                  packed and hca: fp8 only; dsa: the cache (q, out and gate
                                  are BF16)
            --kernel K            auto (default), cluster, stream, split, or all (each of them
                                  a shape); packed: not all, and also stream_h64 (the
                                  64-head form; 64 and 128 heads) and split_h64 (its
                                  split path); hca and dsa: auto only
            --gather-rows N       rows each warp of the reference gather keeps in flight:
                                  1, 2, 4 or 8; 0 (default) times all four and keeps
                                  the fastest for each shape (not with dsa)
            --seed S              random seed: 0..9223372036854775807 (default 1)
          --layout dsa: rows = tokens x G, each reading R regions of `block` keys (all
          visible: R x block keys a row) through a per-request block table into one
          region of a >= 2 GiB cache per layer; one request a token, its pages its own
          (--mode distinct); --heads is per group (1..16, default 16); --widths, --kernel
          and --gather-rows do not apply. Lists time every combination.
            --groups 1,4          G: KV groups, 1..128 (default 1)
            --block 64            keys a region and a page, 1..4096 (default 64)
            --regions 16          R: regions a row, 1..4096 (default 16)
            --splits 0,1,4        splits of dsa_decode, 0..32; 0 (default) = dsa_splits_for(rows)
            --dsa-kernel K        auto (default), staged, direct (FP8 only), cluster (FP8, the
                                  direct kernel folding a row's splits in a cluster: at most
                                  16 run), both (staged then direct on every shape and
                                  split) or direct-both (direct then cluster)
            --cache-mib N         cache size in MiB, 1..1048576 (default: enough for every
                                  request's pages to be its own at the largest T, >= 2 GiB;
                                  smaller than that is refused)
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

// Refuses an option that the command does not have, naming the ones it has.
[[noreturn]] void unknown_option(const std::string& option, const std::vector<std::string>& options) {
  std::string names;
  for (const std::string& name : options) names += name + ", ";
  throw CliError("unknown option " + option + " (options: " + names + "--help)");
}

DemoOptions parse_demo(ArgReader& args) {
  DemoOptions o;
  while (!args.done()) {
    const std::string option = args.next_option();
    if (option == "--tokens") {
      o.tokens = args.int_value(option, 1, 65536);
    } else if (option == "--width") {
      o.width = static_cast<int32_t>(args.int_value(option, 128, 128 + 16384));
      if (o.width % 4 != 0) throw CliError("--width: expected a multiple of 4 in [128, 16512], got " +
                                           std::to_string(o.width));
    } else if (option == "--seed") {
      o.seed = static_cast<uint64_t>(args.int_value(option, 0, INT64_MAX));
    } else if (option == "--ragged") {
      o.ragged = true;
    } else if (option == "--cpu") {
      o.force_cpu = true;
    } else {
      unknown_option(option, {"--tokens", "--width", "--seed", "--ragged", "--cpu"});
    }
  }
  return o;
}

std::vector<int32_t> int32_list(ArgReader& args, const std::string& option, int32_t min, int32_t max) {
  std::vector<int32_t> values;
  for (int64_t v : args.int_list(option, min, max)) values.push_back(static_cast<int32_t>(v));
  return values;
}

bench::BenchLayout parse_layout(ArgReader& args, const std::string& option) {
  const std::string layout = args.choice(option, {"plain", "packed", "hca", "dsa"});
  if (layout == "packed") return bench::BenchLayout::kPacked;
  if (layout == "hca") return bench::BenchLayout::kHca;
  if (layout == "dsa") return bench::BenchLayout::kDsa;
  return bench::BenchLayout::kPlain;
}

std::vector<bench::BenchMode> parse_modes(ArgReader& args, const std::string& option) {
  const std::string mode = args.choice(option, {"shared", "distinct", "all"});
  if (mode == "shared") return {bench::BenchMode::kShared};
  if (mode == "distinct") return {bench::BenchMode::kDistinct};
  return {bench::BenchMode::kShared, bench::BenchMode::kDistinct};
}

std::vector<Dsv4Kernel> parse_kernels(ArgReader& args, const std::string& option) {
  const std::string kernel =
      args.choice(option, {"auto", "cluster", "stream", "split", "stream_h64", "split_h64", "all"});
  if (kernel == "stream_h64") return {bench::kPackedStreamH64};
  if (kernel == "split_h64") return {bench::kPackedSplitH64};
  if (kernel == "cluster") return {Dsv4Kernel::kCluster};
  if (kernel == "stream") return {Dsv4Kernel::kStream};
  if (kernel == "split") return {Dsv4Kernel::kSplit};
  if (kernel == "all") return {Dsv4Kernel::kCluster, Dsv4Kernel::kStream, Dsv4Kernel::kSplit, Dsv4Kernel::kAuto};
  return {Dsv4Kernel::kAuto};
}

std::vector<DsaKernel> parse_dsa_kernels(ArgReader& args, const std::string& option) {
  const std::string kernel = args.choice(option, {"auto", "staged", "direct", "cluster", "both", "direct-both"});
  if (kernel == "staged") return {DsaKernel::kStaged};
  if (kernel == "direct") return {DsaKernel::kDirect};
  if (kernel == "cluster") return {DsaKernel::kDirectCluster};
  if (kernel == "both") return {DsaKernel::kStaged, DsaKernel::kDirect};
  if (kernel == "direct-both") return {DsaKernel::kDirect, DsaKernel::kDirectCluster};
  return {DsaKernel::kAuto};
}

// What the chosen layout asks of the options (some depend on --layout, which
// may come after them).
std::string check_layout_options(const bench::BenchOptions& o) {
  if (o.batch_invariant && o.layout != bench::BenchLayout::kPacked) {
    return "--batch-invariant: expected --layout packed with it (the flag of dsv4_decode_packed)";
  }
  switch (o.layout) {
    case bench::BenchLayout::kPacked: return bench::check_packed_options(o);
    case bench::BenchLayout::kHca: return bench::check_hca_options(o);
    case bench::BenchLayout::kDsa: return bench::check_dsa_options(o);
    default: return bench::check_dsv4_options(o);
  }
}

bench::BenchOptions parse_bench(ArgReader& args) {
  bench::BenchOptions o;
  while (!args.done()) {
    const std::string option = args.next_option();
    if (option == "--tokens") {
      o.tokens = args.int_list(option, 1, 65536);
    } else if (option == "--widths") {
      o.widths = int32_list(args, option, 128, 128 + 16384);
    } else if (option == "--heads") {
      o.heads = int32_list(args, option, 1, 128);
    } else if (option == "--mode") {
      o.modes = parse_modes(args, option);
    } else if (option == "--layers") {
      o.layers = static_cast<int>(args.int_value(option, 1, 1024));
    } else if (option == "--replays") {
      o.replays = static_cast<int>(args.int_value(option, 1, 100000));
    } else if (option == "--csv") {
      o.csv_path = args.string_value(option);
    } else if (option == "--gather-rows") {
      o.gather_rows_per_warp = static_cast<int>(args.int_choice(option, {0, 1, 2, 4, 8}));
    } else if (option == "--pdl") {
      o.enable_pdl = true;
    } else if (option == "--batch-invariant") {
      o.batch_invariant = true;
    } else if (option == "--layout") {
      o.layout = parse_layout(args, option);
    } else if (option == "--dtype") {
      o.dtype = args.choice(option, {"fp8", "bf16"}) == "bf16" ? DType::kBFloat16 : DType::kFloat8E4M3;
    } else if (option == "--kernel") {
      o.kernels = parse_kernels(args, option);
    } else if (option == "--groups") {
      o.dsa_groups = int32_list(args, option, 1, 128);
    } else if (option == "--block") {
      o.dsa_block_sizes = int32_list(args, option, 1, 4096);
    } else if (option == "--regions") {
      o.dsa_regions = int32_list(args, option, 1, 4096);
    } else if (option == "--splits") {
      o.dsa_splits = int32_list(args, option, 0, kDsaMaxSplits);
    } else if (option == "--dsa-kernel") {
      o.dsa_kernels = parse_dsa_kernels(args, option);
    } else if (option == "--cache-mib") {
      o.dsa_cache_bytes = static_cast<size_t>(args.int_value(option, 1, int64_t{1} << 20)) * bench::kMiB;
    } else if (option == "--seed") {
      o.seed = static_cast<uint64_t>(args.int_value(option, 0, INT64_MAX));
    } else {
      unknown_option(option, {"--tokens", "--widths", "--heads", "--mode", "--layers", "--replays", "--csv",
                              "--gather-rows", "--pdl", "--batch-invariant", "--layout", "--dtype", "--kernel", "--groups", "--block",
                              "--regions", "--splits", "--dsa-kernel", "--cache-mib", "--seed"});
    }
  }
  o = bench::with_layout_defaults(o);
  if (const std::string problem = check_layout_options(o); !problem.empty()) throw CliError(problem);
  if (o.layers < 8) std::fprintf(stderr, "bench: note: DESIGN.md asks for >= 8 layers, got %d\n", o.layers);
  if (o.replays < 30) std::fprintf(stderr, "bench: note: DESIGN.md asks for >= 30 replays, got %d\n", o.replays);
  return o;
}

int run_bench(const bench::BenchOptions& options) {
  if (std::string why; !find_cuda_device(&why)) {
    std::fprintf(stderr,
                 "sparse-decode bench: needs a CUDA device (Hopper, sm_90a): %s.\n"
                 "Times are only meaningful on the GPU; `sparse-decode demo` runs on the CPU backend.\n",
                 why.c_str());
    return 2;
  }
  switch (options.layout) {
    case bench::BenchLayout::kPacked: return bench::run_packed_bench(options);
    case bench::BenchLayout::kHca: return bench::run_hca_bench(options);
    case bench::BenchLayout::kDsa: return bench::run_dsa_bench(options);
    default: return bench::run_dsv4_bench(options);
  }
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
  try {
    if (command == "demo") {
      const DemoOptions options = parse_demo(args);
      return run_demo(options);
    }
    const bench::BenchOptions options = parse_bench(args);
    return run_bench(options);
  } catch (const CliError& error) {
    std::fprintf(stderr, "sparse-decode %s: %s (see sparse-decode %s --help)\n", command.c_str(), error.what(),
                 command.c_str());
    return 2;
  }
}

}  // namespace
}  // namespace sparse_decode::cli

int main(int argc, char** argv) {
  try {
    return sparse_decode::cli::run(argc, argv);
  } catch (const std::exception& error) {
    std::fprintf(stderr, "sparse-decode: error: %s\n", error.what());
    return 1;
  }
}
