#include "fuzz/case.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>

namespace sparse_decode::fuzz {
namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();

// The arguments a refusal may name: `invalid`, and in host memory `host_invalid`.
std::vector<std::string> refusable(const Expectation& expect, bool host_memory) {
  std::vector<std::string> names;
  if (!expect.invalid.empty()) names.push_back(expect.invalid);
  if (host_memory && !expect.host_invalid.empty()) names.push_back(expect.host_invalid);
  return names;
}

// Whether a refusal is the one the case expects.
bool expected_refusal(const Expectation& expect, bool host_memory, const Status& status) {
  const std::vector<std::string> names = refusable(expect, host_memory);
  if (names.empty()) return expect.unsupported && status.code() == StatusCode::kNotSupported;
  if (status.code() != StatusCode::kInvalidArgument) return false;
  for (const std::string& name : names) {
    if (status.message().find(name) != std::string::npos) return true;
  }
  return false;
}

std::string refusal_text(const Expectation& expect, bool host_memory, const Status& status, const char* backend) {
  std::string text = std::string(backend) + " refused: " + status.message();
  const std::vector<std::string> names = refusable(expect, host_memory);
  if (!names.empty()) text += " (expected InvalidArgument naming " + names.front() + ")";
  return text;
}

}  // namespace

bool run_device_call(const Arena& arena, Device& device, const Expectation& expect,
                     const std::function<Status()>& call, std::vector<uint8_t>& after, Outcome& outcome) {
  device.upload(arena);
  const Status status = call();
  const std::string fault = device.download(arena, after);
  if (!fault.empty()) {
    outcome.fail(fault);
    return false;
  }
  const bool host_memory = device.host_memory();
  if (!status.ok()) {
    if (expected_refusal(expect, host_memory, status)) {
      outcome.refused = true;
    } else {
      outcome.fail(refusal_text(expect, host_memory, status, "device call"));
    }
    check_untouched(arena, after, outcome, false);
    return false;
  }
  if (const std::vector<std::string> names = refusable(expect, host_memory); !names.empty()) {
    outcome.fail("device call accepted; expected a refusal naming " + names.front());
    return false;
  }
  check_untouched(arena, after, outcome);
  return true;
}

void run_host_call(const Arena& arena, const Expectation& expect, const std::function<Status(uint8_t*)>& call,
                   Outcome& outcome) {
  std::vector<uint8_t> copy = arena.image();
  const Status status = call(copy.data());
  if (!status.ok()) {
    // NotSupported is a device verdict; the CPU backend serves every valid call.
    if (refusable(expect, true).empty() || !expected_refusal(expect, true, status)) {
      outcome.fail(refusal_text(expect, true, status, "CPU backend"));
    }
    check_untouched(arena, copy, outcome, false);
    return;
  }
  if (const std::vector<std::string> names = refusable(expect, true); !names.empty()) {
    outcome.fail("CPU backend accepted; expected a refusal naming " + names.front());
  }
  check_untouched(arena, copy, outcome);
}

Dsv4Outputs add_dsv4_outputs(Arena& arena, Rng& rng, int64_t tokens, int heads, bool with_lse, bool with_count) {
  Dsv4Outputs o;
  // Gaps between heads and tokens (multiples of 8 elements: 16 bytes).
  o.out_head_stride = 512 + 8 * rng.uniform(0, 1) * rng.uniform(0, 4);
  o.out_token_stride = (heads - 1) * o.out_head_stride + 512 + 8 * rng.uniform(0, 1) * rng.uniform(0, 6);
  const size_t out_bytes = static_cast<size_t>(std::max<int64_t>(tokens, 1) * o.out_token_stride * 2);
  o.out = arena.add("out", out_bytes, RegionKind::kOutput, 0xFF);
  for (int64_t t = 0; t < tokens; ++t) {
    for (int h = 0; h < heads; ++h) arena.allow(o.out, static_cast<size_t>((t * o.out_token_stride + h * o.out_head_stride) * 2), 1024);
  }
  o.lse = kAbsent;
  if (with_lse) {
    o.lse_token_stride = heads + rng.uniform(0, 1) * rng.uniform(1, 5);
    o.lse = arena.add("lse", static_cast<size_t>(std::max<int64_t>(tokens, 1) * o.lse_token_stride * 4),
                      RegionKind::kOutput, 0xFF);
    for (int64_t t = 0; t < tokens; ++t) arena.allow(o.lse, static_cast<size_t>(t * o.lse_token_stride * 4), heads * 4u);
  }
  o.count = kAbsent;
  if (with_count) {
    o.count = arena.add("out_of_range_count", 4, RegionKind::kOutput);
    std::memcpy(arena.host(o.count), &kCountStart, 4);
    arena.allow(o.count, 0, 4);
  }
  return o;
}

void check_dsv4_outputs(const Arena& arena, const std::vector<uint8_t>& after, const Dsv4Outputs& o,
                        const reference::Dsv4Result& ref, int64_t tokens, int heads, int64_t expected_count,
                        Outcome& outcome, const std::function<std::vector<double>()>& sharpened_lse) {
  std::vector<double> sharpened;  // computed at the first lse outside kMaxLseError's bound
  const auto* out = reinterpret_cast<const uint16_t*>(after.data() + arena.region(o.out).offset);
  int reported = 0;
  for (int64_t t = 0; t < tokens; ++t) {
    for (int h = 0; h < heads; ++h) {
      const size_t row = static_cast<size_t>(t * heads + h);
      const RowComparison c = compare_row(&ref.out[row * 512], out + t * o.out_token_stride + h * o.out_head_stride, 512);
      outcome.note(c);
      if (c.verdict != RowVerdict::kMatch && reported++ < 4) {
        const std::string what = "out (token " + std::to_string(t) + ", head " + std::to_string(h) + "): " + c.detail;
        (c.verdict == RowVerdict::kMismatch ? outcome.failures : outcome.policy).push_back(what);
      }
      if (o.lse != kAbsent) {
        float got;
        std::memcpy(&got, after.data() + arena.region(o.lse).offset + (t * o.lse_token_stride + h) * 4, 4);
        RowComparison l = compare_lse(ref.lse[row], got);
        if (l.verdict == RowVerdict::kMismatch && sharpened_lse) {
          if (sharpened.empty()) sharpened = sharpened_lse();
          l = compare_lse(ref.lse[row], got, fp8_lse_slack(sharpened[row]));
        }
        if (l.verdict != RowVerdict::kMatch && reported++ < 4) {
          const std::string what = "token " + std::to_string(t) + ", head " + std::to_string(h) + ": " + l.detail;
          (l.verdict == RowVerdict::kMismatch ? outcome.failures : outcome.policy).push_back(what);
        }
      }
    }
  }
  if (o.count != kAbsent) {
    int32_t got;
    std::memcpy(&got, after.data() + arena.region(o.count).offset, 4);
    if (ref.out_of_range != expected_count) {
      outcome.fail("counting rule: the reference counts " + std::to_string(ref.out_of_range) +
                   " out-of-range columns, the fuzzer " + std::to_string(expected_count));
    }
    if (int64_t{got} != kCountStart + expected_count) {
      outcome.fail("out_of_range_count: " + std::to_string(got) + ", expected " + std::to_string(kCountStart) + " + " +
                   std::to_string(expected_count));
    }
  }
}

std::vector<uint8_t> e4m3_magnitudes(const Arena& arena, std::initializer_list<size_t> regions) {
  std::vector<uint8_t> image = arena.image();
  for (size_t index : regions) {
    if (index == kAbsent) continue;
    const Region& r = arena.region(index);
    for (size_t i = 0; i < r.bytes; ++i) image[r.offset + i] &= 0x7F;
  }
  return image;
}

double fp8_lse_slack(double sharpened_lse) {
  return std::isfinite(sharpened_lse) ? kFp8LseSlack * std::max(sharpened_lse / kMagnitudeSharpness, 0.0) : 0.0;
}

std::vector<float> draw_sinks(Rng& rng, int heads, bool adversarial) {
  std::vector<float> sinks(heads);
  for (float& s : sinks) {
    s = static_cast<float>(rng.normal());
    if (adversarial && rng.chance(0.25)) {
      const float edges[] = {std::nanf(""), kInf, -kInf, 1e30f, -1e30f, 0.0f, -0.0f};
      s = edges[rng.uniform(0, std::size(edges) - 1)];
    }
  }
  return sinks;
}

float draw_scale(Rng& rng, double typical, bool adversarial) {
  if (adversarial) {
    const float edges[] = {0.0f, -static_cast<float>(typical), kInf, -kInf, std::nanf(""),
                           static_cast<float>(typical * 1e-3)};
    return edges[rng.uniform(0, std::size(edges) - 1)];
  }
  return static_cast<float>(typical * rng.real(0.5, 2.0));
}

}  // namespace sparse_decode::fuzz
