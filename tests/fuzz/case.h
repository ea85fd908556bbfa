// The frame every operation's case runs in: what the call is expected to
// do, the device run with its refusal rules, the CPU backend run on a copy,
// and the output checks shared by the three dsv4-shaped operations.
#pragma once

#include <cstdint>
#include <functional>
#include <initializer_list>
#include <string>
#include <vector>

#include "fuzz/data.h"
#include "fuzz/fuzz.h"
#include "reference/dsv4_reference.h"
#include "sparse_decode/status.h"

namespace sparse_decode::fuzz {

// What the drawn arguments call for.
struct Expectation {
  std::string invalid;       // non-empty: refused with InvalidArgument, the message naming this argument
  bool unsupported = false;  // refused with NotSupported is right too
  bool garbage = false;      // metadata outside the documented domain: memory safety only
  // Metadata that the host reads in host memory only (cum_seq_lens_q):
  // non-empty, a host-memory call is refused naming this argument (or
  // `invalid`); device memory is not read on the host, the case stands.
  std::string host_invalid;
};

// A fake 256-byte aligned base for laying out arguments before the device
// memory exists (workspace_size looks at their shape and alignment only).
inline uint8_t* layout_base() { return reinterpret_cast<uint8_t*>(uintptr_t{1} << 40); }

// Runs `call` (device memory) on the arena's device mirror and applies the
// refusal rules. Returns true when the call ran; `after` then holds the
// downloaded image. A refusal, right or wrong, also checks that nothing was written.
bool run_device_call(const Arena& arena, Device& device, const Expectation& expect,
                     const std::function<Status()>& call, std::vector<uint8_t>& after, Outcome& outcome);

// Runs `call` (host memory, over `copy`, a copy of the image) and checks
// that it refuses what the device call refuses and writes nothing outside
// the outputs: the CPU backend on the same metadata.
void run_host_call(const Arena& arena, const Expectation& expect, const std::function<Status(uint8_t*)>& call,
                   Outcome& outcome);

// The call of one case: `make(base, memory)` builds the operation's
// arguments over an image at `base`, `decode(args, workspace, bytes,
// stream)` calls it. Runs it on the device mirror with the arena's
// workspace region (run_device_call), and on every 8th seed the CPU backend
// on a host copy too (run_host_call). Returns whether the device call ran;
// `after` then holds the downloaded image.
template <class Make, class Decode>
bool run_case_call(const Arena& arena, Device& device, const Expectation& expect, uint64_t seed,
                   size_t workspace_region, size_t workspace_bytes, const Make& make, const Decode& decode,
                   std::vector<uint8_t>& after, Outcome& outcome) {
  device.reserve(arena.size());
  const MemorySpace memory = device.host_memory() ? MemorySpace::kHost : MemorySpace::kDevice;
  const auto args = make(device.base(), memory);
  void* workspace = at<uint8_t>(arena, device.base(), workspace_region);
  const bool ran = run_device_call(arena, device, expect, [&] {
    return decode(args, workspace, workspace_bytes, static_cast<CUstream_st*>(device.stream()));
  }, after, outcome);
  if (seed % 8 == 0 && !device.host_memory()) {
    run_host_call(arena, expect, [&](uint8_t* copy) {
      return decode(make(copy, MemorySpace::kHost), nullptr, 0, nullptr);
    }, outcome);
  }
  return ran;
}

// Where a dsv4-shaped call's outputs sit in the arena.
struct Dsv4Outputs {
  size_t out = 0, lse = 0, count = 0;  // region indices (lse, count: SIZE_MAX when absent)
  int64_t out_token_stride = 0, out_head_stride = 0, lse_token_stride = 0;
};
inline constexpr size_t kAbsent = static_cast<size_t>(-1);

// Adds out [T, H, 512] BF16 (poisoned, strides with gaps), lse [T, H] and
// the counter (kCountStart) to the arena, the elements marked writable.
Dsv4Outputs add_dsv4_outputs(Arena& arena, Rng& rng, int64_t tokens, int heads, bool with_lse, bool with_count);

// Compares out, lse and the counter of `after` with the reference result
// (the counter: kCountStart + expected_count, which must equal the
// reference's own count). An lse outside kMaxLseError's bound is compared
// again with fp8_lse_slack of its row of `sharpened_lse()` added, where
// given: FP8 calls pass the lse of the same call on |q|, |kv| and
// kMagnitudeSharpness |bmm1| without sinks (computed once, at the first such
// lse; row = t * heads + h).
void check_dsv4_outputs(const Arena& arena, const std::vector<uint8_t>& after, const Dsv4Outputs& o,
                        const reference::Dsv4Result& ref, int64_t tokens, int heads, int64_t expected_count,
                        Outcome& outcome, const std::function<std::vector<double>()>& sharpened_lse = {});

// The arena's image with the sign bit of every byte of `regions` cleared:
// |x| of every E4M3 element (NaN stays NaN). Absent regions are skipped.
std::vector<uint8_t> e4m3_magnitudes(const Arena& arena, std::initializer_list<size_t> regions);

// kFp8LseSlack times a row's magnitude from its sharpened lse (the lse of
// the call with kMagnitudeSharpness |bmm1|); 0 where it is not finite.
double fp8_lse_slack(double sharpened_lse);

// Sinks and scales.
std::vector<float> draw_sinks(Rng& rng, int heads, bool adversarial);  // N(0, 1), with NaN / inf / huge entries
float draw_scale(Rng& rng, double typical, bool adversarial);          // typical * U(0.5, 2), or an edge value

}  // namespace sparse_decode::fuzz
