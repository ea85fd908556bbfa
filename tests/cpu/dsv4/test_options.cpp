// The optional arguments of dsv4_decode in the fp64 reference and the host
// backend: seq_lens windows (uniform and varlen requests), strided q, out,
// lse, indices and pools, scales by pointer, zero tokens. Every case draws
// fresh random data from a printed seed.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <vector>

#include "reference/dsv4_reference.h"
#include "support/dsv4_checks.h"
#include "testing/dsv4_problem.h"

namespace sparse_decode {
namespace {

using testing::Dsv4Problem;
using testing::Dsv4ProblemConfig;

// Uniform q_len: token i of request b sits at p = seq_lens[b] - q_len + i.
TEST(Dsv4Reference, SeqLensUniformQueryLength) {
  const uint64_t seed = test::fresh_seed();
  SCOPED_TRACE(test::seed_message(seed));
  std::mt19937_64 rng(seed);
  const int32_t q_len = 4, requests = 3;
  Dsv4ProblemConfig config = test::small_config(seed, DType::kFloat8E4M3, 16, 256, q_len * requests);
  config.q_len = q_len;
  Dsv4Problem p = testing::make_dsv4_problem(config);
  test::inject_out_of_range(p, rng);
  // A short sequence, one whose window straddles 128, a long one.
  std::vector<int32_t> seq_lens = {q_len + static_cast<int32_t>(rng() % 8), 100 + static_cast<int32_t>(rng() % 40),
                                   500 + static_cast<int32_t>(rng() % 1000)};
  std::shuffle(seq_lens.begin(), seq_lens.end(), rng);
  Dsv4DecodeArgs args = p.host_args(nullptr, nullptr);
  args.seq_lens = seq_lens.data();
  args.num_requests = requests;
  args.q_len = q_len;
  EXPECT_GT(test::masked_by_seq_lens(args), 0);
  test::check_problem(args);
}

// Varlen: cum_seq_lens_q gives each request its own query length (1..16).
TEST(Dsv4Reference, SeqLensVarlen) {
  for (DType dtype : {DType::kFloat8E4M3, DType::kBFloat16}) {
    const uint64_t seed = test::fresh_seed();
    SCOPED_TRACE(test::seed_message(seed) + " " + test::dtype_name(dtype));
    std::mt19937_64 rng(seed);
    std::vector<int32_t> q_lens = {1, kMaxQueryLen, 1 + static_cast<int32_t>(rng() % 16),
                                   1 + static_cast<int32_t>(rng() % 16), 1 + static_cast<int32_t>(rng() % 16)};
    std::shuffle(q_lens.begin(), q_lens.end(), rng);
    const int32_t requests = static_cast<int32_t>(q_lens.size());
    std::vector<int32_t> cum = {0}, seq_lens;
    for (int32_t b = 0; b < requests; ++b) {
      cum.push_back(cum.back() + q_lens[b]);
      // Alternately short (under 128: the window is cut by p + 1) and long sequences.
      seq_lens.push_back(q_lens[b] + static_cast<int32_t>(b % 2 ? rng() % 100 : 128 + rng() % 4000));
    }
    Dsv4ProblemConfig config = test::small_config(seed, dtype, 16, 256, cum.back());
    config.q_len = 1;
    Dsv4Problem p = testing::make_dsv4_problem(config);
    test::inject_out_of_range(p, rng);
    Dsv4DecodeArgs args = p.host_args(nullptr, nullptr);
    args.seq_lens = seq_lens.data();
    args.num_requests = requests;
    args.cum_seq_lens_q = cum.data();
    args.max_q_len = kMaxQueryLen;
    EXPECT_GT(test::masked_by_seq_lens(args), 0);
    test::check_problem(args);
  }
}

// Padded q/out/lse/indices strides, padded pool rows and pages and another
// page size give bit for bit the result of the contiguous layout, and
// nothing is written into the padding.
TEST(Dsv4Reference, StridedLayoutsMatchContiguous) {
  for (DType dtype : {DType::kFloat8E4M3, DType::kBFloat16}) {
    const uint64_t seed = test::fresh_seed();
    SCOPED_TRACE(test::seed_message(seed) + " " + test::dtype_name(dtype));
    std::mt19937_64 rng(seed);
    const Dsv4Problem p = testing::make_dsv4_problem(test::small_config(seed, dtype, 16, 256, 3));
    const Dsv4DecodeArgs dense = p.host_args(nullptr, nullptr);
    const test::HostOutput expected = test::run_host(dense);
    const int64_t T = p.config.tokens, eb = p.element_bytes();
    const int H = p.config.heads, W = p.config.width;

    // Padding holds NaN (inputs) so that reading it would show.
    auto nan_buffer = [&](int64_t elements) {
      std::vector<uint8_t> buffer(elements * eb);
      for (int64_t i = 0; i < elements; ++i) testing::encode_element(dtype, NAN, &buffer[i * eb]);
      return buffer;
    };
    Dsv4DecodeArgs args = dense;
    args.q_head_stride = kHeadDim + 32;
    args.q_token_stride = H * args.q_head_stride + 48;
    std::vector<uint8_t> q = nan_buffer(T * args.q_token_stride);
    for (int64_t t = 0; t < T; ++t) {
      for (int h = 0; h < H; ++h) {
        std::copy_n(&p.q[(t * H + h) * kHeadDim * eb], kHeadDim * eb,
                    &q[(t * args.q_token_stride + h * args.q_head_stride) * eb]);
      }
    }
    args.q = q.data();
    std::vector<uint8_t> pools[2];
    for (int which = 0; which < 2; ++which) {
      const KvPool& from = which ? dense.compressed_kv : dense.swa_kv;
      KvPool to;
      to.page_size = 32;
      to.row_stride = kHeadDim + 64;
      to.page_stride = to.page_size * to.row_stride + 32;
      to.pages = from.rows() / to.page_size;
      pools[which] = nan_buffer(to.pages * to.page_stride);
      const auto& src = which ? p.compressed_kv : p.swa_kv;
      for (int64_t r = 0; r < from.rows(); ++r) {
        std::copy_n(&src[test::row_offset(from, r) * eb], kHeadDim * eb, &pools[which][test::row_offset(to, r) * eb]);
      }
      to.data = pools[which].data();
      (which ? args.compressed_kv : args.swa_kv) = to;
    }
    args.indices_stride = W + 4;
    std::vector<int32_t> indices(T * args.indices_stride);
    for (auto& index : indices) index = static_cast<int32_t>(rng());  // garbage padding
    for (int64_t t = 0; t < T; ++t) std::copy_n(&p.indices[t * W], W, &indices[t * args.indices_stride]);
    args.indices = indices.data();

    args.out_head_stride = kHeadDim + 8;
    args.out_token_stride = H * args.out_head_stride + 24;
    args.lse_token_stride = H + 5;
    std::vector<uint16_t> out(T * args.out_token_stride, test::kOutPoison);
    std::vector<float> lse(T * args.lse_token_stride, test::lse_poison());
    int32_t count = test::kCountStart;
    args.out = out.data();
    args.lse = lse.data();
    args.out_of_range_count = &count;
    const Status status = dsv4_decode(args, nullptr, 0, nullptr);
    ASSERT_TRUE(status.ok()) << status.message();

    test::expect_strided_outputs(expected, T, H, out, args.out_token_stride, args.out_head_stride, lse,
                                 args.lse_token_stride, count);
  }
}

// bmm scales given by pointer are read (and win over `value`).
TEST(Dsv4Reference, ScalesByPointer) {
  const uint64_t seed = test::fresh_seed();
  SCOPED_TRACE(test::seed_message(seed));
  const Dsv4Problem p = testing::make_dsv4_problem(test::small_config(seed));
  const Dsv4DecodeArgs by_value = p.host_args(nullptr, nullptr);
  Dsv4DecodeArgs by_pointer = by_value;
  const float bmm1 = p.bmm1_scale, bmm2 = p.bmm2_scale;
  by_pointer.bmm1_scale = {123.0f, &bmm1};
  by_pointer.bmm2_scale = {-7.0f, &bmm2};
  const test::HostOutput a = test::run_host(by_value), b = test::run_host(by_pointer);
  EXPECT_TRUE(a.out == b.out);
  EXPECT_EQ(a.lse, b.lse);
  test::check_problem(by_pointer);
}

// T = 0 is a valid call that reads and writes nothing, even with null pointers.
TEST(Dsv4Reference, ZeroTokensWritesNothing) {
  const uint64_t seed = test::fresh_seed();
  SCOPED_TRACE(test::seed_message(seed));
  const Dsv4Problem p = testing::make_dsv4_problem(test::small_config(seed));
  std::vector<uint16_t> out(16 * kHeadDim, test::kOutPoison);
  std::vector<float> lse(16, 1.5f);
  int32_t count = test::kCountStart;
  Dsv4DecodeArgs args = p.host_args(out.data(), lse.data());
  args.num_tokens = 0;
  args.out_of_range_count = &count;
  EXPECT_TRUE(dsv4_decode(args, nullptr, 0, nullptr).ok());
  Dsv4DecodeArgs bare;
  bare.memory = MemorySpace::kHost;
  bare.width = kSwaColumns;
  EXPECT_TRUE(dsv4_decode(bare, nullptr, 0, nullptr).ok());
  EXPECT_TRUE(std::all_of(out.begin(), out.end(), [](uint16_t v) { return v == test::kOutPoison; }));
  EXPECT_TRUE(std::all_of(lse.begin(), lse.end(), [](float v) { return v == 1.5f; }));
  EXPECT_EQ(count, test::kCountStart);
  EXPECT_TRUE(reference::dsv4_decode(args).out.empty());
}

}  // namespace
}  // namespace sparse_decode
