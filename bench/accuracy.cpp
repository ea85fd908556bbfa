#include "bench/accuracy.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "reference/formats.h"

namespace sparse_decode::bench {

std::string OutputComparison::summary(double bound) const {
  char text[160];
  std::snprintf(text, sizeof(text), "relative L2 error %.3e (bound %.0e), %lld non-finite of %lld: %s", relative_l2,
                bound, static_cast<long long>(nonfinite), static_cast<long long>(values),
                passes(bound) ? "PASS" : "FAIL");
  return text;
}

OutputComparison compare_bf16(const uint16_t* out, const std::vector<double>& reference) {
  OutputComparison result;
  result.values = static_cast<int64_t>(reference.size());
  double error_sq = 0.0, reference_sq = 0.0;
  for (size_t i = 0; i < reference.size(); ++i) {
    const double value = reference::decode_bf16(out[i]);
    if (!std::isfinite(value)) {
      ++result.nonfinite;
      continue;
    }
    error_sq += (value - reference[i]) * (value - reference[i]);
    reference_sq += reference[i] * reference[i];
  }
  result.reference_norm = std::sqrt(reference_sq);
  const double error = std::sqrt(error_sq);
  result.relative_l2 = reference_sq > 0.0 ? error / result.reference_norm : error;
  return result;
}

OutputHealth inspect_bf16(const uint16_t* out, int64_t count) {
  OutputHealth health;
  for (int64_t i = 0; i < count; ++i) {
    const uint16_t magnitude = out[i] & 0x7FFFu;
    if (magnitude >= 0x7F80u) ++health.nonfinite;  // all-ones exponent: inf or NaN
    if (magnitude != 0) health.any_nonzero = true;
  }
  return health;
}

double median(std::vector<double> samples) {
  if (samples.empty()) return 0.0;
  std::sort(samples.begin(), samples.end());
  const size_t mid = samples.size() / 2;
  return samples.size() % 2 ? samples[mid] : 0.5 * (samples[mid - 1] + samples[mid]);
}

}  // namespace sparse_decode::bench
