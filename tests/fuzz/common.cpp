#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>

#include "fuzz/fuzz.h"
#include "reference/formats.h"

namespace sparse_decode::fuzz {
namespace {

uint64_t splitmix64(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

std::string format(const char* fmt, double a, double b = 0.0) {
  char text[160];
  std::snprintf(text, sizeof(text), fmt, a, b);
  return text;
}

}  // namespace

uint64_t case_seed(uint64_t base, int op, uint64_t index) {
  return splitmix64(splitmix64(base ^ (uint64_t(op) << 56)) + index);
}

int32_t draw_edge_int(Rng& rng, int64_t pivot) {
  constexpr int64_t kMin = std::numeric_limits<int32_t>::min(), kMax = std::numeric_limits<int32_t>::max();
  const int64_t values[] = {kMin, kMin + 1, -2, -1, 0, 1, pivot - 1, pivot, pivot + 1, kMax - 1, kMax};
  const int64_t value = values[rng.uniform(0, std::size(values) - 1)];
  return static_cast<int32_t>(std::clamp(value, kMin, kMax));
}

int32_t draw_row_index(Rng& rng, int64_t count, double edge_fraction) {
  if (count > 0 && !rng.chance(edge_fraction)) return static_cast<int32_t>(rng.uniform(0, count - 1));
  return draw_edge_int(rng, count);
}

// ---------------------------------------------------------------------------

size_t Arena::add(const std::string& name, size_t bytes, RegionKind kind, uint8_t fill) {
  if (image_.empty()) image_.assign(kGuardBytes, kGuardByte);
  const size_t start = (image_.size() + kAlignment - 1) / kAlignment * kAlignment;
  image_.resize(start, kGuardByte);
  Region region;
  region.name = name;
  region.offset = start;
  region.bytes = bytes;
  region.kind = kind;
  if (kind == RegionKind::kOutput) region.writable.assign(bytes, 0);
  image_.resize(start + bytes, kind == RegionKind::kOutput ? fill : uint8_t{0});
  image_.resize(image_.size() + kGuardBytes, kGuardByte);
  regions_.push_back(std::move(region));
  return regions_.size() - 1;
}

void Arena::allow(size_t index, size_t begin, size_t bytes) {
  Region& r = regions_[index];
  std::fill(r.writable.begin() + static_cast<std::ptrdiff_t>(begin),
            r.writable.begin() + static_cast<std::ptrdiff_t>(begin + bytes), uint8_t{1});
}

std::vector<std::pair<size_t, size_t>> Arena::compared_ranges() const {
  std::vector<std::pair<size_t, size_t>> ranges;
  size_t begin = 0;
  for (const Region& r : regions_) {
    if (r.kind != RegionKind::kWorkspace) continue;
    ranges.emplace_back(begin, r.offset);
    begin = r.offset + r.bytes;
  }
  ranges.emplace_back(begin, image_.size());
  return ranges;
}

std::vector<Violation> Arena::changed_outside_outputs(const std::vector<uint8_t>& after, bool outputs_writable,
                                                      size_t limit) const {
  std::vector<Violation> found;
  const size_t end = image_.size();
  // Unchanged blocks are skipped whole (most of an image is inputs and guards).
  constexpr size_t kBlock = 4096;
  size_t next = 0;  // the next region to enter
  for (size_t i = 0; i < end && found.size() < limit; ++i) {
    if (i % kBlock == 0) {
      const size_t bytes = std::min(kBlock, end - i);
      if (std::memcmp(after.data() + i, image_.data() + i, bytes) == 0) {
        i += bytes - 1;
        continue;
      }
    }
    while (next < regions_.size() && regions_[next].offset + regions_[next].bytes <= i) ++next;
    const Region* inside =
        next < regions_.size() && i >= regions_[next].offset ? &regions_[next] : nullptr;
    if (after[i] == image_[i]) continue;
    if (outputs_writable && inside && inside->kind == RegionKind::kOutput && inside->writable[i - inside->offset]) {
      continue;
    }
    if (inside && inside->kind == RegionKind::kWorkspace) continue;
    Violation v;
    if (inside) {
      v.region = inside->name;
      v.offset = i - inside->offset;
    } else {
      v.region = next < regions_.size() ? "guard before " + regions_[next].name : "guard after the last region";
      v.offset = i;
    }
    v.before = image_[i];
    v.after = after[i];
    found.push_back(v);
  }
  return found;
}

void check_untouched(const Arena& arena, const std::vector<uint8_t>& after, Outcome& outcome,
                     bool outputs_writable) {
  for (const Violation& v : arena.changed_outside_outputs(after, outputs_writable)) {
    char text[200];
    std::snprintf(text, sizeof(text), "%s: %s, byte %zu: 0x%02x -> 0x%02x",
                  outputs_writable ? "written outside the outputs" : "written by a refused call", v.region.c_str(),
                  v.offset, v.before, v.after);
    outcome.fail(text);
  }
}

// ---------------------------------------------------------------------------

RowComparison compare_row(const double* expected, const uint16_t* got, int n) {
  RowComparison c;
  bool finite = true, zero = true;
  for (int i = 0; i < n; ++i) {
    finite = finite && std::isfinite(expected[i]);
    zero = zero && expected[i] == 0.0;
  }
  if (!finite) {
    for (int i = 0; i < n; ++i) {
      const double g = reference::decode_bf16(got[i]);
      if (!std::isfinite(expected[i]) && std::isfinite(g)) {
        c.verdict = RowVerdict::kPolicyMismatch;
        c.detail = format("element %.0f: reference %g", i, expected[i]) + format(", got %g (finite)", g);
        return c;
      }
    }
    return c;
  }
  double err2 = 0.0, ref2 = 0.0, floor2 = 0.0, got2 = 0.0;
  for (int i = 0; i < n; ++i) {
    const double g = reference::decode_bf16(got[i]);
    got2 += g * g;
    if (!std::isfinite(g) || (zero && g != 0.0)) {
      c.verdict = RowVerdict::kMismatch;
      c.relative_error = std::numeric_limits<double>::infinity();
      c.detail = format(zero ? "element %.0f: %g where the reference row is exactly zero"
                             : "element %.0f: %g, not finite",
                        i, g);
      return c;
    }
    const double rounded = reference::decode_bf16(reference::encode_bf16(expected[i]));
    err2 += (g - expected[i]) * (g - expected[i]);
    floor2 += (rounded - expected[i]) * (rounded - expected[i]);
    ref2 += expected[i] * expected[i];
  }
  if (zero) return c;
  c.relative_error = std::sqrt(err2 / ref2);
  c.rounding_floor = std::sqrt(floor2 / ref2);
  c.flushed = c.relative_error > row_error_bound(c.rounding_floor) && std::sqrt(err2 / n) <= kFlushToZeroRms;
  if (c.relative_error > row_error_bound(c.rounding_floor) && !c.flushed) {
    c.verdict = RowVerdict::kMismatch;
    c.detail = format("relative L2 error %.3g > bound %.3g", c.relative_error, row_error_bound(c.rounding_floor)) +
               format(" (BF16 rounding floor %.3g;", c.rounding_floor) +
               format(" rms: reference %.3g,", std::sqrt(ref2 / n)) + format(" got %.3g)", std::sqrt(got2 / n));
  }
  return c;
}

RowComparison compare_lse(double expected, float got, double slack) {
  RowComparison c;
  if (std::isnan(expected) || expected == std::numeric_limits<double>::infinity()) {
    if (std::isfinite(got)) {
      c.verdict = RowVerdict::kPolicyMismatch;
      c.detail = format("lse: reference %g, got %g (finite)", expected, got);
    }
    return c;
  }
  if (expected == -std::numeric_limits<double>::infinity()) {
    if (got != -std::numeric_limits<float>::infinity()) {
      c.verdict = RowVerdict::kMismatch;
      c.detail = format("lse: %g where the reference is -inf (no active column)", got);
    }
    return c;
  }
  const double error = std::fabs(double{got} - expected);
  if (!(error <= kMaxLseError * std::max(1.0, std::fabs(expected)) + slack)) {
    c.verdict = RowVerdict::kMismatch;
    c.detail = format("lse: %g against %g", got, expected);
  }
  return c;
}

// ---------------------------------------------------------------------------

int64_t token_position(int64_t token, const int32_t* seq_lens, int32_t num_requests, const int32_t* cum_seq_lens_q,
                       int32_t q_len) {
  if (cum_seq_lens_q) {
    for (int32_t b = 0; b < num_requests; ++b) {
      if (cum_seq_lens_q[b] <= token && token < cum_seq_lens_q[b + 1]) {
        return int64_t{seq_lens[b]} - (int64_t{cum_seq_lens_q[b + 1]} - cum_seq_lens_q[b]) +
               (token - cum_seq_lens_q[b]);
      }
    }
    return -1;
  }
  const int64_t b = token / q_len;
  if (b >= num_requests) return -1;
  return int64_t{seq_lens[b]} - q_len + token % q_len;
}

int64_t expected_dsv4_count(const Dsv4CountInput& in) {
  int64_t count = 0;
  for (int64_t t = 0; t < in.tokens; ++t) {
    const int64_t window =
        in.seq_lens ? std::clamp<int64_t>(
                          token_position(t, in.seq_lens, in.num_requests, in.cum_seq_lens_q, in.q_len) + 1, 0, 128)
                    : 128;
    for (int32_t c = 0; c < in.width; ++c) {
      const int32_t index = in.indices[t * in.indices_stride + c];
      const bool swa = c < 128;
      const bool listed = index >= 0 && (!in.lens || c < in.lens[t]) && (!swa || c < window);
      count += listed && index >= (swa ? in.swa_rows : in.compressed_rows);
    }
  }
  return count;
}

}  // namespace sparse_decode::fuzz
