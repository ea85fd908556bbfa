// Long CPU work in the demo, token slice by token slice, with an estimate
// before it and progress while it runs (stderr), so that a large demo on the
// CPU backend never sits silent.
#pragma once

#include <cstdint>
#include <functional>
#include <string>

namespace sparse_decode::cli {

// Runs `run(begin, end)` over tokens [0, total) in slices of `slice` tokens.
// When the first slice's time says the whole takes longer than a few
// seconds, prints the estimate (and how many tokens run in about a minute),
// then "done / total tokens" at most every few seconds. `what` names the work
// in those lines ("the CPU backend").
void run_token_slices(const std::string& what, int64_t total, int64_t slice,
                      const std::function<void(int64_t begin, int64_t end)>& run);

// "850 ms", "42 s", "31 min 20 s", "2 h 05 min".
std::string format_duration(double seconds);

}  // namespace sparse_decode::cli
