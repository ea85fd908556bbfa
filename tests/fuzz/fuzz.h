// The metadata fuzzer's shared parts: random draws, the memory of a case
// (one byte image of guarded regions, mirrored on the device), output
// comparisons and the outcome of a case. Host-only: the CUDA calls live in
// device.cpp, so that the self-test runs without a GPU.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <random>
#include <string>
#include <utility>
#include <vector>

namespace sparse_decode::fuzz {

// ---------------------------------------------------------------------------
// Random draws.

class Rng {
 public:
  explicit Rng(uint64_t seed) : engine_(seed) {}
  // Uniform in [lo, hi] (inclusive).
  int64_t uniform(int64_t lo, int64_t hi) { return std::uniform_int_distribution<int64_t>(lo, hi)(engine_); }
  double real(double lo, double hi) { return std::uniform_real_distribution<double>(lo, hi)(engine_); }
  double normal() { return normal_(engine_); }
  bool chance(double p) { return real(0.0, 1.0) < p; }
  template <typename T>
  const T& pick(const std::vector<T>& values) {
    return values[static_cast<size_t>(uniform(0, static_cast<int64_t>(values.size()) - 1))];
  }
  std::mt19937_64& engine() { return engine_; }

 private:
  std::mt19937_64 engine_;
  std::normal_distribution<double> normal_{0.0, 1.0};
};

// The seed of case `index` of operation `op` in a run with base seed `base`
// (splitmix64 of the three: cases are independent and replayable one by one).
uint64_t case_seed(uint64_t base, int op, uint64_t index);

// An int32 metadata value that names a row of a pool (or a page, a block,
// a request) out of `count`: mostly a valid one, else an edge: -1, negative
// extremes, the count itself, one past it, INT32_MAX.
int32_t draw_row_index(Rng& rng, int64_t count, double edge_fraction);
// One of the adversarial int32 values around `pivot` and the type's ends.
int32_t draw_edge_int(Rng& rng, int64_t pivot);

// ---------------------------------------------------------------------------
// The memory of a case: one byte image, regions separated by guard bands.

enum class RegionKind {
  kInput,      // read by the call: must come back unchanged
  kOutput,     // written where `writable` says, unchanged elsewhere (stride gaps)
  kWorkspace,  // scratch of the call: not compared, not copied
};

struct Region {
  std::string name;
  size_t offset = 0;
  size_t bytes = 0;
  RegionKind kind = RegionKind::kInput;
  std::vector<uint8_t> writable;  // outputs: 1 for the bytes the call may write
};

struct Violation {
  std::string region;  // the region (or "guard before <region>") that changed
  size_t offset = 0;   // byte offset inside it
  uint8_t before = 0, after = 0;
};

class Arena {
 public:
  static constexpr size_t kGuardBytes = 256;  // poison before and after every region
  static constexpr uint8_t kGuardByte = 0xA5;
  static constexpr size_t kAlignment = 256;   // every region starts 256-byte aligned

  // Adds a region after the previous one and a guard band; returns its index.
  // Outputs start filled with `fill` (the output poison), inputs with zeros.
  size_t add(const std::string& name, size_t bytes, RegionKind kind, uint8_t fill = 0);
  const Region& region(size_t index) const { return regions_[index]; }
  size_t regions() const { return regions_.size(); }
  // Marks bytes [begin, begin + bytes) of output region `index` as written by the call.
  void allow(size_t index, size_t begin, size_t bytes);

  uint8_t* host(size_t index) { return image_.data() + regions_[index].offset; }
  template <typename T>
  T* host_as(size_t index) {
    return reinterpret_cast<T*>(host(index));
  }
  const std::vector<uint8_t>& image() const { return image_; }
  size_t size() const { return image_.size(); }
  // The byte ranges [begin, end) copied to and from the device and compared:
  // everything but the workspace (its guard bands included).
  std::vector<std::pair<size_t, size_t>> compared_ranges() const;

  // The bytes of `after` (an image of the same size) that differ from the
  // image outside the writable bytes of outputs (outside every output when
  // `outputs_writable` is false: a refused call writes nothing) and outside
  // the workspace; at most `limit` of them.
  std::vector<Violation> changed_outside_outputs(const std::vector<uint8_t>& after, bool outputs_writable = true,
                                                 size_t limit = 8) const;

 private:
  std::vector<Region> regions_;
  std::vector<uint8_t> image_;
};

// ---------------------------------------------------------------------------
// Comparisons with the fp64 reference.

inline constexpr double kMaxRelativeError = 3e-3;  // a row's relative L2 error (docs/spec.md, "Accuracy")
inline constexpr double kAboveFloor = 1.5e-3;       // allowed above a row's BF16 rounding floor
inline constexpr double kMaxLseError = 1e-3;       // |lse - ref| / max(1, |ref|)
// FP8 wgmma sums each pair of k-steps with reduced precision (docs/design.md):
// a score moves by up to about 2^-14 of the magnitude of its terms, and lse
// with it. FP8 calls get kFp8LseSlack times that magnitude, |bmm1| max_c
// sum_d |q_d k_cd|, on top of kMaxLseError's bound. The magnitude is the lse
// of the same call on |q|, |kv| and kMagnitudeSharpness |bmm1| without
// sinks, over kMagnitudeSharpness: at least the largest term, and above it
// by at most log(columns) / kMagnitudeSharpness.
inline constexpr double kFp8LseSlack = 0x1p-12;
inline constexpr float kMagnitudeSharpness = 1024.0f;
inline constexpr int32_t kCountStart = 7;          // the counter is added to, never reset

// How a row of the call compares with its reference row.
enum class RowVerdict {
  kMatch,
  kMismatch,        // a core failure: wrong values, NaN, or non-zero where the reference is exactly zero
  kPolicyMismatch,  // the reference row is not finite (NaN or infinite inputs) and the call's is finite
};
struct RowComparison {
  RowVerdict verdict = RowVerdict::kMatch;
  double relative_error = 0.0;
  double rounding_floor = 0.0;  // the relative error of the reference row rounded to BF16
  bool flushed = false;         // past the bound, accepted as flushed to zero (kFlushToZeroRms)
  std::string detail;
};

// The bound on a row's relative L2 error: kMaxRelativeError, or more where
// the row's own BF16 rounding floor leaves less than kAboveFloor under it
// (a row of few distinct mantissas, e.g. FP8 rows times one scale, rounds
// with correlated errors up to 2^-8: an exactly rounded output would fail 3e-3).
inline double row_error_bound(double rounding_floor) {
  return rounding_floor + kAboveFloor > kMaxRelativeError ? rounding_floor + kAboveFloor : kMaxRelativeError;
}

// The kernels compute in float with subnormals flushed to zero (ex2.approx.ftz
// and FTZ arithmetic): where a head's softmax factor falls below float's
// smallest normal (2^-126), as when a sink outweighs every score by ~87 or
// more, its row comes out as zeros, though the reference row is that factor
// times the values: up to 448 x 2^-126 ~ 2^-117.2 with FP8 values (the
// packed rows' kernels apply the factor before the values' scale). A row
// error whose RMS is below this absolute level is that flush, not a wrong
// result (docs/spec.md, accuracy).
inline constexpr double kFlushToZeroRms = 0x1p-116;

// One output row of n BF16 values against its fp64 reference: a finite
// reference row must match within row_error_bound (exactly ±0 where it is
// all zero, and finite); a row with a non-finite reference value must be
// non-finite at each such element (the NaN policy: NaN and infinite inputs
// give non-finite outputs where the fp64 reference does, never a finite guess).
RowComparison compare_row(const double* expected, const uint16_t* got, int n);
// An lse value: -inf exactly where the reference is; finite within
// kMaxLseError plus `slack` (absolute).
RowComparison compare_lse(double expected, float got, double slack = 0.0);

// ---------------------------------------------------------------------------
// Outcomes.

struct Outcome {
  std::vector<std::string> failures;  // core: wrong output, a write outside the outputs, a wrong counter, a bad refusal
  std::vector<std::string> policy;    // the NaN policy on non-finite inputs (reported apart)
  bool refused = false;               // the call was refused before launch, as the case expected
  bool garbage = false;               // metadata outside the contract's domain: only memory safety is checked
  double max_relative_error = 0.0;  // over the rows compared
  double max_above_floor = 0.0;     // the same less each row's BF16 rounding floor
  // Rows that BF16 itself rounds by more than 1 % (values in its subnormal
  // range) or that were flushed to zero say nothing of the kernels' accuracy:
  // they are left out of the maxima.
  void note(const RowComparison& c) {
    if (c.rounding_floor > 1e-2 || c.flushed) return;
    if (c.relative_error > max_relative_error && c.relative_error < 1e300) max_relative_error = c.relative_error;
    if (c.relative_error - c.rounding_floor > max_above_floor && c.relative_error < 1e300) {
      max_above_floor = c.relative_error - c.rounding_floor;
    }
  }
  void fail(const std::string& what) { failures.push_back(what); }
};

// Where a case's call runs: a mirror of the arena and the call's stream.
// The GPU (CudaDevice), or the CPU backend on a host mirror (HostDevice:
// the whole harness, checks included, without a GPU).
class Device {
 public:
  virtual ~Device() = default;
  virtual bool host_memory() const = 0;  // the calls take MemorySpace::kHost
  // Makes room for an arena of `bytes`; base() is then its device address.
  virtual void reserve(size_t bytes) = 0;
  virtual uint8_t* base() = 0;
  // Copies the image's compared bytes to the device (and poisons the workspace).
  virtual void upload(const Arena& arena) = 0;
  // Waits for the stream, reports a kernel fault (empty string if none), and
  // copies the compared bytes back into `after` (sized like the image).
  virtual std::string download(const Arena& arena, std::vector<uint8_t>& after) = 0;
  virtual void* stream() = 0;
};

// Checks the arena after a call: nothing outside the outputs' elements
// changed (nothing at all after a refusal: `outputs_writable` false).
void check_untouched(const Arena& arena, const std::vector<uint8_t>& after, Outcome& outcome,
                     bool outputs_writable = true);

// The four operations. A case draws its shape, metadata and data from
// `seed`, runs the call on the device (and, every eighth case, the CPU
// backend on a copy of the image) and checks it against the fp64 reference.
using CaseRunner = std::function<Outcome(uint64_t seed, Device& device, std::string* description)>;
Outcome run_dsv4_case(uint64_t seed, Device& device, std::string* description);
Outcome run_packed_case(uint64_t seed, Device& device, std::string* description);
Outcome run_hca_case(uint64_t seed, Device& device, std::string* description);
Outcome run_dsa_case(uint64_t seed, Device& device, std::string* description);

// The separate check of host-visible inconsistent metadata (a decreasing
// cum_seq_lens_q, offsets past the tokens, a request count that disagrees
// with the tokens): each such call refused with a message naming the
// argument, on the CPU backend and, where the host can see it, the device
// one. Returns the calls that were accepted or refused without naming it.
std::vector<std::string> host_metadata_check(bool with_device);

// The self-test of the host-side checking logic (guard bands, writable
// bytes, row comparisons, the expected counters): no GPU. Returns failures.
std::vector<std::string> self_test();

// Host-side expected out-of-range counts, written from docs/spec.md apart
// from the reference (the self-test and the cases compare both).
struct Dsv4CountInput {
  int64_t tokens = 0;
  int32_t width = 0;
  const int32_t* indices = nullptr;
  int64_t indices_stride = 0;
  const int32_t* lens = nullptr;
  int64_t swa_rows = 0, compressed_rows = 0;
  const int32_t* seq_lens = nullptr;
  int32_t num_requests = 0;
  const int32_t* cum_seq_lens_q = nullptr;
  int32_t q_len = 0;
};
int64_t expected_dsv4_count(const Dsv4CountInput& in);
// The KV position of a token (its window is min(128, position + 1)); -1
// when no request holds it (first request b with cum[b] <= t < cum[b + 1]).
int64_t token_position(int64_t token, const int32_t* seq_lens, int32_t num_requests, const int32_t* cum_seq_lens_q,
                       int32_t q_len);

}  // namespace sparse_decode::fuzz
