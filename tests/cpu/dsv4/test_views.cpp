// Request views of dsv4_decode on the CPU backend (docs/spec.md, section 1,
// "Strides"): q, indices, lens, out and lse given as [B, q_len, ...] views
// whose leading dims do not merge give the bits of the flat call, read and
// write nothing outside the view's rows, and views that do merge are the
// flat layout.
#include <gtest/gtest.h>

#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "common/math.cuh"
#include "dsv4/validate_views.h"
#include "support/dsv4_checks.h"
#include "support/request_views.h"
#include "testing/dsv4_problem.h"

namespace sparse_decode {
namespace {

using test::ViewStrides;

struct ViewCase {
  const char* label;
  DType dtype;
  int32_t requests, q_len;
  bool interleaved_q;     // q stored [q_len, B]: a request's tokens B rows apart
  bool lens_per_request;  // lens [B]: token stride 0, request stride 1
  bool merging;           // views with request stride = q_len * token stride (the flat layout)
};

// The flat call and the same call over views of every [T, ...] argument.
void check_views(const ViewCase& c) {
  const uint64_t seed = test::fresh_seed();
  SCOPED_TRACE(std::string(c.label) + ", " + test::seed_message(seed));
  const int64_t T = int64_t{c.requests} * c.q_len;
  testing::Dsv4ProblemConfig config = test::small_config(seed, c.dtype, 16, 384, T);
  config.q_len = c.q_len;
  testing::Dsv4Problem problem = testing::make_dsv4_problem(config);
  if (c.lens_per_request) {
    for (int64_t t = 0; t < T; ++t) problem.lens[t] = problem.lens[t / c.q_len * c.q_len];
  }
  std::vector<int32_t> seq_lens;
  for (int32_t b = 0; b < c.requests; ++b) seq_lens.push_back(c.q_len + (b % 2 ? 300 : 40 * b));
  Dsv4DecodeArgs flat = problem.host_args(nullptr, nullptr);
  flat.seq_lens = seq_lens.data();
  flat.num_requests = c.requests;
  flat.q_len = c.q_len;
  const test::HostOutput expected = test::run_host(flat);

  const int H = config.heads, W = config.width;
  const int64_t bytes = problem.element_bytes(), row = int64_t{H} * kHeadDim;
  const int32_t L = c.q_len;
  const auto stride = [&](int64_t token_stride, int64_t pad) {
    return c.merging ? ViewStrides{token_stride, L * token_stride} : test::padded_view(token_stride, L, pad);
  };
  // q in bytes (16-byte multiples), then its strides in elements.
  const ViewStrides q_bytes =
      c.interleaved_q ? test::interleaved_view(row * bytes + 32, c.requests) : stride(row * bytes + 32, 64);
  const std::vector<uint8_t> q =
      test::to_view<uint8_t>(problem.q.data(), row * bytes, row * bytes, T, L, q_bytes, uint8_t{0xFF});
  const ViewStrides indices_view = stride(W + 4, 12);
  const std::vector<int32_t> indices = test::to_view<int32_t>(problem.indices.data(), W, W, T, L, indices_view,
                                                              static_cast<int32_t>(config.swa_rows - 1));
  const ViewStrides lens_view = c.lens_per_request ? ViewStrides{0, 1} : stride(3, 5);
  std::vector<int32_t> lens;
  if (c.lens_per_request) {
    for (int32_t b = 0; b < c.requests; ++b) lens.push_back(problem.lens[b * L]);
  } else {
    lens = test::to_view<int32_t>(problem.lens.data(), 1, 1, T, L, lens_view, 1);
  }
  const ViewStrides out_view = stride(row + 8, 24), lse_view = stride(H + 3, 7);
  std::vector<uint16_t> out(test::view_extent(out_view, c.requests, L, row), test::kOutPoison);
  std::vector<float> lse(test::view_extent(lse_view, c.requests, L, H), test::lse_poison());

  Dsv4DecodeArgs views = flat;
  views.q = q.data();
  views.q_token_stride = q_bytes.token_stride / bytes;
  views.q_request_stride = q_bytes.request_stride / bytes;
  views.indices = indices.data();
  views.indices_stride = indices_view.token_stride;
  views.indices_request_stride = indices_view.request_stride;
  views.lens = lens.data();
  views.lens_token_stride = lens_view.token_stride;
  views.lens_request_stride = lens_view.request_stride;
  views.out = out.data();
  views.out_token_stride = out_view.token_stride;
  views.out_request_stride = out_view.request_stride;
  views.lse = lse.data();
  views.lse_token_stride = lse_view.token_stride;
  views.lse_request_stride = lse_view.request_stride;
  int32_t count = test::kCountStart;
  views.out_of_range_count = &count;
  views.memory = MemorySpace::kHost;
  const Status status = dsv4_decode(views, nullptr, 0, nullptr);
  ASSERT_TRUE(status.ok()) << status.message();

  bool out_padding = false, lse_padding = false;
  EXPECT_TRUE(test::from_view(out, row, T, L, out_view, test::kOutPoison, &out_padding) == expected.out)
      << "out through the view differs from the flat call";
  const std::vector<float> got_lse = test::from_view(lse, H, T, L, lse_view, test::lse_poison(), &lse_padding);
  EXPECT_EQ(std::memcmp(got_lse.data(), expected.lse.data(), got_lse.size() * 4), 0)
      << "lse through the view differs from the flat call";
  EXPECT_TRUE(out_padding) << "out written outside the view's rows";
  EXPECT_TRUE(lse_padding) << "lse written outside the view's rows";
  EXPECT_EQ(count, expected.count);
}

// The kernels' division of a token by q_len (common/math.cuh FastDivisor),
// emulated on the host: exact for every divisor up to 2^20 and tokens below
// 2^31, the largest ones included.
TEST(Dsv4Views, FastDivisorIsExact) {
  const uint64_t seed = test::fresh_seed();
  SCOPED_TRACE(test::seed_message(seed));
  std::mt19937_64 rng(seed);
  for (uint32_t d = 1; d <= (1u << 20); d += d < 5000 ? 1 : 997) {
    const FastDivisor f = fast_divisor(d);
    ASSERT_EQ(f.divisor, d);
    for (uint32_t n : {0u, 1u, d - 1, d, d + 1, 0x7fffffffu, 0x7fffffffu - d, static_cast<uint32_t>(rng() >> 33)}) {
      ASSERT_EQ(static_cast<uint32_t>((uint64_t{n} * f.multiplier) >> f.shift), n / d) << n << " / " << d;
    }
  }
}

TEST(Dsv4Views, PaddedRequestsGiveTheFlatBits) {
  for (const ViewCase& c : {ViewCase{"fp8_b3_q4", DType::kFloat8E4M3, 3, 4, false, false, false},
                            ViewCase{"bf16_b2_q5", DType::kBFloat16, 2, 5, false, false, false},
                            ViewCase{"fp8_b4_q1", DType::kFloat8E4M3, 4, 1, false, false, false},
                            ViewCase{"fp8_b2_q17", DType::kFloat8E4M3, 2, 17, false, false, false}}) {
    check_views(c);
  }
}

TEST(Dsv4Views, InterleavedQueryAndLensOfTheRequest) {
  check_views({"fp8_interleaved_q", DType::kFloat8E4M3, 3, 3, true, false, false});
  check_views({"bf16_lens_per_request", DType::kBFloat16, 3, 4, false, true, false});
  check_views({"fp8_both", DType::kFloat8E4M3, 4, 2, true, true, false});
}

TEST(Dsv4Views, MergingViewsAreTheFlatLayout) {
  check_views({"fp8_merging", DType::kFloat8E4M3, 3, 4, false, false, true});
}

// The launchers' reading of the arguments: a view that merges into one
// token stride is flat; one that does not makes every argument's token
// addressed through q_len (request_tokens); an absent array counts for
// nothing, whatever its strides.
TEST(Dsv4Views, LaunchersResolveTokenStrides) {
  using validation::TokenStrides;
  TokenStrides q{}, out{}, lse{};
  auto resolve = [&](int64_t out_request_stride, int64_t lse_request_stride, bool lse_given) {
    return validation::resolve_token_strides({{&q, 512, 0, true},
                                              {&out, 512, out_request_stride, true},
                                              {&lse, 16, lse_request_stride, lse_given}},
                                             3);
  };
  EXPECT_EQ(resolve(0, 0, true), 1u);  // flat
  EXPECT_EQ(out.token_stride, 512);
  EXPECT_EQ(out.request_stride, 512);
  EXPECT_EQ(resolve(1536, 48, true), 1u);  // [B, 3] views that merge
  EXPECT_EQ(out.token_stride, 512);
  EXPECT_EQ(lse.request_stride, 16);
  EXPECT_EQ(resolve(4096, 0, false), 3u);  // out is a view; lse is absent
  EXPECT_EQ(q.token_stride, 512);
  EXPECT_EQ(q.request_stride, 1536);
  EXPECT_EQ(out.token_stride, 512);
  EXPECT_EQ(out.request_stride, 4096);
  EXPECT_EQ(resolve(0, 1000, false), 1u);  // an absent lse's stride is not read
}

}  // namespace
}  // namespace sparse_decode
