#include "progress.h"

#include <algorithm>
#include <chrono>
#include <cstdio>

namespace sparse_decode::cli {
namespace {

constexpr double kQuietSeconds = 5.0;     // work estimated shorter than this prints nothing
constexpr double kProgressSeconds = 3.0;  // least time between two progress lines

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

}  // namespace

std::string format_duration(double seconds) {
  char text[48];
  const long long whole = static_cast<long long>(seconds + 0.5);
  if (seconds < 1.0) {
    std::snprintf(text, sizeof(text), "%.0f ms", 1e3 * seconds);
  } else if (whole < 90) {
    std::snprintf(text, sizeof(text), "%lld s", whole);
  } else if (whole < 3600) {
    std::snprintf(text, sizeof(text), "%lld min %02lld s", whole / 60, whole % 60);
  } else {
    std::snprintf(text, sizeof(text), "%lld h %02lld min", whole / 3600, whole % 3600 / 60);
  }
  return text;
}

void run_token_slices(const std::string& what, int64_t total, int64_t slice,
                      const std::function<void(int64_t begin, int64_t end)>& run) {
  const Clock::time_point start = Clock::now();
  int64_t done = std::min(slice, total);
  run(0, done);
  const double first = seconds_since(start);
  const bool verbose = done < total && first * static_cast<double>(total) / done > kQuietSeconds;
  if (verbose) {
    const double per_token = first / done;
    const int64_t in_a_minute = std::max(slice, static_cast<int64_t>(60.0 / per_token) / slice * slice);
    std::fprintf(stderr,
                 "demo: %s takes about %s for %lld tokens here (%s for the first %lld); about %lld tokens take a "
                 "minute. Progress follows every few seconds; Ctrl-C stops it.\n",
                 what.c_str(), format_duration(per_token * total).c_str(), static_cast<long long>(total),
                 format_duration(first).c_str(), static_cast<long long>(done), static_cast<long long>(in_a_minute));
  }
  Clock::time_point last_line = Clock::now();
  while (done < total) {
    const int64_t end = std::min(total, done + slice);
    run(done, end);
    done = end;
    if (verbose && done < total && seconds_since(last_line) >= kProgressSeconds) {
      const double elapsed = seconds_since(start);
      std::fprintf(stderr, "demo: %s: %lld / %lld tokens (%.1f %%), %s elapsed, about %s left\n", what.c_str(),
                   static_cast<long long>(done), static_cast<long long>(total), 100.0 * done / total,
                   format_duration(elapsed).c_str(), format_duration(elapsed * (total - done) / done).c_str());
      last_line = Clock::now();
    }
  }
}

}  // namespace sparse_decode::cli
