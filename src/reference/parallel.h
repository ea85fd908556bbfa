// The CPU reference's loop over independent items (tokens, DSA rows):
// contiguous blocks of items on the machine's threads, each item computed as
// it is alone, so that the bits do not depend on how many threads ran.
#pragma once

#include <algorithm>
#include <cstdint>
#include <exception>
#include <thread>
#include <vector>

namespace sparse_decode::reference {

// Calls fn(first, last) on blocks [first, last) that cover [0, count) once
// and returns when every block is done, rethrowing the first block's
// exception. `work` (multiply-adds, roughly) decides whether threads pay:
// below about 10 ms of one core's work the calling thread runs it all.
template <class Fn>
void for_blocks(int64_t count, double work, Fn fn) {
  constexpr double kLeastWork = 1 << 24;
  constexpr int64_t kMostThreads = 32;
  const int64_t hardware = std::max<int64_t>(1, std::thread::hardware_concurrency());
  const int64_t threads = work < kLeastWork ? 1 : std::min({hardware, kMostThreads, count});
  if (threads <= 1) {
    fn(int64_t{0}, count);
    return;
  }
  std::vector<std::exception_ptr> errors(static_cast<size_t>(threads));
  auto run = [&](int64_t b) {
    try {
      fn(count * b / threads, count * (b + 1) / threads);
    } catch (...) {
      errors[static_cast<size_t>(b)] = std::current_exception();
    }
  };
  std::vector<std::thread> pool;
  pool.reserve(static_cast<size_t>(threads - 1));
  for (int64_t b = 1; b < threads; ++b) pool.emplace_back(run, b);
  run(0);
  for (std::thread& thread : pool) thread.join();
  for (const std::exception_ptr& error : errors) {
    if (error) std::rethrow_exception(error);
  }
}

}  // namespace sparse_decode::reference
