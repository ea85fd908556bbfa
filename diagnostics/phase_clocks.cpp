// The latency chain of a chunk, step by step (diagnostic build only:
// cmake -DSPARSE_DECODE_DIAGNOSTICS=ON). Runs the FP8 16-head stream or
// split kernel on a synthetic problem with the L2 flushed before each run
// and prints, for CTA 0 and the first thread of each warpgroup, the cycles
// between the marks of src/dsv4/steps/walk.cuh:
//   0 loop top, 1 rows visible (wait + barrier), 2 next gather issued,
//   3 scores stored (wgmma), 4 barrier, 5 softmax, 6 barrier, 7 P V + fold.
// Then every CTA's span marks by %globaltimer (ns from the earliest entry):
// the earliest, median and latest CTA at each mark (split, cluster and stream).
//   phase-clocks [stream|split|cluster|packed-split|packed-stream|packed-h64|hca] [tokens] [width] [heads]
// (heads: packed-h64 only, 64 or 128; its chunk marks are its own, named in its header. hca:
// dsv4_decode_hca's page walk, then dsv4_decode on the same rows, both by
// the stream kernel kAuto runs; width = 128 + whole pages of 64 rows.)
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "common/instrument.h"
#include "sparse_decode/dsv4_decode.h"
#include "sparse_decode/dsv4_decode_hca.h"
#include "sparse_decode/dsv4_decode_packed.h"
#include "sparse_decode/introspection.h"
#include "testing/device_buffer.h"
#include "testing/dsv4_hca_problem.h"
#include "testing/dsv4_problem.h"

using namespace sparse_decode;
namespace clocks = sparse_decode::instrument::phase_clocks;

// CTA 0's span marks (phase_clocks::kSpanRow) of each math warpgroup: cycles from the previous mark.
void print_span(const std::vector<unsigned long long>& marks) {
  for (int wg = 0; wg < clocks::kWarpgroups; ++wg) {
    const unsigned long long* m = &marks[(wg * (clocks::kChunks + 1) + clocks::kSpanRow) * clocks::kMarks];
    std::printf("%2d", wg);
    for (int k = 1; k < clocks::kMarks && m[k] != 0; ++k) std::printf(" %7lld", static_cast<long long>(m[k] - m[k - 1]));
    std::printf("\n");
  }
}

// CTA 0's chunk marks of each warpgroup, cycles from the previous mark (the
// chunk's start: from warpgroup 0's entry mark), for the first `chunks`
// chunks. Stream kernels with producers mark no gather step (mark 2 follows
// mark 1 at once). (The one-tile walk of the cluster
// kernel: mark 1 follows the gather's issue and the wait, mark 2 the CTA
// barrier.) Chunks CTA 0 did not walk are left out.
// `header`: the names of the kernel's chunk marks 1..7 (each column the cycles since the previous mark).
void print_chunks(const std::vector<unsigned long long>& marks, int chunks,
                  const char* header = "wait+bar  gather  scores  bar  softmax  bar  pv+fold") {
  std::printf("wg chunk   start |  %s | chunk\n", header);
  const unsigned long long origin = marks[clocks::kSpanRow * clocks::kMarks];  // warpgroup 0's entry
  for (int wg = 0; wg < clocks::kWarpgroups; ++wg) {
    for (int c = 0; c < chunks && c < clocks::kChunks; ++c) {
      const unsigned long long* m = &marks[(wg * (clocks::kChunks + 1) + c) * clocks::kMarks];
      if (m[0] == 0 && m[clocks::kMarks - 1] == 0) continue;
      std::printf("%2d %5d %7lld |", wg, c, static_cast<long long>(m[0] - origin));
      for (int k = 1; k < clocks::kMarks; ++k) std::printf(" %7lld", static_cast<long long>(m[k] - m[k - 1]));
      std::printf(" | %7lld\n", static_cast<long long>(m[clocks::kMarks - 1] - m[0]));
    }
  }
}

// 10th, 50th and 90th percentile of `v` (sorted here).
void print_percentiles(const char* what, std::vector<long long> v) {
  if (v.empty()) return;
  std::sort(v.begin(), v.end());
  std::printf("  %-22s %7lld %7lld %7lld\n", what, v[v.size() / 10], v[v.size() / 2], v[v.size() * 9 / 10]);
}

// Over every CTA, ns from each span mark to the next, and from a CTA's
// mark `last_mark` to the entry of the next CTA on its SM: where a CTA's
// time goes when there are several waves.
void print_steps_and_gaps(const std::vector<unsigned long long>& stamps, int ctas, int last_mark) {
  const auto at = [&](int c, int k) { return static_cast<long long>(stamps[c * clocks::kMarks + k]); };
  std::printf("ns a CTA, 10th / 50th / 90th percentile over the CTAs:\n");
  for (int k = 1; k <= last_mark; ++k) {
    std::vector<long long> step;
    for (int c = 0; c < ctas; ++c) {
      if (at(c, k) != 0 && at(c, k - 1) != 0) step.push_back(at(c, k) - at(c, k - 1));
    }
    const std::string what = "mark " + std::to_string(k - 1) + " -> " + std::to_string(k);
    print_percentiles(what.c_str(), step);
  }
  std::vector<int> order(ctas);
  for (int c = 0; c < ctas; ++c) order[c] = c;
  std::sort(order.begin(), order.end(), [&](int a, int b) {
    const long long sa = at(a, clocks::kSmSlot), sb = at(b, clocks::kSmSlot);
    return sa != sb ? sa < sb : at(a, 0) < at(b, 0);
  });
  std::vector<long long> gap, whole;
  for (int i = 0; i + 1 < ctas; ++i) {
    const int c = order[i], next = order[i + 1];
    if (at(c, clocks::kSmSlot) != at(next, clocks::kSmSlot) || at(c, last_mark) == 0) continue;
    gap.push_back(at(next, 0) - at(c, last_mark));
    whole.push_back(at(next, 0) - at(c, 0));
  }
  const std::string what = "mark " + std::to_string(last_mark) + " -> next entry";
  print_percentiles(what.c_str(), gap);
  print_percentiles("entry -> next entry", whole);
}

// Every CTA's span marks by %globaltimer, relative to the earliest entry:
// the earliest, median and latest CTA at each mark, the steps and the gaps
// between CTAs of an SM, then the CTAs that ended last.
void print_stamps(const std::vector<unsigned long long>& stamps) {
  // Every CTA's span marks by %globaltimer, relative to the earliest entry.
  unsigned long long first_entry = ~0ull;
  int ctas = 0;
  for (int c = 0; c < clocks::kStampCtas && stamps[c * clocks::kMarks] != 0; ++c, ++ctas) {
    first_entry = std::min(first_entry, stamps[c * clocks::kMarks]);
  }
  if (ctas == 0) return;
  std::printf("%d CTAs%s, span marks by %%globaltimer, ns from the earliest entry: earliest / median / latest CTA\n",
              ctas, ctas == clocks::kStampCtas ? " (the first ones only)" : "");
  for (int k = 0; k < clocks::kSmSlot; ++k) {
    std::vector<long long> at;
    for (int c = 0; c < ctas; ++c) {
      const unsigned long long t = stamps[c * clocks::kMarks + k];
      if (t != 0) at.push_back(static_cast<long long>(t - first_entry));
    }
    if (at.empty()) continue;
    std::sort(at.begin(), at.end());
    std::printf("mark %d: %6lld %6lld %6lld\n", k, at.front(), at[at.size() / 2], at.back());
  }
  int last_mark = 0;
  for (int k = 1; k < clocks::kSmSlot; ++k) {
    if (stamps[k] != 0) last_mark = k;
  }
  print_steps_and_gaps(stamps, ctas, last_mark);
  // The CTAs that ended last: their SM, entry and each later mark (ns from the earliest entry).
  std::vector<int> order(ctas);
  for (int c = 0; c < ctas; ++c) order[c] = c;
  std::sort(order.begin(), order.end(), [&](int a, int b) {
    return stamps[a * clocks::kMarks + last_mark] > stamps[b * clocks::kMarks + last_mark];
  });
  std::printf("the last CTAs to reach mark %d: cta sm | marks 0..%d\n", last_mark, last_mark);
  for (int i = 0; i < std::min(ctas, 12); ++i) {
    const unsigned long long* m = &stamps[order[i] * clocks::kMarks];
    std::printf("%5d %3llu |", order[i], m[clocks::kSmSlot]);
    for (int k = 0; k <= last_mark; ++k) std::printf(" %6lld", m[k] ? static_cast<long long>(m[k] - first_entry) : -1ll);
    std::printf("\n");
  }
}

// The packed stream kernel's split path, stream kernel or 64-head form
// (kernel "packed-split", "packed-stream" or "packed-h64", the last at
// `heads`) on a synthetic packed problem: CTA 0's span marks (and the
// 64-head form's chunk marks) and every CTA's stamps.
int run_packed(const std::string& kernel, int64_t tokens, int32_t width, int heads) {
  const bool h64 = kernel == "packed-h64";
  testing::Dsv4PackedProblemConfig config;
  config.tokens = tokens;
  if (h64) config.heads = heads;
  config.extra_width = width - kSwaColumns;
  config.extra_rows = 1 << 18;  // 153 MB of rows (more than L2): the gather reads DRAM
  const testing::Dsv4PackedProblem problem = testing::make_dsv4_packed_problem(config);
  testing::Dsv4PackedDeviceProblem device(problem);
  Dsv4PackedDecodeArgs& args = device.args;
  args.kernel = h64                      ? Dsv4PackedKernel::kStreamH64
                : kernel == "packed-split" ? Dsv4PackedKernel::kSplit
                                           : Dsv4PackedKernel::kStream;
  const size_t bytes = workspace_size(args);
  testing::DeviceBuffer workspace(bytes > 0 ? bytes : 16);
  testing::DeviceBuffer flush(size_t{512} << 20);
  for (int run = 0; run < 3; ++run) {
    flush.fill_bytes(static_cast<uint8_t>(run));
    const Status status = dsv4_decode_packed(args, workspace.get(), workspace.bytes(), nullptr);
    if (!status.ok()) {
      std::printf("dsv4_decode_packed: %s\n", status.message().c_str());
      return 1;
    }
    testing::check_cuda(cudaDeviceSynchronize(), "the decode");
  }
  std::vector<unsigned long long> marks(clocks::kCount), stamps(clocks::kStampCount, 0);
  int error = h64 ? clocks::read_packed_stream_h64(marks.data()) : clocks::read_packed_stream(marks.data());
  if (error == 0) {
    error = h64 ? clocks::read_packed_stream_h64_stamps(stamps.data())
                : clocks::read_packed_stream_stamps(stamps.data());
  }
  testing::check_cuda(error, "reading the clocks");
  int khz = 0;
  cudaDeviceGetAttribute(&khz, cudaDevAttrClockRate, 0);
  std::printf("%s, T = %lld, W = %d, H = %d, SM clock %d MHz\n", kernel.c_str(), static_cast<long long>(tokens),
              width, config.heads, khz / 1000);
  // The 64-head form: rows landed, key tile ready, S, softmax, P handed over, P V issued, P V done.
  if (h64) print_chunks(marks, (width + 63) / 64, "rows  dequant  scores  softmax  handover  weights+issue  pv-wait");
  std::printf("CTA 0 span, cycles from the previous mark (0 entry, 1 math warps' start, 2 q converted,\n"
              "3 first rows landed, 4 walk end, 5 results stored or written)\n");
  print_span(marks);
  print_stamps(stamps);
  return 0;
}

// The split path's combine CTAs (stamp rows from kCombineRow: 0 entry, 1 past
// the dependency wait, 2 folded and stored), ns from the split kernel's
// earliest entry: earliest / median / latest CTA at each mark.
void print_combine_stamps(const std::vector<unsigned long long>& stamps) {
  unsigned long long first_entry = ~0ull;
  for (int c = 0; c < clocks::kCombineRow && stamps[c * clocks::kMarks] != 0; ++c) {
    first_entry = std::min(first_entry, stamps[c * clocks::kMarks]);
  }
  for (int k = 0; k < 3; ++k) {
    std::vector<long long> at;
    for (int c = clocks::kCombineRow; c < clocks::kStampCtas && stamps[c * clocks::kMarks] != 0; ++c) {
      const unsigned long long t = stamps[c * clocks::kMarks + k];
      if (t != 0) at.push_back(static_cast<long long>(t - first_entry));
    }
    if (at.empty()) return;
    std::sort(at.begin(), at.end());
    std::printf("combine mark %d (%zu CTAs): %6lld %6lld %6lld\n", k, at.size(), at.front(), at[at.size() / 2],
                at.back());
  }
}

// The clock readers of the stream kernel a stream call of `tokens` tokens at
// width `width` runs (launch.cu): the deep kernel at most one token an SM,
// with P V warps from 5 chunks a token (SPARSE_DECODE_DEEP=1 or 2 overrides
// that there); those of the page-walk form or of the plain and general forms.
struct ClockReaders {
  int (*marks)(unsigned long long*);
  int (*stamps)(unsigned long long*);
  const char* name;
};

ClockReaders stream_clock_readers(bool page_walk, int64_t tokens, int32_t width) {
  namespace c = clocks;
  int sms = 0;
  cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0);
  const char* deep_override = std::getenv("SPARSE_DECODE_DEEP");
  const int forced = deep_override ? std::atoi(deep_override) : 0;
  const bool pv_warps = forced == 2 || (forced != 1 && width > 256);
  const int kind = tokens > sms ? 0 : pv_warps ? 2 : 1;
  const ClockReaders plain[] = {{c::read_stream, c::read_stream_stamps, "stream"},
                                {c::read_stream_deep, c::read_stream_deep_stamps, "deep stream"},
                                {c::read_stream_pv_warps, c::read_stream_pv_warps_stamps, "deep stream (P V warps)"}};
  const ClockReaders walk[] = {
      {c::read_page_walk_stream, c::read_page_walk_stream_stamps, "stream"},
      {c::read_page_walk_stream_deep, c::read_page_walk_stream_deep_stamps, "deep stream"},
      {c::read_page_walk_stream_pv_warps, c::read_page_walk_stream_pv_warps_stamps, "deep stream (P V warps)"}};
  return page_walk ? walk[kind] : plain[kind];
}

// dsv4_decode_hca (the page walk) and dsv4_decode on the expansion of the
// same problem (its lens at stride 1), one request a token, every window
// column active: each call's CTA 0 chunk and span marks and every CTA's
// stamps, so that the two starts and walks can be set side by side.
int run_hca(int64_t tokens, int32_t width) {
  testing::Dsv4HcaProblemConfig config;
  config.tokens = tokens;
  config.q_len = 1;
  config.max_pages = std::max(1, (width - kSwaColumns) / 64);
  config.compressed_pages = 4096;  // 128 MB of rows (more than L2): the gather reads DRAM
  config.swa_rows = 1 << 16;
  config.short_window = 0.0;
  config.odd_lens = 0.0;
  const testing::Dsv4HcaProblem problem = testing::make_dsv4_hca_problem(config);
  testing::Dsv4HcaDeviceProblem device(problem);
  if (dsv4_chosen_kernel(device.section1) != Dsv4Kernel::kStream) {
    std::printf("hca: kAuto does not run the stream kernel at T = %lld, W' = %d; take a larger T\n",
                static_cast<long long>(tokens), device.expansion.width);
    return 1;
  }
  const size_t bytes = std::max(workspace_size(device.hca), workspace_size(device.section1));
  testing::DeviceBuffer workspace(bytes > 0 ? bytes : 16);
  testing::DeviceBuffer flush(size_t{512} << 20);
  for (const bool page_walk : {true, false}) {
    for (int run = 0; run < 3; ++run) {
      flush.fill_bytes(static_cast<uint8_t>(run));
      const Status status = page_walk ? dsv4_decode_hca(device.hca, workspace.get(), workspace.bytes(), nullptr)
                                      : dsv4_decode(device.section1, workspace.get(), workspace.bytes(), nullptr);
      if (!status.ok()) {
        std::printf("%s: %s\n", page_walk ? "dsv4_decode_hca" : "dsv4_decode", status.message().c_str());
        return 1;
      }
      testing::check_cuda(cudaDeviceSynchronize(), "the decode");
    }
    const ClockReaders readers = stream_clock_readers(page_walk, tokens, device.expansion.width);
    std::vector<unsigned long long> marks(clocks::kCount), stamps(clocks::kStampCount, 0);
    int error = readers.marks(marks.data());
    if (error == 0) error = readers.stamps(stamps.data());
    testing::check_cuda(error, "reading the clocks");
    std::printf("%s, %s kernel, T = %lld, W' = %d; cycles from the previous mark\n",
                page_walk ? "dsv4_decode_hca (page walk)" : "dsv4_decode on the expansion", readers.name,
                static_cast<long long>(tokens), device.expansion.width);
    print_chunks(marks, (device.expansion.width + 63) / 64);
    std::printf("CTA 0 span (0 entry, 1 walk start, 2 query landed, 3 walk end, 4 stored)\n");
    print_span(marks);
    print_stamps(stamps);
  }
  return 0;
}

int main(int argc, char** argv) {
  const std::string kernel = argc > 1 ? argv[1] : "stream";
  if (kernel == "hca") return run_hca(argc > 2 ? std::atoll(argv[2]) : 128, argc > 3 ? std::atoi(argv[3]) : 640);
  if (kernel.rfind("packed", 0) == 0) {
    return run_packed(kernel, argc > 2 ? std::atoll(argv[2]) : 1, argc > 3 ? std::atoi(argv[3]) : 640,
                      argc > 4 ? std::atoi(argv[4]) : 64);
  }
  testing::Dsv4ProblemConfig config;
  config.tokens = argc > 2 ? std::atoll(argv[2]) : 1;
  config.width = argc > 3 ? std::atoi(argv[3]) : 640;
  config.lens = false;
  config.compressed_rows = 1 << 18;  // 128 MB of rows (more than L2): the gather reads DRAM
  const testing::Dsv4Problem problem = testing::make_dsv4_problem(config);
  testing::Dsv4DeviceProblem device(problem);
  device.args.kernel = kernel == "split"     ? Dsv4Kernel::kSplit
                       : kernel == "cluster" ? Dsv4Kernel::kCluster
                                             : Dsv4Kernel::kStream;
  const size_t bytes = workspace_size(device.args);
  testing::DeviceBuffer workspace(bytes > 0 ? bytes : 16);
  testing::DeviceBuffer flush(size_t{512} << 20);
  std::vector<unsigned long long> marks(clocks::kCount);
  for (int run = 0; run < 3; ++run) {
    flush.fill_bytes(static_cast<uint8_t>(run));
    const Status status = dsv4_decode(device.args, workspace.get(), workspace.bytes(), nullptr);
    if (!status.ok()) {
      std::printf("dsv4_decode: %s\n", status.message().c_str());
      return 1;
    }
    testing::check_cuda(cudaDeviceSynchronize(), "the decode");
  }
  std::vector<unsigned long long> stamps(clocks::kStampCount, 0);
  const ClockReaders stream = stream_clock_readers(false, config.tokens, config.width);
  int error = kernel == "split"     ? clocks::read_split(marks.data())
              : kernel == "cluster" ? clocks::read_cluster(marks.data())
                                    : stream.marks(marks.data());
  if (error == 0 && kernel == "split") error = clocks::read_split_stamps(stamps.data());
  if (error == 0 && kernel == "stream") error = stream.stamps(stamps.data());
  if (error == 0 && kernel == "cluster") error = clocks::read_cluster_stamps(stamps.data());
  testing::check_cuda(error, "reading the clocks");
  int khz = 0;
  cudaDeviceGetAttribute(&khz, cudaDevAttrClockRate, 0);
  std::printf("%s kernel, T = %lld, W = %d, SM clock %d MHz; cycles from the previous mark\n", kernel.c_str(),
              static_cast<long long>(config.tokens), config.width, khz / 1000);
  print_chunks(marks, (config.width + 63) / 64);
  std::printf("CTA 0 span, cycles from the previous span mark (0 entry, 1 walk start, then the kernel's own:\n"
              "stream 2 query landed, 3 walk end, 4 stored; split 2 walk end, 3 group written; cluster 2 walk\n"
              "end, 3 cluster wait, 4 sent, 5 received, 6 stored)\n");
  print_span(marks);
  print_stamps(stamps);
  if (kernel == "split") print_combine_stamps(stamps);
  return 0;
}
