// Comparing a BF16 output with the fp64 reference (SPEC.md: relative L2
// error |out - ref| / |ref| <= 3e-3, no NaN), shared by `demo` and `bench`.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace sparse_decode::bench {

inline constexpr double kRelativeL2Bound = 3e-3;

struct OutputComparison {
  int64_t values = 0;        // elements compared
  int64_t nonfinite = 0;     // NaN or infinite elements of the output
  double relative_l2 = 0.0;  // |out - ref| / |ref| (|out - ref| when ref is all zero)
  double reference_norm = 0.0;

  bool passes(double bound = kRelativeL2Bound) const { return nonfinite == 0 && relative_l2 <= bound; }
  std::string summary(double bound = kRelativeL2Bound) const;  // "relative L2 error 1.2e-03 (bound 3e-03): PASS"
};

// `out` holds `reference.size()` BF16 values in the reference's layout.
OutputComparison compare_bf16(const uint16_t* out, const std::vector<double>& reference);

// Non-finite elements and whether any element is non-zero, of `count` BF16 values.
struct OutputHealth {
  int64_t nonfinite = 0;
  bool any_nonzero = false;
};
OutputHealth inspect_bf16(const uint16_t* out, int64_t count);

// Median of `samples` (mean of the two middle ones for an even count); 0 when empty.
double median(std::vector<double> samples);

}  // namespace sparse_decode::bench
