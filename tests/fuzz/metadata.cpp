#include "fuzz/metadata.h"

#include <algorithm>
#include <limits>

namespace sparse_decode::fuzz {
namespace {

constexpr int32_t kMin = std::numeric_limits<int32_t>::min();
constexpr int32_t kMax = std::numeric_limits<int32_t>::max();

}  // namespace

int32_t draw_len(Rng& rng, int32_t width) {
  if (rng.chance(0.7)) return static_cast<int32_t>(rng.uniform(0, width));
  const int32_t edges[] = {0, width, width + 1, 127, 128, 129, -1, kMin, kMax};
  return edges[rng.uniform(0, std::size(edges) - 1)];
}

std::string ints(const std::vector<int32_t>& values, size_t limit) {
  std::string text = "[";
  for (size_t i = 0; i < values.size() && i < limit; ++i) {
    if (i) text += ',';
    text += std::to_string(values[i]);
  }
  if (values.size() > limit) text += ",...";
  return text + "]";
}

std::string Requests::describe() const {
  switch (mode) {
    case Mode::kNone:
      return "no seq_lens";
    case Mode::kUniform:
      return "B=" + std::to_string(num_requests) + " q_len=" + std::to_string(q_len) + " seq_lens=" + ints(seq_lens);
    case Mode::kVarlen:
      return std::string(monotone ? "" : "DECREASING ") + "B=" + std::to_string(num_requests) +
             " max_q_len=" + std::to_string(max_q_len) + " cum_seq_lens_q=" + ints(cum_seq_lens_q) +
             " seq_lens=" + ints(seq_lens);
  }
  return {};
}

Requests draw_requests(Rng& rng, int64_t tokens, bool optional, bool allow_garbage) {
  Requests r;
  const double u = rng.real(0.0, 1.0);
  if (optional && u < 0.4) return r;
  if (u < 0.7 || tokens == 0) {
    r.mode = Requests::Mode::kUniform;
    std::vector<int32_t> divisors;
    for (int32_t d = 1; d <= std::min<int64_t>(tokens, 16); ++d) {
      if (tokens % d == 0) divisors.push_back(d);
    }
    r.q_len = divisors.empty() ? 1 : rng.pick(divisors);
    r.num_requests = tokens == 0 ? 1 : static_cast<int32_t>(tokens / r.q_len);
  } else {
    r.mode = Requests::Mode::kVarlen;
    r.num_requests = static_cast<int32_t>(rng.uniform(1, tokens + 2));
    const int32_t least = static_cast<int32_t>((tokens + r.num_requests - 1) / r.num_requests);
    r.max_q_len = static_cast<int32_t>(rng.uniform(std::max(least, 1), 16));
    const int32_t first = rng.chance(0.85) ? 0 : static_cast<int32_t>(rng.uniform(1, 2));
    const double end_u = rng.real(0.0, 1.0);
    int32_t last = end_u < 0.7 ? static_cast<int32_t>(tokens)
                   : end_u < 0.85 ? static_cast<int32_t>(std::max<int64_t>(tokens - 1, 0))
                   : end_u < 0.95 ? static_cast<int32_t>(tokens + 2)
                                  : kMax;
    last = std::max(last, first);
    r.cum_seq_lens_q.resize(static_cast<size_t>(r.num_requests) + 1);
    r.cum_seq_lens_q[0] = first;
    r.cum_seq_lens_q[static_cast<size_t>(r.num_requests)] = last;
    const int64_t span_end = std::min<int64_t>(last, tokens + 2);
    std::vector<int32_t> cuts;
    for (int32_t b = 1; b < r.num_requests; ++b) cuts.push_back(static_cast<int32_t>(rng.uniform(first, span_end)));
    std::sort(cuts.begin(), cuts.end());
    for (int32_t b = 1; b < r.num_requests; ++b) r.cum_seq_lens_q[static_cast<size_t>(b)] = cuts[static_cast<size_t>(b) - 1];
    if (allow_garbage && r.num_requests >= 1 && rng.chance(0.1)) {
      const size_t k = static_cast<size_t>(rng.uniform(1, r.num_requests));
      r.cum_seq_lens_q[k] = rng.chance(0.5) ? kMin : r.cum_seq_lens_q[k - 1] - static_cast<int32_t>(rng.uniform(1, 3));
      r.monotone = false;
    }
  }
  r.seq_lens.resize(static_cast<size_t>(r.num_requests));
  for (int32_t b = 0; b < r.num_requests; ++b) {
    const int64_t q = r.mode == Requests::Mode::kUniform
                          ? r.q_len
                          : int64_t{r.cum_seq_lens_q[static_cast<size_t>(b) + 1]} - r.cum_seq_lens_q[static_cast<size_t>(b)];
    const int64_t q_clamped = std::clamp<int64_t>(q, 0, 1 << 20);
    int64_t value = q_clamped + rng.uniform(0, 300);
    if (rng.chance(0.2)) {
      const int64_t edges[] = {kMin, -1, 0, 1, q_clamped - 1, q_clamped, 127, 128, 129, kMax};
      value = edges[rng.uniform(0, std::size(edges) - 1)];
    }
    r.seq_lens[static_cast<size_t>(b)] = static_cast<int32_t>(std::clamp<int64_t>(value, kMin, kMax));
  }
  return r;
}

std::string host_refusal(const Requests& r, int64_t tokens) {
  if (r.mode != Requests::Mode::kVarlen) return "";
  const std::vector<int32_t>& cum = r.cum_seq_lens_q;
  int64_t longest = 0;
  if (cum[0] < 0 || cum[0] > tokens) return "cum_seq_lens_q";
  for (size_t b = 1; b < cum.size(); ++b) {
    if (cum[b] < cum[b - 1] || cum[b] > tokens) return "cum_seq_lens_q";
    longest = std::max<int64_t>(longest, int64_t{cum[b]} - cum[b - 1]);
  }
  return longest > r.max_q_len ? "max_q_len" : "";
}

}  // namespace sparse_decode::fuzz
