// The refusals of convert_page_aligned_indices (src/dsv4_hca/convert.cpp):
// - every argument the host checks, named with the expected value, on host
//   and device memory alike, before anything is written;
// - every rule a table value can break (FlashInfer's refusals, plus a block
//   table too narrow for seq_lens): InvalidArgument naming the argument and,
//   for the table, the token and column; the report equals the reference's
//   (refused tokens, the first, its rule); nothing else is written.
#include <gtest/gtest.h>

#include <climits>
#include <cstdint>
#include <functional>
#include <ostream>
#include <random>
#include <string>
#include <vector>

#include "support/dsv4_hca_convert_tables.h"
#include "support/test_support.h"

namespace sparse_decode {
namespace {

using test::ConvertOutputs;
using Rule = Dsv4HcaConvertRule;

// ---------------------------------------------------------------------------
// The host checks.

struct Refusal {
  std::string label;
  std::function<void(Dsv4HcaConvertArgs&)> breaks;
  std::string names;
};
void PrintTo(const Refusal& r, std::ostream* os) { *os << r.label; }

std::vector<Refusal> argument_refusals() {
  using A = Dsv4HcaConvertArgs;
  static const int32_t cum[3] = {0, 2, 4};
  return {
      {"memory", [](A& a) { a.memory = static_cast<MemorySpace>(7); }, "memory"},
      {"cum_seq_lens_q", [](A& a) { a.cum_seq_lens_q = cum, a.max_q_len = 2; }, "cum_seq_lens_q: expected null"},
      {"q_len_0", [](A& a) { a.q_len = 0; }, "q_len: expected >= 1"},
      {"num_requests_0", [](A& a) { a.num_requests = 0; }, "num_requests: expected >= 1"},
      {"num_tokens", [](A& a) { a.num_tokens += 1; }, "num_tokens: expected num_requests * q_len = 4"},
      {"num_tokens_past_int32", [](A& a) { a.num_requests = 1 << 30, a.q_len = 4, a.num_tokens = int64_t{1} << 32; },
       "num_tokens: expected <= 2147483647"},
      {"page_size_1", [](A& a) { a.page_size = 1; }, "page_size: expected one of 2, 4, 8, 16, 32, 64, 128"},
      {"page_size_48", [](A& a) { a.page_size = 48; }, "page_size"},
      {"page_size_256", [](A& a) { a.page_size = 256; }, "page_size"},
      {"swa_pool_rows", [](A& a) { a.swa_pool_rows = 0; }, "swa_pool_rows: expected >= 1"},
      {"compressed_pool_pages", [](A& a) { a.compressed_pool_pages = 0; }, "compressed_pool_pages: expected >= 1"},
      {"width_124", [](A& a) { a.width = 124; }, "width: expected a multiple of 4 that is >= 128"},
      {"width_odd", [](A& a) { a.width = 134; }, "width"},
      {"max_pages_0", [](A& a) { a.max_pages = 0; }, "max_pages: expected >= 1"},
      {"indices_null", [](A& a) { a.indices = nullptr; }, "indices: expected a non-null pointer"},
      {"indices_unaligned",
       [](A& a) { a.indices = reinterpret_cast<const int32_t*>(reinterpret_cast<uintptr_t>(a.indices) + 2); },
       "indices: expected a 4-byte aligned pointer"},
      {"indices_stride", [](A& a) { a.indices_stride = a.width - 1; }, "indices_stride: expected >= width"},
      {"lens_null", [](A& a) { a.lens = nullptr; }, "lens: "},
      {"seq_lens_null", [](A& a) { a.seq_lens = nullptr; }, "seq_lens: "},
      {"swa_rows_null", [](A& a) { a.swa_rows = nullptr; }, "swa_rows: "},
      {"swa_rows_unaligned", [](A& a) { a.swa_rows += 1; }, "swa_rows: expected a 16-byte aligned pointer"},
      {"swa_rows_stride", [](A& a) { a.swa_rows_stride = 130; }, "swa_rows_stride"},
      {"swa_lens_null", [](A& a) { a.swa_lens = nullptr; }, "swa_lens: "},
      {"block_table_null", [](A& a) { a.block_table = nullptr; }, "block_table: "},
      {"block_table_stride", [](A& a) { a.block_table_stride = a.max_pages - 1; }, "block_table_stride"},
      {"hca_seq_lens_null", [](A& a) { a.hca_seq_lens = nullptr; }, "hca_seq_lens: "},
      {"error_unaligned",
       [](A& a) { a.error = reinterpret_cast<int32_t*>(reinterpret_cast<uintptr_t>(a.error) + 1); },
       "error: expected a 4-byte aligned pointer"},
  };
}

// A valid table of 2 requests of 2 tokens.
reference::ConvertInput small_table(uint64_t seed) {
  std::mt19937_64 rng(seed);
  test::ConvertTableConfig c;
  c.requests = 2;
  c.q_len = 2;
  c.page_size = 8;
  c.max_seq_len = 128 * 40;
  c.extra_pages = 1;
  return test::make_convert_table(c, rng);
}

class Dsv4HcaConvertArgumentRefusal : public ::testing::TestWithParam<Refusal> {};

TEST_P(Dsv4HcaConvertArgumentRefusal, NamesTheArgumentAndWritesNothing) {
  const Refusal& r = GetParam();
  const uint64_t seed = test::fresh_seed();
  SCOPED_TRACE(test::seed_message(seed));
  const reference::ConvertInput in = small_table(seed);
  {
    ConvertOutputs valid(in);  // the unbroken arguments convert
    ASSERT_TRUE(convert_page_aligned_indices(test::convert_args(in, valid), nullptr).ok());
  }
  for (MemorySpace memory : {MemorySpace::kHost, MemorySpace::kDevice}) {
    SCOPED_TRACE(memory == MemorySpace::kHost ? "host memory" : "device memory");
    ConvertOutputs o(in);
    Dsv4HcaConvertArgs args = test::convert_args(in, o);
    args.memory = memory;  // host pointers: a device call must stop before it reads them
    r.breaks(args);
    const Status status = convert_page_aligned_indices(args, nullptr);
    EXPECT_EQ(status.code(), StatusCode::kInvalidArgument) << status.message();
    EXPECT_NE(status.message().find(r.names), std::string::npos) << "message: " << status.message();
    EXPECT_NE(status.message().find("expected"), std::string::npos) << "message: " << status.message();
    EXPECT_EQ(validate(args).code(), StatusCode::kInvalidArgument);
    EXPECT_TRUE(o.untouched()) << "a refused conversion wrote its outputs";
    EXPECT_EQ(o.error, std::vector<int32_t>(kConvertErrorWords, ConvertOutputs::kPoison)) << "the report";
  }
}

INSTANTIATE_TEST_SUITE_P(EveryArgument, Dsv4HcaConvertArgumentRefusal, ::testing::ValuesIn(argument_refusals()),
                         [](const auto& info) { return info.param.label; });

// The report is optional on the host and required on the device.
TEST(Dsv4HcaConvert, ErrorIsRequiredOnTheDeviceOnly) {
  const reference::ConvertInput in = small_table(test::fresh_seed());
  ConvertOutputs o(in);
  Dsv4HcaConvertArgs args = test::convert_args(in, o);
  args.error = nullptr;
  EXPECT_TRUE(convert_page_aligned_indices(args, nullptr).ok());
  args.memory = MemorySpace::kDevice;
  const Status status = validate(args);
  EXPECT_EQ(status.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(status.message().find("error: expected a non-null pointer"), std::string::npos) << status.message();
}

// ---------------------------------------------------------------------------
// The table's values: one change breaks one rule.

struct ValueRefusal {
  std::string label;
  Rule rule;
  // Breaks the rule in the table, at a token it picks with `rng`; returns false
  // when this table has nothing to break (the case is drawn again).
  std::function<bool(reference::ConvertInput&, std::mt19937_64&)> breaks;
  std::string names;
};
void PrintTo(const ValueRefusal& r, std::ostream* os) { *os << r.label; }

int64_t visible_of(const reference::ConvertInput& in, int64_t t) {
  return int64_t{in.seq_lens[t / in.q_len]} - in.q_len + t % in.q_len + 1;
}

// A token with at least `slots` compressed slots, or -1.
int64_t token_with_slots(const reference::ConvertInput& in, int64_t slots, std::mt19937_64& rng) {
  const int64_t T = static_cast<int64_t>(in.lens.size());
  const int64_t start = static_cast<int64_t>(rng() % T);
  for (int64_t k = 0; k < T; ++k) {
    const int64_t t = (start + k) % T;
    if (in.lens[t] - kSwaColumns >= slots) return t;
  }
  return -1;
}

std::vector<ValueRefusal> value_refusals() {
  using In = reference::ConvertInput;
  using Rng = std::mt19937_64;
  return {
      {"seq_lens_below_q_len", Rule::kSeqLens,
       [](In& in, Rng& rng) {
         in.seq_lens[rng() % in.seq_lens.size()] = static_cast<int32_t>(in.q_len - 1 - static_cast<int64_t>(rng() % 3));
         return true;
       },
       "seq_lens["},
      {"table_too_narrow", Rule::kWidth,
       [](In& in, Rng&) {
         int64_t most = 0;
         for (int32_t l : in.lens) most = std::max<int64_t>(most, l);
         if (most < kSwaColumns + 4) return false;
         in.width = static_cast<int32_t>((most - 1) / 4 * 4);  // the stride stays: the columns are still there
         return true;
       },
       "width: expected >= 128 + floor(visible / 128)"},
      {"lens_off_by_one", Rule::kLens,
       [](In& in, Rng& rng) {
         in.lens[rng() % in.lens.size()] += rng() % 2 ? 1 : -1;
         return true;
       },
       "lens["},
      {"lens_past_the_width", Rule::kLens,
       [](In& in, Rng& rng) {
         in.lens[rng() % in.lens.size()] = in.width + 4;
         return true;
       },
       "lens["},
      {"max_pages_short", Rule::kMaxPages,
       [](In& in, Rng&) {
         if (reference::convert_reference(in).flashinfer_max_pages < 2) return false;
         in.max_pages = reference::convert_reference(in).flashinfer_max_pages - 1;
         return true;
       },
       "max_pages: expected >= convert_max_pages(seq_lens["},
      {"window_row_minus_1", Rule::kWindowRow,
       [](In& in, Rng& rng) {
         const int64_t t = static_cast<int64_t>(rng() % in.lens.size());
         in.indices[t * in.stride + rng() % std::min<int64_t>(visible_of(in, t), kSwaColumns)] = -1;
         return true;
       },
       "expected a row of the SWA pool in [0, swa_pool_rows"},
      {"window_row_past_the_pool", Rule::kWindowRow,
       [](In& in, Rng& rng) {
         const int64_t t = static_cast<int64_t>(rng() % in.lens.size());
         in.indices[t * in.stride + std::min<int64_t>(visible_of(in, t), kSwaColumns) - 1] =
             static_cast<int32_t>(in.swa_pool_rows);
         return true;
       },
       "are the active SWA indices)"},
      {"page_past_the_pool", Rule::kPage,
       [](In& in, Rng& rng) {
         const int64_t t = token_with_slots(in, 1, rng);
         if (t < 0) return false;
         const int64_t slots = in.lens[t] - kSwaColumns, first = static_cast<int64_t>(rng() % slots) / in.page_size;
         for (int64_t j = first * in.page_size; j < std::min(slots, (first + 1) * in.page_size); ++j) {
           in.indices[t * in.stride + kSwaColumns + j] =
               static_cast<int32_t>(in.compressed_pool_pages * in.page_size + j % in.page_size);  // still canonical
         }
         return true;
       },
       "expected a page in [0, compressed_pool_pages"},
      {"page_minus_1", Rule::kPage,
       [](In& in, Rng& rng) {
         const int64_t t = token_with_slots(in, 1, rng);
         if (t < 0) return false;
         in.indices[t * in.stride + kSwaColumns] = -1;
         return true;
       },
       "), the valid physical page IDs of the compressed pool (page_size = "},
      {"reordered_inside_a_page", Rule::kNotCanonical,
       [](In& in, Rng& rng) {
         const int64_t t = token_with_slots(in, 2, rng);
         if (t < 0) return false;
         const int64_t slots = in.lens[t] - kSwaColumns;
         int64_t j = 1 + static_cast<int64_t>(rng() % (slots - 1));
         if (j % in.page_size == 0) j -= 1;
         if (j % in.page_size == 0) return false;
         in.indices[t * in.stride + kSwaColumns + j] += static_cast<int32_t>(in.page_size);  // the next page's slot
         return true;
       },
       "expected the canonical compressed-page expansion page * page_size + "},
      {"page_start_not_aligned", Rule::kNotCanonical,
       [](In& in, Rng& rng) {
         const int64_t t = token_with_slots(in, 1, rng);
         if (t < 0) return false;
         in.indices[t * in.stride + kSwaColumns] += 1;
         return true;
       },
       "expected the canonical compressed-page expansion page * page_size + 0"},
      {"hole_in_the_slots", Rule::kNotCanonical,
       [](In& in, Rng& rng) {
         const int64_t t = token_with_slots(in, 2, rng);
         if (t < 0) return false;
         const int64_t slots = in.lens[t] - kSwaColumns;
         const int64_t j = 1 + static_cast<int64_t>(rng() % (slots - 1));
         if (j % in.page_size == 0) return false;  // a page's first slot at -1 is a page -1
         in.indices[t * in.stride + kSwaColumns + j] = -1;
         return true;
       },
       "expected the canonical compressed-page expansion"},
  };
}

class Dsv4HcaConvertValueRefusal : public ::testing::TestWithParam<ValueRefusal> {};

TEST_P(Dsv4HcaConvertValueRefusal, ReportsTheReferencesTokensAndWritesNothing) {
  const ValueRefusal& r = GetParam();
  for (int round = 0; round < 4; ++round) {
    const uint64_t seed = test::fresh_seed();
    SCOPED_TRACE(test::seed_message(seed));
    std::mt19937_64 rng(seed);
    test::ConvertTableConfig c;
    c.requests = 1 + static_cast<int32_t>(rng() % 3);
    c.q_len = 1 + static_cast<int32_t>(rng() % 3);
    c.page_size = int64_t{2} << (rng() % 7);
    c.extra_width = static_cast<int32_t>(rng() % 3) * 4;
    reference::ConvertInput in = test::make_convert_table(c, rng);
    if (!r.breaks(in, rng)) {
      --round;
      continue;
    }
    const reference::ConvertOutput want = reference::convert_reference(in);
    ASSERT_GT(want.refused, 0) << "the change did not break the table";
    ASSERT_EQ(want.rule[want.first], static_cast<int32_t>(r.rule)) << "the change broke another rule first";
    ConvertOutputs o(in);
    const Status status = convert_page_aligned_indices(test::convert_args(in, o), nullptr);
    EXPECT_EQ(status.code(), StatusCode::kInvalidArgument) << status.message();
    EXPECT_NE(status.message().find(r.names), std::string::npos) << "message: " << status.message();
    EXPECT_NE(status.message().find("token " + std::to_string(want.first)), std::string::npos)
        << "message: " << status.message();
    EXPECT_EQ(o.error, test::expected_report(want));
    EXPECT_TRUE(o.untouched()) << "a refused conversion wrote its outputs";
  }
}

INSTANTIATE_TEST_SUITE_P(EveryRule, Dsv4HcaConvertValueRefusal, ::testing::ValuesIn(value_refusals()),
                         [](const auto& info) { return info.param.label; });

}  // namespace
}  // namespace sparse_decode
