// Request views of dsv4_decode_packed on the CPU backend (docs/spec.md,
// section 1, "Strides", which section 2 shares): q, both segments' indices
// and lens, out and lse as [B, q_len, ...] views whose leading dims do not
// merge give the bits of the flat call and leave the views' padding alone;
// and the refusals of the arguments that views, seq_lens and the sink term
// bring, naming the argument, for host and device memory.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <functional>
#include <ostream>
#include <string>
#include <vector>

#include "support/dsv4_packed_checks.h"
#include "support/request_views.h"
#include "support/validation_support.h"
#include "testing/dsv4_packed_problem.h"

namespace sparse_decode {
namespace {

using test::ViewStrides;

void check_views(int32_t requests, int32_t q_len, bool extra, bool interleaved_q, bool lens_per_request) {
  const uint64_t seed = test::fresh_seed();
  SCOPED_TRACE(test::seed_message(seed) + ", B " + std::to_string(requests) + ", q_len " + std::to_string(q_len));
  const int64_t T = int64_t{requests} * q_len;
  testing::Dsv4PackedProblemConfig config = test::packed_config(seed, 16, T, extra ? 256 : 0);
  testing::Dsv4PackedProblem p = testing::make_dsv4_packed_problem(config);
  if (lens_per_request) {  // each request's shortest lens (columns past a len may name NaN rows)
    for (std::vector<int32_t>* lens : {&p.swa_lens, &p.extra_lens}) {
      for (int64_t first = 0; first < T && !lens->empty(); first += q_len) {
        const int32_t least = *std::min_element(lens->begin() + first, lens->begin() + first + q_len);
        std::fill_n(lens->begin() + first, q_len, least);
      }
    }
  }
  std::vector<int32_t> seq_lens;
  for (int32_t b = 0; b < requests; ++b) seq_lens.push_back(q_len + (b % 2 ? 2 : 70));
  Dsv4PackedDecodeArgs flat = p.host_args(nullptr, nullptr);
  flat.seq_lens = seq_lens.data();
  flat.num_requests = requests;
  flat.q_len = q_len;
  const test::HostOutput expected = test::run_packed_host(flat);

  const int H = config.heads;
  const int64_t row = int64_t{H} * kHeadDim;
  const ViewStrides q_view =
      interleaved_q ? test::interleaved_view(row + 8, requests) : test::padded_view(row + 8, q_len, 16);
  const std::vector<uint16_t> q = test::to_view<uint16_t>(p.q.data(), row, row, T, q_len, q_view, 0xFFFF);
  const auto segment_view = [&](const std::vector<int32_t>& indices, int64_t stride, int32_t width,
                                const std::vector<int32_t>& lens, std::vector<int32_t>* indices_view,
                                std::vector<int32_t>* lens_view, ViewStrides* iv, ViewStrides* lv) {
    *iv = test::padded_view(stride + 8, q_len, 4);
    *indices_view = test::to_view<int32_t>(indices.data(), stride, width, T, q_len, *iv, int32_t{0});
    if (lens_per_request) {
      *lv = {0, 1};
      for (int32_t b = 0; b < requests; ++b) lens_view->push_back(lens[b * q_len]);
    } else {
      *lv = test::padded_view(2, q_len, 3);
      *lens_view = test::to_view<int32_t>(lens.data(), 1, 1, T, q_len, *lv, 1 << 20);
    }
  };
  std::vector<int32_t> swa_indices, swa_lens, extra_indices, extra_lens;
  ViewStrides swa_iv{}, swa_lv{}, extra_iv{}, extra_lv{};
  segment_view(p.swa_indices, p.swa_stride(), config.swa_width, p.swa_lens, &swa_indices, &swa_lens, &swa_iv,
               &swa_lv);
  if (extra) {
    segment_view(p.extra_indices, p.extra_stride(), config.extra_width, p.extra_lens, &extra_indices, &extra_lens,
                 &extra_iv, &extra_lv);
  }
  const ViewStrides out_view = test::padded_view(row + 16, q_len, 8), lse_view = test::padded_view(H + 1, q_len, 5);
  std::vector<uint16_t> out(test::view_extent(out_view, requests, q_len, row), test::kOutPoison);
  std::vector<float> lse(test::view_extent(lse_view, requests, q_len, H), test::lse_poison());

  Dsv4PackedDecodeArgs views = flat;
  views.memory = MemorySpace::kHost;
  views.q = q.data(), views.q_token_stride = q_view.token_stride, views.q_request_stride = q_view.request_stride;
  views.swa.indices = swa_indices.data();
  views.swa.indices_stride = swa_iv.token_stride, views.swa.indices_request_stride = swa_iv.request_stride;
  views.swa.lens = swa_lens.data();
  views.swa.lens_token_stride = swa_lv.token_stride, views.swa.lens_request_stride = swa_lv.request_stride;
  if (extra) {
    views.extra.indices = extra_indices.data();
    views.extra.indices_stride = extra_iv.token_stride, views.extra.indices_request_stride = extra_iv.request_stride;
    views.extra.lens = extra_lens.data();
    views.extra.lens_token_stride = extra_lv.token_stride, views.extra.lens_request_stride = extra_lv.request_stride;
  }
  views.out = out.data(), views.out_token_stride = out_view.token_stride;
  views.out_request_stride = out_view.request_stride;
  views.lse = lse.data(), views.lse_token_stride = lse_view.token_stride;
  views.lse_request_stride = lse_view.request_stride;
  int32_t count = test::kCountStart;
  views.out_of_range_count = &count;
  const Status status = dsv4_decode_packed(views, nullptr, 0, nullptr);
  ASSERT_TRUE(status.ok()) << status.message();

  bool out_padding = false, lse_padding = false;
  EXPECT_TRUE(test::from_view(out, row, T, q_len, out_view, test::kOutPoison, &out_padding) == expected.out);
  const std::vector<float> got_lse = test::from_view(lse, H, T, q_len, lse_view, test::lse_poison(), &lse_padding);
  EXPECT_EQ(std::memcmp(got_lse.data(), expected.lse.data(), got_lse.size() * 4), 0);
  EXPECT_TRUE(out_padding && lse_padding) << "written outside the view's rows";
  EXPECT_EQ(count, expected.count);
}

TEST(PackedViews, EveryArgumentThroughItsView) {
  check_views(3, 4, true, false, false);
  check_views(2, 3, false, true, false);
  check_views(3, 2, true, true, true);
  check_views(4, 1, true, false, false);
}

// The refusals of the new arguments (the common ones: test_validation.cpp).
class ValidPackedViewCall {
 public:
  explicit ValidPackedViewCall(uint64_t seed) {
    problem_ = testing::make_dsv4_packed_problem(test::packed_config(seed, 16, 4, 256, 64));
    args = problem_.host_args(outputs.out.data(), outputs.lse.data());
    args.out_of_range_count = &outputs.count;
    args.seq_lens = seq_lens_.data();
    args.num_requests = 2;
    args.q_len = 2;
  }
  Dsv4PackedDecodeArgs args;
  test::PoisonedOutputs outputs{4, 16};

 private:
  testing::Dsv4PackedProblem problem_;
  std::vector<int32_t> seq_lens_ = {9, 200};
};

struct Refusal {
  std::string label;
  std::function<void(Dsv4PackedDecodeArgs&)> breaks;
  std::string names;
};
void PrintTo(const Refusal& refusal, std::ostream* os) { *os << refusal.label; }

const int32_t kCum[3] = {0, 2, 4};

std::vector<Refusal> refusals() {
  using A = Dsv4PackedDecodeArgs;
  return {
      {"sink_term", [](A& a) { a.sink_term = static_cast<SinkTerm>(7); }, "sink_term: expected kInOutput"},
      {"num_requests_0", [](A& a) { a.num_requests = 0; }, "num_requests: expected >= 1 with seq_lens"},
      {"q_len_0", [](A& a) { a.q_len = 0; }, "q_len: expected >= 1 with seq_lens"},
      {"q_len_mismatch", [](A& a) { a.q_len = 3; }, "num_tokens: expected num_requests * q_len = 6"},
      {"max_q_len_0", [](A& a) { a.cum_seq_lens_q = kCum, a.max_q_len = 0; }, "max_q_len: expected >= 1"},
      {"seq_lens_unaligned",
       [](A& a) { a.seq_lens = reinterpret_cast<const int32_t*>(reinterpret_cast<const char*>(a.seq_lens) + 2); },
       "seq_lens: expected a 4-byte aligned pointer"},
      {"q_request_stride_unaligned", [](A& a) { a.q_request_stride = 2 * a.q_token_stride + 4; },
       "q_request_stride: expected a multiple of 8 elements"},
      {"swa_indices_request_stride", [](A& a) { a.swa.indices_request_stride = -4; },
       "swa.indices_request_stride: expected >= 0"},
      {"extra_lens_token_stride", [](A& a) { a.extra.lens_token_stride = -2; },
       "extra.lens_token_stride: expected >= 0"},
      {"extra_lens_request_stride_needs_q_len",
       [](A& a) { a.seq_lens = nullptr, a.q_len = 0, a.extra.lens_request_stride = 1; },
       "q_len: expected >= 1 with a request stride (extra.lens_request_stride = 1)"},
      {"views_with_varlen", [](A& a) { a.cum_seq_lens_q = kCum, a.max_q_len = 2, a.swa.lens_request_stride = 5; },
       "cum_seq_lens_q: expected null with a request stride"},
      {"out_request_stride_overlap", [](A& a) { a.out_request_stride = a.out_token_stride; },
       "out_request_stride: expected >= (q_len - 1) * out_token_stride + 8192"},
  };
}

class PackedViewRefusal : public ::testing::TestWithParam<Refusal> {};

TEST_P(PackedViewRefusal, RefusedEverywhereNamingTheArgumentAndNothingWritten) {
  const uint64_t seed = test::fresh_seed();
  SCOPED_TRACE(test::seed_message(seed));
  ValidPackedViewCall call(seed);
  ASSERT_TRUE(validate(call.args).ok()) << validate(call.args).message();
  Dsv4PackedDecodeArgs args = call.args;
  GetParam().breaks(args);
  test::expect_refused_everywhere(
      args, GetParam().label, GetParam().names,
      [](const Dsv4PackedDecodeArgs& a) { return dsv4_decode_packed(a, nullptr, 0, nullptr); }, call.outputs);
}

INSTANTIATE_TEST_SUITE_P(EveryRefusal, PackedViewRefusal, ::testing::ValuesIn(refusals()),
                         [](const auto& info) { return info.param.label; });

// Host memory: cum_seq_lens_q out of order is refused, naming it.
TEST(PackedViews, HostMetadataIsChecked) {
  const uint64_t seed = test::fresh_seed();
  SCOPED_TRACE(test::seed_message(seed));
  ValidPackedViewCall call(seed);
  Dsv4PackedDecodeArgs a = call.args;
  const int32_t decreasing[3] = {0, 7, 2};
  a.cum_seq_lens_q = decreasing;
  a.max_q_len = 7;
  const Status status = dsv4_decode_packed(a, nullptr, 0, nullptr);
  EXPECT_EQ(status.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(status.message().find("cum_seq_lens_q: expected non-decreasing offsets"), std::string::npos)
      << status.message();
  EXPECT_TRUE(call.outputs.untouched());
}

}  // namespace
}  // namespace sparse_decode
