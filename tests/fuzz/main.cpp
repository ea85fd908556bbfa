// sparse_decode_fuzz: the randomized metadata fuzzer of the four operations
// against the fp64 reference (tests/fuzz/README.md).
//
//   sparse_decode_fuzz [--ops dsv4,packed,hca,dsa] [--cases N] [--seed S] [--jobs J]
//                      [--backend gpu|cpu] [--print N]
//   sparse_decode_fuzz --replay OP:SEED [--backend gpu|cpu]
//   sparse_decode_fuzz --self-test        the host-side checks, no GPU
//   sparse_decode_fuzz --host-metadata    the separate refusal check
//
// Exit codes: 0 every case passed; 1 a case failed (wrong output, a write
// outside the outputs, a wrong counter, a wrong refusal, a device fault);
// 2 bad usage; 3 (--host-metadata) a call that should be refused was not;
// 77 no CUDA device for --backend gpu (ctest reports it as skipped).
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cinttypes>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "fuzz/device.h"
#include "fuzz/fuzz.h"

namespace sparse_decode::fuzz {
namespace {

struct Op {
  const char* name;
  Outcome (*run)(uint64_t, Device&, std::string*);
};
constexpr Op kOps[] = {{"dsv4", run_dsv4_case}, {"packed", run_packed_case}, {"hca", run_hca_case}, {"dsa", run_dsa_case}};
constexpr int kOpCount = 4;

struct Totals {
  uint64_t cases = 0, refused = 0, garbage = 0, failed = 0, policy = 0;
  double max_error = 0.0, max_above_floor = 0.0, seconds = 0.0;
  bool stopped = false;  // a device fault ended the shard early
  void add(const Totals& o) {
    cases += o.cases, refused += o.refused, garbage += o.garbage, failed += o.failed, policy += o.policy;
    max_error = std::max(max_error, o.max_error);
    max_above_floor = std::max(max_above_floor, o.max_above_floor);
    seconds = std::max(seconds, o.seconds);  // shards run side by side
    stopped = stopped || o.stopped;
  }
};

struct Options {
  std::vector<int> ops = {0, 1, 2, 3};
  uint64_t cases = 1000, seed = 0;
  int jobs = 1, print = 10;
  bool cpu = false;
  std::string replay;
};

void usage() {
  std::fprintf(stderr,
               "usage: sparse_decode_fuzz [--ops dsv4,packed,hca,dsa] [--cases N] [--seed S] [--jobs J]\n"
               "                          [--backend gpu|cpu] [--print N]\n"
               "       sparse_decode_fuzz --replay OP:SEED [--backend gpu|cpu]\n"
               "       sparse_decode_fuzz --self-test | --host-metadata\n");
}

int op_index(const std::string& name) {
  for (int i = 0; i < kOpCount; ++i) {
    if (name == kOps[i].name) return i;
  }
  return -1;
}

std::unique_ptr<Device> make_device(bool cpu) {
  if (cpu) return std::make_unique<HostDevice>();
  return std::make_unique<CudaDevice>();
}

// Runs one case, printing its failures; returns whether the device faulted.
bool run_one(const Options& o, int op, uint64_t index, uint64_t seed, Device& device, Totals& t, int& printed) {
  std::string description;
  Outcome outcome;
  try {
    outcome = kOps[op].run(seed, device, &description);
  } catch (const std::exception& e) {
    outcome.fail(std::string("exception: ") + e.what());
  }
  ++t.cases;
  t.refused += outcome.refused;
  t.garbage += outcome.garbage;
  t.max_error = std::max(t.max_error, outcome.max_relative_error);
  t.max_above_floor = std::max(t.max_above_floor, outcome.max_above_floor);
  bool fault = false;
  const char* backend = o.cpu ? "cpu" : "gpu";
  if (!outcome.failures.empty()) {
    ++t.failed;
    for (const std::string& f : outcome.failures) fault = fault || f.rfind("the call failed on the device", 0) == 0 ||
                                                           f.rfind("exception: ", 0) == 0;
    if (printed++ < o.print) {
      std::printf("FAIL %s case %" PRIu64 " seed %" PRIu64 ": %s\n", kOps[op].name, index, seed,
                  outcome.failures[0].c_str());
      for (size_t i = 1; i < outcome.failures.size() && i < 6; ++i) std::printf("  also: %s\n", outcome.failures[i].c_str());
      std::printf("  case: %s\n  replay: sparse_decode_fuzz --backend %s --replay %s:%" PRIu64 "\n",
                  description.c_str(), backend, kOps[op].name, seed);
      std::fflush(stdout);
    }
  }
  if (!outcome.policy.empty()) {
    if (t.policy++ < 3) {
      std::printf("NAN-POLICY %s seed %" PRIu64 ": %s\n  case: %s\n", kOps[op].name, seed, outcome.policy[0].c_str(),
                  description.c_str());
      std::fflush(stdout);
    }
  }
  return fault;
}

// The cases of shard `shard` of `shards` (case i when i % shards == shard).
void run_shard(const Options& o, int shard, int shards, Totals (&totals)[kOpCount]) {
  std::unique_ptr<Device> device = make_device(o.cpu);
  for (int op : o.ops) {
    Totals& t = totals[op];
    int printed = 0;
    const auto start = std::chrono::steady_clock::now();
    for (uint64_t i = static_cast<uint64_t>(shard); i < o.cases && !t.stopped; i += static_cast<uint64_t>(shards)) {
      if (run_one(o, op, i, case_seed(o.seed, op, i), *device, t, printed)) {
        std::printf("STOP %s shard %d: the device faulted; its later cases are not run\n", kOps[op].name, shard);
        t.stopped = true;
      }
    }
    t.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    if (t.stopped) break;
  }
}

// Whether a CUDA device is present, asked in a child process so that this
// one forks its workers before touching CUDA.
bool probe_gpu(std::string* why) {
  int fds[2];
  if (pipe(fds) != 0) return false;
  const pid_t pid = fork();
  if (pid == 0) {
    close(fds[0]);
    std::string reason;
    const bool ok = cuda_available(&reason);
    if (!ok) (void)!write(fds[1], reason.data(), reason.size());
    _exit(ok ? 0 : 1);
  }
  close(fds[1]);
  char buffer[256];
  const ssize_t n = read(fds[0], buffer, sizeof(buffer));
  close(fds[0]);
  int status = 0;
  waitpid(pid, &status, 0);
  if (why && n > 0) why->assign(buffer, static_cast<size_t>(n));
  return WIFEXITED(status) && WEXITSTATUS(status) == 0;
}

int fuzz(const Options& o) {
  std::printf("sparse_decode_fuzz: base seed %" PRIu64 ", %" PRIu64 " cases an operation, %d jobs, %s backend\n",
              o.seed, o.cases, o.jobs, o.cpu ? "CPU" : "GPU");
  std::fflush(stdout);
  Totals totals[kOpCount];
  if (o.jobs <= 1) {
    run_shard(o, 0, 1, totals);
  } else {
    std::vector<std::pair<pid_t, int>> workers;
    for (int shard = 0; shard < o.jobs; ++shard) {
      int fds[2];
      if (pipe(fds) != 0) return 1;
      const pid_t pid = fork();
      if (pid == 0) {
        close(fds[0]);
        Totals mine[kOpCount];
        run_shard(o, shard, o.jobs, mine);
        std::fflush(stdout);  // _exit does not flush
        (void)!write(fds[1], mine, sizeof(mine));
        _exit(0);
      }
      close(fds[1]);
      workers.emplace_back(pid, fds[0]);
    }
    for (auto [pid, fd] : workers) {
      Totals theirs[kOpCount];
      const ssize_t n = read(fd, theirs, sizeof(theirs));
      close(fd);
      int status = 0;
      waitpid(pid, &status, 0);
      if (n != static_cast<ssize_t>(sizeof(theirs))) {
        std::printf("FAIL a worker died (status %d) before reporting\n", status);
        totals[0].failed += 1;
        continue;
      }
      for (int op = 0; op < kOpCount; ++op) totals[op].add(theirs[op]);
    }
  }
  uint64_t failed = 0;
  for (int op : o.ops) {
    const Totals& t = totals[op];
    failed += t.failed + (t.stopped ? 1 : 0);
    std::printf("fuzz %s: cases=%" PRIu64 " refused=%" PRIu64 " garbage=%" PRIu64 " failures=%" PRIu64
                " nan_policy=%" PRIu64 " max_row_error=%.3g above_bf16_floor=%.3g seconds=%.1f%s\n",
                kOps[op].name, t.cases, t.refused, t.garbage, t.failed, t.policy, t.max_error, t.max_above_floor, t.seconds,
                t.stopped ? " (stopped early)" : "");
  }
  std::printf("fuzz: %s (base seed %" PRIu64 ")\n", failed ? "FAIL" : "PASS", o.seed);
  return failed ? 1 : 0;
}

int replay(const Options& o) {
  const size_t colon = o.replay.find(':');
  const int op = colon == std::string::npos ? -1 : op_index(o.replay.substr(0, colon));
  if (op < 0) {
    usage();
    return 2;
  }
  const uint64_t seed = std::strtoull(o.replay.c_str() + colon + 1, nullptr, 10);
  std::unique_ptr<Device> device = make_device(o.cpu);
  std::string description;
  const Outcome outcome = kOps[op].run(seed, *device, &description);
  std::printf("%s seed %" PRIu64 ": %s\n", kOps[op].name, seed, description.c_str());
  for (const std::string& f : outcome.failures) std::printf("FAIL %s\n", f.c_str());
  for (const std::string& p : outcome.policy) std::printf("NAN-POLICY %s\n", p.c_str());
  std::printf("%s%s, max row error %.3g\n", outcome.failures.empty() ? "pass" : "fail",
              outcome.refused ? " (refused as expected)" : outcome.garbage ? " (garbage metadata: safety only)" : "",
              outcome.max_relative_error);
  return outcome.failures.empty() ? 0 : 1;
}

}  // namespace
}  // namespace sparse_decode::fuzz

int main(int argc, char** argv) {
  using namespace sparse_decode::fuzz;
  Options o;
  bool self = false, metadata = false, seeded = false;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) {
        usage();
        std::exit(2);
      }
      return argv[++i];
    };
    if (a == "--self-test") {
      self = true;
    } else if (a == "--host-metadata") {
      metadata = true;
    } else if (a == "--cases") {
      o.cases = std::strtoull(value().c_str(), nullptr, 10);
    } else if (a == "--seed") {
      o.seed = std::strtoull(value().c_str(), nullptr, 10), seeded = true;
    } else if (a == "--jobs") {
      o.jobs = std::atoi(value().c_str());
    } else if (a == "--print") {
      o.print = std::atoi(value().c_str());
    } else if (a == "--replay") {
      o.replay = value();
    } else if (a == "--backend") {
      const std::string b = value();
      if (b != "gpu" && b != "cpu") return usage(), 2;
      o.cpu = b == "cpu";
    } else if (a == "--ops") {
      o.ops.clear();
      std::string list = value();
      for (size_t start = 0; start <= list.size();) {
        const size_t end = std::min(list.find(',', start), list.size());
        const int op = op_index(list.substr(start, end - start));
        if (op < 0) return usage(), 2;
        o.ops.push_back(op);
        start = end + 1;
      }
    } else {
      usage();
      return 2;
    }
  }
  if (self) {
    const std::vector<std::string> failures = self_test();
    for (const std::string& f : failures) std::printf("FAIL %s\n", f.c_str());
    std::printf("self-test: %s\n", failures.empty() ? "PASS" : "FAIL");
    return failures.empty() ? 0 : 1;
  }
  std::string why;
  const bool gpu = !o.cpu && probe_gpu(&why);  // --backend cpu: no device call, not even the probe
  if (metadata) {
    const std::vector<std::string> problems = host_metadata_check(gpu);
    for (const std::string& p : problems) std::printf("HOST-METADATA %s\n", p.c_str());
    std::printf("host-metadata check (%s): %zu calls not refused as expected\n", gpu ? "CPU and GPU" : "CPU only",
                problems.size());
    return problems.empty() ? 0 : 3;
  }
  if (!o.cpu && !gpu) {
    std::printf("sparse_decode_fuzz: no CUDA device (%s): skipped (exit 77); --backend cpu runs the harness on the CPU backend\n",
                why.c_str());
    return 77;
  }
  if (!seeded) {
    if (const char* fixed = std::getenv("SPARSE_DECODE_TEST_SEED")) {
      o.seed = std::strtoull(fixed, nullptr, 10);
    } else {
      std::random_device device;
      o.seed = (uint64_t{device()} << 32) ^ device();
    }
  }
  if (!o.replay.empty()) return replay(o);
  return fuzz(o);
}
