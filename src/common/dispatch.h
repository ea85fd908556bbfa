// The one host idiom that maps a run-time value to a template instance:
// with_bound<4, 8, 16, 32>(n, f) calls f(std::integral_constant<int, B>{})
// with the least bound B >= n (the last bound when n exceeds them all), and
// returns what f returns. Kernels whose loops unroll over a count are
// instantiated at a few bounds; the launcher picks one this way.
#pragma once

#include <type_traits>
#include <utility>

namespace sparse_decode {

template <int kBound, int... kMore, class F>
decltype(auto) with_bound(int n, F&& f) {
  if constexpr (sizeof...(kMore) == 0) {
    return f(std::integral_constant<int, kBound>{});
  } else {
    if (n <= kBound) return f(std::integral_constant<int, kBound>{});
    return with_bound<kMore...>(n, std::forward<F>(f));
  }
}

// f(std::integral_constant<int, V>{}) for the V of kValues equal to n
// (the last value when none is): for a choice among exact instances.
template <int kValue, int... kMore, class F>
decltype(auto) with_value(int n, F&& f) {
  if constexpr (sizeof...(kMore) == 0) {
    return f(std::integral_constant<int, kValue>{});
  } else {
    if (n == kValue) return f(std::integral_constant<int, kValue>{});
    return with_value<kMore...>(n, std::forward<F>(f));
  }
}

}  // namespace sparse_decode
