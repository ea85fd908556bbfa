// The self-test of the fuzzer's host-side checks, without a GPU: a check
// that cannot fail would let every case pass, so each one is shown here to
// fail on a planted fault and to pass on the right data.
#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "fuzz/case.h"
#include "fuzz/data.h"
#include "fuzz/fuzz.h"
#include "reference/dsv4_reference.h"
#include "reference/formats.h"

namespace sparse_decode::fuzz {
namespace {

class Checks {
 public:
  void expect(bool condition, const std::string& what) {
    if (!condition) failures_.push_back(what);
  }
  std::vector<std::string> take() { return std::move(failures_); }

 private:
  std::vector<std::string> failures_;
};

void guard_bands(Checks& c) {
  Arena arena;
  const size_t in = arena.add("indices", 64, RegionKind::kInput);
  const size_t out = arena.add("out", 64, RegionKind::kOutput, 0xFF);
  arena.allow(out, 16, 16);  // an element; bytes 0..15 and 32..63 are a stride gap
  const size_t ws = arena.add("workspace", 64, RegionKind::kWorkspace);
  const Region& ri = arena.region(in);
  const Region& ro = arena.region(out);
  const Region& rw = arena.region(ws);
  c.expect(ri.offset % Arena::kAlignment == 0 && ro.offset % Arena::kAlignment == 0, "regions 256-byte aligned");
  c.expect(ro.offset >= ri.offset + ri.bytes + Arena::kGuardBytes, "a guard band between regions");
  const auto ranges = arena.compared_ranges();
  c.expect(ranges.size() == 2 && ranges[0].second == rw.offset && ranges[1].first == rw.offset + rw.bytes,
           "the workspace is not compared, its guard bands are");

  auto violations = [&](size_t byte, bool writable = true) {
    std::vector<uint8_t> after = arena.image();
    after[byte] ^= 0x5A;
    return arena.changed_outside_outputs(after, writable);
  };
  c.expect(arena.changed_outside_outputs(arena.image()).empty(), "an untouched image has no violation");
  c.expect(violations(ro.offset + 20).empty(), "a write into an element is allowed");
  auto v = violations(ro.offset + 20, false);
  c.expect(v.size() == 1 && v[0].region == "out", "a refused call may not write an element");
  v = violations(ro.offset + 3);
  c.expect(v.size() == 1 && v[0].region == "out" && v[0].offset == 3, "a write into a stride gap is caught");
  v = violations(ro.offset - 1);
  c.expect(v.size() == 1 && v[0].region == "guard before out", "a write just before out is caught");
  v = violations(ro.offset + ro.bytes);
  c.expect(v.size() == 1 && v[0].region == "guard before workspace", "a write just after out is caught");
  v = violations(ri.offset + 7);
  c.expect(v.size() == 1 && v[0].region == "indices", "a write into an input is caught");
  c.expect(violations(rw.offset + 5).empty(), "the workspace is scratch");
  v = violations(rw.offset + rw.bytes + 3);
  c.expect(v.size() == 1 && v[0].region == "guard after the last region", "a write past the workspace is caught");
  v = violations(0);
  c.expect(v.size() == 1 && v[0].region == "guard before indices", "the leading guard is checked");
}

std::vector<uint16_t> bf16(const std::vector<double>& values) {
  std::vector<uint16_t> bits;
  for (double v : values) bits.push_back(reference::encode_bf16(v));
  return bits;
}

void comparisons(Checks& c) {
  const double nan = std::nan(""), inf = std::numeric_limits<double>::infinity();
  std::vector<double> ref(512);
  for (int i = 0; i < 512; ++i) ref[i] = std::sin(0.1 * i + 1.0);
  c.expect(compare_row(ref.data(), bf16(ref).data(), 512).verdict == RowVerdict::kMatch, "BF16 rounding matches");
  std::vector<double> off = ref;
  for (double& v : off) v *= 1.01;
  c.expect(compare_row(ref.data(), bf16(off).data(), 512).verdict == RowVerdict::kMismatch, "1% off fails");
  std::vector<double> one_nan = ref;
  one_nan[100] = nan;
  c.expect(compare_row(ref.data(), bf16(one_nan).data(), 512).verdict == RowVerdict::kMismatch, "a NaN fails");
  const std::vector<double> zeros(512, 0.0);
  std::vector<double> negative_zeros(512, -0.0);
  c.expect(compare_row(zeros.data(), bf16(negative_zeros).data(), 512).verdict == RowVerdict::kMatch, "-0 is zero");
  std::vector<double> tiny = zeros;
  tiny[7] = 1e-30;
  c.expect(compare_row(zeros.data(), bf16(tiny).data(), 512).verdict == RowVerdict::kMismatch,
           "non-zero where nothing is active fails");
  const std::vector<uint16_t> poison(512, 0xFFFF);
  c.expect(compare_row(ref.data(), poison.data(), 512).verdict == RowVerdict::kMismatch, "poison fails");
  std::vector<double> nan_ref = ref;
  nan_ref[3] = nan;
  c.expect(compare_row(nan_ref.data(), poison.data(), 512).verdict == RowVerdict::kMatch, "NaN where the reference is");
  c.expect(compare_row(nan_ref.data(), bf16(ref).data(), 512).verdict == RowVerdict::kPolicyMismatch,
           "a finite value where the reference is NaN is a policy mismatch");

  // Correlated rounding: every element just past a rounding midpoint's
  // reach (mantissa 1 + 0.999 * 2^-8) rounds down by ~2^-8: the exactly
  // rounded row is 3.9e-3 off and must pass; 1.5e-3 more must not.
  std::vector<double> coarse(512);
  for (int i = 0; i < 512; ++i) coarse[i] = (1.0 + 0.999 * std::ldexp(1.0, -8)) * std::ldexp(1.0, i % 5 - 2);
  const RowComparison rounded = compare_row(coarse.data(), bf16(coarse).data(), 512);
  c.expect(rounded.verdict == RowVerdict::kMatch && rounded.rounding_floor > 3.8e-3,
           "an exactly rounded row passes above 3e-3");
  std::vector<double> worse = coarse;
  for (int i = 0; i < 512; i += 2) worse[i] *= 1.0 - 4 * std::ldexp(1.0, -8);
  c.expect(compare_row(coarse.data(), bf16(worse).data(), 512).verdict == RowVerdict::kMismatch,
           "the floor is not a blank cheque");

  c.expect(compare_lse(-inf, -std::numeric_limits<float>::infinity()).verdict == RowVerdict::kMatch, "lse -inf");
  c.expect(compare_lse(-inf, 0.0f).verdict == RowVerdict::kMismatch, "lse must be -inf with no column");
  c.expect(compare_lse(10.0, 10.005f).verdict == RowVerdict::kMatch, "lse within 1e-3");
  c.expect(compare_lse(10.0, 10.02f).verdict == RowVerdict::kMismatch, "lse off by 2e-3");
  c.expect(compare_lse(1.0, std::nanf("")).verdict == RowVerdict::kMismatch, "lse NaN fails");
  // FP8 scores: 2^-12 of the terms' magnitude on top; a magnitude of 64 (a
  // sharpened lse of 64 x 1024) allows 0.0156 more, one not finite nothing.
  const double sharpened = 64.0 * kMagnitudeSharpness;
  c.expect(compare_lse(1.0, 1.012f, fp8_lse_slack(sharpened)).verdict == RowVerdict::kMatch, "lse within the FP8 slack");
  c.expect(compare_lse(1.0, 1.03f, fp8_lse_slack(sharpened)).verdict == RowVerdict::kMismatch, "lse past the FP8 slack");
  c.expect(fp8_lse_slack(std::nan("")) == 0.0 && fp8_lse_slack(-inf) == 0.0, "no slack from a non-finite magnitude");
  Arena arena;
  const size_t signs = arena.add("signs", 4, RegionKind::kInput);
  const uint8_t bytes[4] = {0x80, 0xB8, 0x38, 0xFF};  // -0, -1, 1, NaN
  std::memcpy(arena.host(signs), bytes, 4);
  const std::vector<uint8_t> abs_image = e4m3_magnitudes(arena, {signs, kAbsent});
  const uint8_t* a = abs_image.data() + arena.region(signs).offset;
  c.expect(a[0] == 0x00 && a[1] == 0x38 && a[2] == 0x38 && a[3] == 0x7F, "E4M3 magnitudes clear the sign bits");
}

// A hand-counted table: the pool's row count exactly, INT32_MAX, INT32_MIN,
// -1, lens cutting a column off, and windows from varlen seq_lens.
void counters(Checks& c) {
  constexpr int32_t kMax = std::numeric_limits<int32_t>::max(), kMin = std::numeric_limits<int32_t>::min();
  constexpr int32_t W = 132;
  std::vector<int32_t> indices(3 * W, -1);
  auto set = [&](int t, int col, int32_t v) { indices[static_cast<size_t>(t * W + col)] = v; };
  // swa: 10 rows, compressed: 5 rows.
  set(0, 0, 10), set(0, 1, kMax), set(0, 2, kMin), set(0, 3, 9), set(0, 128, 5), set(0, 129, kMin), set(0, 131, 4);
  set(1, 0, 11), set(1, 1, 12), set(1, 128, 6);
  set(2, 0, 3), set(2, 1, 10), set(2, 2, 10), set(2, 130, kMax);
  Dsv4CountInput in;
  in.tokens = 3;
  in.width = W;
  in.indices = indices.data();
  in.indices_stride = W;
  in.swa_rows = 10;
  in.compressed_rows = 5;
  c.expect(expected_dsv4_count(in) == 9, "count without lens: 3 columns past their pools in each token");
  const std::vector<int32_t> lens = {132, 1, kMax};
  in.lens = lens.data();
  c.expect(expected_dsv4_count(in) == 7, "lens = 1 leaves token 1 one counted column");
  // Requests {0}, {1, 2}: positions 0, 0, 1 -> windows 1, 1, 2.
  const std::vector<int32_t> seq_lens = {1, 2}, cum = {0, 1, 3};
  in.seq_lens = seq_lens.data();
  in.num_requests = 2;
  in.cum_seq_lens_q = cum.data();
  c.expect(expected_dsv4_count(in) == 5, "windows mask swa columns 1.. of token 0 and 2.. of token 2");
  c.expect(token_position(0, seq_lens.data(), 2, cum.data(), 0) == 0, "position of token 0");
  c.expect(token_position(2, seq_lens.data(), 2, cum.data(), 0) == 1, "position of token 2");
  const std::vector<int32_t> short_cum = {0, 1, 2};
  c.expect(token_position(2, seq_lens.data(), 2, short_cum.data(), 0) == -1, "a token no request holds");

  // The reference counts the same (pools of FP8 zeros; outputs unused).
  std::vector<uint8_t> swa(10 * 512), compressed(5 * 512), q(3 * 8 * 512);
  Dsv4DecodeArgs a;
  a.memory = MemorySpace::kHost;
  a.num_tokens = 3;
  a.num_heads = 8;
  a.q = q.data();
  a.q_token_stride = 8 * 512;
  a.swa_kv = {swa.data(), 10, 1, 512, 512};
  a.compressed_kv = {compressed.data(), 5, 1, 512, 512};
  a.indices = indices.data();
  a.width = W;
  a.indices_stride = W;
  a.lens = lens.data();
  a.seq_lens = seq_lens.data();
  a.num_requests = 2;
  a.cum_seq_lens_q = cum.data();
  a.max_q_len = 2;
  c.expect(reference::dsv4_decode(a).out_of_range == expected_dsv4_count(in), "the reference agrees on the count");
}

// The nearest of the 127 finite magnitudes by a scan, ties to the even
// code, saturating at 448: the definition reference::encode_e4m3 computes
// by binary search.
uint8_t e4m3_by_scan(double value) {
  if (std::isnan(value)) return 0x7F;
  const double magnitude = std::fabs(value);
  uint8_t best = 0;
  for (uint8_t code = 1; code <= 0x7E; ++code) {
    const double d_code = std::fabs(reference::decode_e4m3(code) - magnitude);
    const double d_best = std::fabs(reference::decode_e4m3(best) - magnitude);
    if (d_code < d_best || (d_code == d_best && (code & 1) == 0)) best = code;
  }
  return static_cast<uint8_t>((std::signbit(value) ? 0x80 : 0x00) | best);
}

void encoders(Checks& c) {
  Rng rng(5);
  bool same = true;
  for (int i = 0; i < 20000 && same; ++i) {
    // Every code, nudged both ways and at the midpoints to its neighbour; then random values of every scale.
    const double x = i < 768 ? reference::decode_e4m3(static_cast<uint8_t>(i / 3)) * (1 + 1e-9 * (i % 3 - 1))
                     : i < 1024 ? 0.5 * (reference::decode_e4m3(static_cast<uint8_t>(i - 768)) +
                                         reference::decode_e4m3(static_cast<uint8_t>(i - 767)))
                                : rng.normal() * std::ldexp(1.0, static_cast<int>(rng.uniform(-12, 10)));
    same = reference::encode_e4m3(x) == e4m3_by_scan(x);
  }
  c.expect(same, "the E4M3 encoder is the nearest by scan, ties to even");
}

void seeds(Checks& c) {
  c.expect(case_seed(1, 0, 5) == case_seed(1, 0, 5), "case seeds replay");
  c.expect(case_seed(1, 0, 5) != case_seed(1, 0, 6) && case_seed(1, 0, 5) != case_seed(1, 1, 5) &&
               case_seed(1, 0, 5) != case_seed(2, 0, 5),
           "case seeds differ by case, operation and run");
  Rng rng(3);
  bool saw_count = false, saw_min = false, saw_valid = false;
  for (int i = 0; i < 2000; ++i) {
    const int32_t v = draw_row_index(rng, 77, 0.5);
    saw_count |= v == 77, saw_min |= v == std::numeric_limits<int32_t>::min(), saw_valid |= v >= 0 && v < 77;
  }
  c.expect(saw_count && saw_min && saw_valid, "row draws reach the row count exactly, INT32_MIN and valid rows");
}

}  // namespace

std::vector<std::string> self_test() {
  Checks c;
  guard_bands(c);
  comparisons(c);
  counters(c);
  seeds(c);
  encoders(c);
  return c.take();
}

}  // namespace sparse_decode::fuzz
