// Request views of dsv4_decode_hca on the CPU backend: q, out and lse, and
// the metadata (swa_rows, swa_lens, block_table, lens) as [B, q_len, ...]
// views whose leading dims do not merge (section 1's rule, docs/spec.md)
// give the bits of the flat call and leave the padding alone; a view with
// varlen requests, or a bad metadata stride, is refused naming it.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "support/dsv4_hca_checks.h"
#include "support/validation_support.h"
#include "support/hca_metadata_views.h"
#include "support/request_views.h"
#include "testing/dsv4_hca_problem.h"

namespace sparse_decode {
namespace {

using test::ViewStrides;

TEST(HcaViews, QueryOutputAndLseThroughViews) {
  for (bool interleaved_q : {false, true}) {
    const uint64_t seed = test::fresh_seed();
    SCOPED_TRACE(test::seed_message(seed) + (interleaved_q ? ", interleaved q" : ", padded q"));
    testing::Dsv4HcaProblemConfig c;
    c.seed = seed, c.tokens = 12, c.q_len = 4;
    const testing::Dsv4HcaProblem p = testing::make_dsv4_hca_problem(c);
    const Dsv4HcaDecodeArgs flat = p.host_args(nullptr, nullptr);
    const test::HostOutput expected = test::run_hca_host(flat);

    const int64_t T = c.tokens, B = T / c.q_len, row = int64_t{c.heads} * kHeadDim;
    const ViewStrides q_view =
        interleaved_q ? test::interleaved_view(row + 16, B) : test::padded_view(row + 16, c.q_len, 32);
    const std::vector<uint8_t> q = test::to_view<uint8_t>(p.q.data(), row, row, T, c.q_len, q_view, 0xFF);
    const ViewStrides out_view = test::padded_view(row, c.q_len, 40);
    const ViewStrides lse_view = test::padded_view(c.heads, c.q_len, 3);
    std::vector<uint16_t> out(test::view_extent(out_view, B, c.q_len, row), test::kOutPoison);
    std::vector<float> lse(test::view_extent(lse_view, B, c.q_len, c.heads), test::lse_poison());
    Dsv4HcaDecodeArgs views = flat;
    views.memory = MemorySpace::kHost;
    views.q = q.data(), views.q_token_stride = q_view.token_stride, views.q_request_stride = q_view.request_stride;
    views.out = out.data(), views.out_token_stride = out_view.token_stride;
    views.out_request_stride = out_view.request_stride;
    views.lse = lse.data(), views.lse_token_stride = lse_view.token_stride;
    views.lse_request_stride = lse_view.request_stride;
    int32_t count = test::kCountStart;
    views.out_of_range_count = &count;
    const Status status = dsv4_decode_hca(views, nullptr, 0, nullptr);
    ASSERT_TRUE(status.ok()) << status.message();
    bool out_padding = false, lse_padding = false;
    EXPECT_TRUE(test::from_view(out, row, T, c.q_len, out_view, test::kOutPoison, &out_padding) == expected.out);
    const std::vector<float> got_lse =
        test::from_view(lse, c.heads, T, c.q_len, lse_view, test::lse_poison(), &lse_padding);
    EXPECT_EQ(std::memcmp(got_lse.data(), expected.lse.data(), got_lse.size() * 4), 0);
    EXPECT_TRUE(out_padding && lse_padding) << "written outside the view's rows";
    EXPECT_EQ(count, expected.count);

  }
}

TEST(HcaViews, MetadataThroughViews) {
  for (bool interleaved : {false, true}) {
    for (bool out_view : {false, true}) {
      const uint64_t seed = test::fresh_seed();
      SCOPED_TRACE(test::seed_message(seed) + (interleaved ? ", interleaved" : ", padded") +
                   (out_view ? ", out view" : ", flat out"));
      testing::Dsv4HcaProblemConfig c;
      c.seed = seed, c.tokens = 15, c.q_len = 5, c.page_size = 16, c.max_pages = 5;
      const testing::Dsv4HcaProblem p = testing::make_dsv4_hca_problem(c);
      const test::HostOutput expected = test::run_hca_host(p.host_args(nullptr, nullptr));

      const test::HcaMetadataViews m(p, interleaved);
      const int64_t T = c.tokens, B = T / c.q_len, row = int64_t{c.heads} * kHeadDim;
      // Flat out: the view whose requests merge (q_len * row apart), passed with request stride 0.
      const ViewStrides out_strides = out_view ? test::padded_view(row, c.q_len, 24) : ViewStrides{row, c.q_len * row};
      std::vector<uint16_t> out(test::view_extent(out_strides, B, c.q_len, row), test::kOutPoison);
      std::vector<float> lse(T * c.heads, test::lse_poison());
      Dsv4HcaDecodeArgs views = p.host_args(nullptr, lse.data());
      m.apply(views);
      views.out = out.data(), views.out_token_stride = out_strides.token_stride;
      views.out_request_stride = out_view ? out_strides.request_stride : 0;
      int32_t count = test::kCountStart;
      views.out_of_range_count = &count;
      const Status status = dsv4_decode_hca(views, nullptr, 0, nullptr);
      ASSERT_TRUE(status.ok()) << status.message();
      bool out_padding = false;
      EXPECT_TRUE(test::from_view(out, row, T, c.q_len, out_strides, test::kOutPoison, &out_padding) == expected.out);
      EXPECT_TRUE(out_padding) << "written outside the view's rows";
      EXPECT_EQ(std::memcmp(lse.data(), expected.lse.data(), lse.size() * 4), 0);
      EXPECT_EQ(count, expected.count);
    }
  }
}

// A bad metadata stride is refused naming it, with nothing written.
TEST(HcaViews, BadMetadataStridesAreRefused) {
  const uint64_t seed = test::fresh_seed();
  SCOPED_TRACE(test::seed_message(seed));
  testing::Dsv4HcaProblemConfig c;
  c.seed = seed, c.tokens = 12, c.q_len = 4;
  const testing::Dsv4HcaProblem p = testing::make_dsv4_hca_problem(c);
  struct Case {
    void (*mutate)(Dsv4HcaDecodeArgs&);
    const char* message;
  };
  const Case cases[] = {
      {[](Dsv4HcaDecodeArgs& a) { a.swa_rows_request_stride = 4 * kSwaColumns + 2; },
       "swa_rows_request_stride: expected a multiple of 4 elements, got 514"},
      {[](Dsv4HcaDecodeArgs& a) { a.swa_rows_request_stride = -4; }, "swa_rows_request_stride: expected >= 0, got -4"},
      {[](Dsv4HcaDecodeArgs& a) { a.swa_lens_request_stride = -1; }, "swa_lens_request_stride: expected >= 0, got -1"},
      {[](Dsv4HcaDecodeArgs& a) { a.swa_lens_token_stride = -1; }, "swa_lens_token_stride: expected >= 0, got -1"},
      {[](Dsv4HcaDecodeArgs& a) { a.block_table_request_stride = -8; },
       "block_table_request_stride: expected >= 0, got -8"},
      {[](Dsv4HcaDecodeArgs& a) { a.lens_token_stride = -2; }, "lens_token_stride: expected >= 0, got -2"},
      {[](Dsv4HcaDecodeArgs& a) { a.lens_request_stride = -3; }, "lens_request_stride: expected >= 0, got -3"},
  };
  for (const Case& k : cases) {
    SCOPED_TRACE(k.message);
    test::PoisonedOutputs outputs(c.tokens, c.heads);
    Dsv4HcaDecodeArgs a = p.host_args(outputs.out.data(), outputs.lse.data());
    ASSERT_TRUE(validate(a).ok()) << validate(a).message();
    k.mutate(a);
    const Status status = dsv4_decode_hca(a, nullptr, 0, nullptr);
    EXPECT_EQ(status.code(), StatusCode::kInvalidArgument);
    EXPECT_NE(status.message().find(k.message), std::string::npos) << status.message();
    EXPECT_TRUE(outputs.untouched());
    a.memory = MemorySpace::kDevice;  // refused on the host, before any device work
    EXPECT_EQ(validate(a).code(), StatusCode::kInvalidArgument) << validate(a).message();
  }
}

// Views need the uniform requests: with cum_seq_lens_q they are refused.
TEST(HcaViews, VarlenViewsAreRefused) {
  const uint64_t seed = test::fresh_seed();
  SCOPED_TRACE(test::seed_message(seed));
  testing::Dsv4HcaProblemConfig c;
  c.seed = seed, c.tokens = 12, c.q_len = 4, c.varlen = true;
  const testing::Dsv4HcaProblem p = testing::make_dsv4_hca_problem(c);
  test::PoisonedOutputs outputs(c.tokens, c.heads);
  Dsv4HcaDecodeArgs a = p.host_args(outputs.out.data(), outputs.lse.data());
  ASSERT_TRUE(validate(a).ok()) << validate(a).message();
  a.out_request_stride = 4 * int64_t{c.heads} * kHeadDim + 8;
  const Status status = dsv4_decode_hca(a, nullptr, 0, nullptr);
  EXPECT_EQ(status.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(status.message().find("cum_seq_lens_q: expected null with a request stride (out_request_stride"),
            std::string::npos)
      << status.message();
  EXPECT_TRUE(outputs.untouched());
  a.out_request_stride = 0;
  a.block_table_request_stride = 4 * int64_t{c.max_pages} + 4;
  const Status metadata = dsv4_decode_hca(a, nullptr, 0, nullptr);
  EXPECT_NE(metadata.message().find("cum_seq_lens_q: expected null with a request stride (block_table_request_stride"),
            std::string::npos)
      << metadata.message();
  EXPECT_TRUE(outputs.untouched());
}

}  // namespace
}  // namespace sparse_decode
