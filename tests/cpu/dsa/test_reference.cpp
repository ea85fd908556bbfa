// The fp64 reference of dsa_decode (src/reference/dsa_reference.cpp) against
// an independent naive computation, its edge cases, the split + combine
// emulation and the CPU backend (dsa_decode on host memory).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <ostream>
#include <string>
#include <vector>

#include "reference/dsa_reference.h"
#include "reference/formats.h"
#include "support/test_support.h"
#include "testing/dsa_problem.h"

namespace sparse_decode {
namespace {

using reference::DsaResult;
using testing::DsaProblem;
using testing::DsaProblemConfig;

// Written straight from SPEC section 4, in a different order from the
// reference: walks key positions 0..positions[row] and counts how many
// region columns name each one's block (a repeated region counts twice).
std::vector<double> naive(const DsaDecodeArgs& a) {
  const int heads = a.num_heads;
  std::vector<double> out(static_cast<size_t>(a.num_rows) * heads * kDsaHeadDim, 0.0);
  const bool fp8 = a.cache_dtype == DType::kFloat8E4M3;
  auto cache = [&](int64_t offset) {
    return fp8 ? reference::decode_e4m3(static_cast<const uint8_t*>(a.cache)[offset]) * 1.0
               : reference::decode_bf16(static_cast<const uint16_t*>(a.cache)[offset]);
  };
  for (int64_t r = 0; r < a.num_rows; ++r) {
    if (a.active[r] == 0) continue;
    const int64_t request = r / (a.num_groups * a.query_len), group = r % a.num_groups;
    std::vector<int64_t> slots;  // cache offsets of the keys, with multiplicity
    for (int64_t k = 0; k <= a.positions[r]; ++k) {
      const int64_t block = k / a.block_size;
      if (block >= a.max_blocks) break;
      int copies = 0;
      for (int32_t c = 0; c < a.num_regions; ++c) copies += a.regions[r * a.regions_stride + c] == block;
      const int64_t page = copies ? a.block_table[request * a.block_table_stride + block] : -1;
      if (page < 0 || page >= a.num_pages) continue;
      const int64_t offset =
          page * a.cache_page_stride + group * a.cache_group_stride + (k % a.block_size) * a.cache_slot_stride;
      for (int i = 0; i < copies; ++i) slots.push_back(offset);
    }
    if (slots.empty()) continue;
    const double ks = fp8 ? *a.k_scale : 1.0, vs = fp8 ? *a.v_scale : 1.0;
    for (int h = 0; h < heads; ++h) {
      const auto* q = static_cast<const uint16_t*>(a.q) + r * a.q_row_stride + h * a.q_head_stride;
      std::vector<double> w(slots.size());
      double total = 0.0;
      for (size_t i = 0; i < slots.size(); ++i) {
        double dot = 0.0;
        for (int d = 0; d < kDsaHeadDim; ++d) dot += reference::decode_bf16(q[d]) * cache(slots[i] + d) * ks;
        total += (w[i] = std::exp(a.scale * dot));  // scores are small: no max shift needed
      }
      double gate = 1.0;
      if (a.gate) {
        const int64_t index = (r / a.num_groups) * a.gate_token_stride + group * heads + h;
        const double x = a.gate_dtype == DsaGateDType::kFloat32
                             ? static_cast<const float*>(a.gate)[index]
                             : reference::decode_bf16(static_cast<const uint16_t*>(a.gate)[index]);
        const double s = 1.0 / (1.0 + std::exp(-x));
        gate = a.gate_dtype == DsaGateDType::kFloat32 ? static_cast<float>(s)
                                                      : reference::decode_bf16(reference::encode_bf16(s));
      }
      double* o = &out[(static_cast<size_t>(r) * heads + h) * kDsaHeadDim];
      for (size_t i = 0; i < slots.size(); ++i) {
        for (int d = 0; d < kDsaHeadDim; ++d) o[d] += w[i] / total * cache(slots[i] + kDsaHeadDim + d) * vs;
      }
      for (int d = 0; d < kDsaHeadDim; ++d) o[d] *= gate;
    }
  }
  return out;
}

double relative_l2(const std::vector<double>& got, const std::vector<double>& want) {
  double diff = 0.0, norm = 0.0;
  for (size_t i = 0; i < got.size(); ++i) diff += (got[i] - want[i]) * (got[i] - want[i]), norm += want[i] * want[i];
  return std::sqrt(diff / norm);
}

// Checks that a result is not trivially zero: some row attended keys and
// every element is finite.
void expect_meaningful(const DsaResult& result) {
  int64_t keys = 0;
  for (int64_t k : result.keys) keys += k;
  EXPECT_GT(keys, 0) << "no row attended any key: the test proves nothing";
  double norm = 0.0;
  for (double v : result.out) {
    ASSERT_TRUE(std::isfinite(v)) << "a NaN slot was read";
    norm += v * v;
  }
  EXPECT_GT(norm, 0.0);
}

struct Shape {
  const char* label;
  DsaProblemConfig config;
};

DsaProblemConfig shape(int requests, int query_len, int groups, int heads, int block, int regions, int max_blocks,
                       DType dtype, bool gate, DsaGateDType gate_dtype, bool strided) {
  DsaProblemConfig c;
  c.requests = requests, c.query_len = query_len, c.groups = groups, c.heads = heads;
  c.block_size = block, c.regions = regions, c.max_blocks = max_blocks;
  c.cache_dtype = dtype, c.gate = gate, c.gate_dtype = gate_dtype, c.strided = strided;
  return c;
}

std::vector<Shape> shapes() {
  const DType bf16 = DType::kBFloat16, fp8 = DType::kFloat8E4M3;
  const DsaGateDType gb = DsaGateDType::kBFloat16, gf = DsaGateDType::kFloat32;
  return {
      {"bf16_g1_q1_h16", shape(3, 1, 1, 16, 16, 6, 8, bf16, false, gb, false)},
      {"bf16_g2_q1_h8_gate_bf16", shape(3, 1, 2, 8, 16, 6, 8, bf16, true, gb, false)},
      {"fp8_g4_q3_h5_gate_f32", shape(2, 3, 4, 5, 8, 5, 10, fp8, true, gf, false)},
      {"fp8_g2_q2_h16_strided", shape(2, 2, 2, 16, 4, 12, 20, fp8, true, gb, true)},
      {"bf16_g3_q4_h1_block1", shape(2, 4, 3, 1, 1, 16, 40, bf16, true, gf, true)},
      {"fp8_g1_q1_h3_block64", shape(4, 1, 1, 3, 64, 4, 4, fp8, false, gb, false)},
  };
}

void PrintTo(const Shape& shape, std::ostream* os) { *os << shape.label; }

class DsaReferenceShapes : public ::testing::TestWithParam<Shape> {};

TEST_P(DsaReferenceShapes, MatchesNaive) {
  const uint64_t seed = test::fresh_seed();
  SCOPED_TRACE(test::seed_message(seed));
  DsaProblemConfig config = GetParam().config;
  config.seed = seed;
  const DsaProblem p = make_dsa_problem(config);
  std::vector<uint16_t> out(static_cast<size_t>(p.rows()) * config.heads * kDsaHeadDim);
  const DsaDecodeArgs a = p.host_args(out.data());
  ASSERT_TRUE(validate(a).ok()) << validate(a).message();
  const DsaResult result = reference::dsa_decode(a);
  expect_meaningful(result);
  EXPECT_LE(relative_l2(result.out, naive(a)), 1e-12);
  // Rows with no key and inactive rows are exact zeros.
  for (int64_t r = 0; r < a.num_rows; ++r) {
    if (result.keys[r] != 0) continue;
    for (int i = 0; i < a.num_heads * kDsaHeadDim; ++i) {
      ASSERT_EQ(result.out[r * a.num_heads * kDsaHeadDim + i], 0.0) << "row " << r;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Shapes, DsaReferenceShapes, ::testing::ValuesIn(shapes()),
                         [](const auto& info) { return std::string(info.param.label); });

// A small problem most edge tests edit: G = 2, query_len = 2, BF16 gate.
DsaProblem small_problem(uint64_t seed, DType dtype = DType::kBFloat16) {
  DsaProblemConfig c = shape(2, 2, 2, 4, 8, 4, 6, dtype, true, DsaGateDType::kBFloat16, false);
  c.inactive_fraction = 0.0, c.empty_fraction = 0.0, c.bad_id_fraction = 0.0;
  c.seed = seed;
  return make_dsa_problem(c);
}

size_t row_begin(const DsaDecodeArgs& a, int64_t row) { return static_cast<size_t>(row) * a.num_heads * kDsaHeadDim; }

std::vector<double> row_of(const std::vector<double>& out, const DsaDecodeArgs& a, int64_t row) {
  return {out.begin() + row_begin(a, row), out.begin() + row_begin(a, row + 1)};
}

// Makes row 0 attend only its current block (cut by its position) through
// column 0, with fresh data in the slots it can see.
int32_t attend_current_block(DsaProblem& p, uint64_t seed) {
  const int32_t block = p.config.block_size;
  const int32_t last = p.positions[0] / block;
  p.regions[0] = last;
  for (int c = 1; c < p.config.regions; ++c) p.regions[c] = -1;
  for (int32_t slot = 0; slot <= p.positions[0] % block; ++slot) p.fill_slot(p.block_table[last], 0, slot, seed + slot);
  return last;
}

TEST(DsaReference, PositionCutsTheBlock) {
  const uint64_t seed = test::fresh_seed();
  SCOPED_TRACE(test::seed_message(seed));
  DsaProblem p = small_problem(seed);
  const DsaDecodeArgs a = p.host_args(nullptr);
  const int32_t last = attend_current_block(p, seed);
  const int32_t slot = p.positions[0] % a.block_size;
  if (slot + 1 < a.block_size) {  // the first invisible slot of the block: NaN, so reading it shows
    const int64_t base = p.block_table[last] * p.page_stride + (slot + 1) * p.slot_stride;
    for (int d = 0; d < kDsaSlotDim; ++d) std::memcpy(&p.cache[(base + d) * 2], "\xC0\x7F", 2);
  }
  const DsaResult result = reference::dsa_decode(a);
  EXPECT_EQ(result.keys[0], slot + 1);
  const std::vector<reference::DsaKey> keys = reference::dsa_visible_keys(a, 0);
  ASSERT_EQ(keys.size(), static_cast<size_t>(slot + 1));
  EXPECT_EQ(keys.back().position, p.positions[0]);
  const std::vector<double> row = row_of(result.out, a, 0);
  for (double v : row) ASSERT_TRUE(std::isfinite(v));
  EXPECT_LE(relative_l2(row, row_of(naive(a), a, 0)), 1e-12);
}

TEST(DsaReference, NoVisibleKeyGivesZeros) {
  const uint64_t seed = test::fresh_seed();
  SCOPED_TRACE(test::seed_message(seed));
  DsaProblem p = small_problem(seed);
  const DsaDecodeArgs a = p.host_args(nullptr);
  // Row 0: every region unused (-1). Row 1: a negative position. Row 2: only
  // a region that starts one past the position (its table entry is garbage).
  for (int c = 0; c < a.num_regions; ++c) p.regions[c] = -1;
  p.positions[1] = -1;
  p.positions[2] = 2 * a.block_size - 1;
  p.regions[2 * a.regions_stride] = 2;
  for (int c = 1; c < a.num_regions; ++c) p.regions[2 * a.regions_stride + c] = -1;
  p.block_table[2] = -12345;
  const DsaResult result = reference::dsa_decode(a);
  for (int64_t row : {0, 1, 2}) {
    EXPECT_EQ(result.keys[row], 0) << row;
    EXPECT_EQ(result.active[row], 1) << row;
    for (double v : row_of(result.out, a, row)) ASSERT_EQ(v, 0.0) << row;
  }
  expect_meaningful(result);
}

// Ids outside [0, max_blocks), negative ids other than -1 and table entries
// outside [0, pages) are masked like -1; a repeated region counts twice.
TEST(DsaReference, MaskedIdsAndRepeatedRegions) {
  const uint64_t seed = test::fresh_seed();
  SCOPED_TRACE(test::seed_message(seed));
  DsaProblem p = small_problem(seed);
  const DsaDecodeArgs a = p.host_args(nullptr);
  const int32_t last = attend_current_block(p, seed);
  const int64_t visible = p.positions[0] % a.block_size + 1;
  const DsaResult baseline = reference::dsa_decode(a);
  ASSERT_EQ(baseline.keys[0], visible);
  for (int32_t bad : {a.max_blocks, a.max_blocks + 100, -2, -1000}) {
    p.regions[1] = bad;
    EXPECT_EQ(reference::dsa_decode(a).out, baseline.out) << "id " << bad;
  }
  p.regions[1] = -1;
  const int32_t saved = p.block_table[last];
  for (int32_t page : {-1, static_cast<int32_t>(p.pages), static_cast<int32_t>(p.pages) + 7}) {
    p.block_table[last] = page;
    EXPECT_EQ(reference::dsa_decode(a).keys[0], 0) << "page " << page;
  }
  p.block_table[last] = saved;
  p.regions[a.num_regions - 1] = last;  // the same region in two columns
  const DsaResult twice = reference::dsa_decode(a);
  EXPECT_EQ(twice.keys[0], 2 * visible);
  EXPECT_LE(relative_l2(row_of(twice.out, a, 0), row_of(naive(a), a, 0)), 1e-12);
}

TEST(DsaReference, InactiveRowsReadNothing) {
  const uint64_t seed = test::fresh_seed();
  SCOPED_TRACE(test::seed_message(seed));
  DsaProblemConfig c = shape(3, 2, 2, 6, 8, 5, 8, DType::kFloat8E4M3, true, DsaGateDType::kFloat32, true);
  c.inactive_fraction = 0.5;
  c.seed = seed;
  const DsaProblem p = make_dsa_problem(c);  // inactive rows: NaN q and gate, garbage regions and positions
  const DsaDecodeArgs a = p.host_args(nullptr);
  const DsaResult result = reference::dsa_decode(a);
  expect_meaningful(result);
  for (int64_t r = 0; r < a.num_rows; ++r) {
    EXPECT_EQ(result.active[r], p.active[r] != 0 ? 1 : 0);
    if (!p.active[r]) EXPECT_EQ(result.keys[r], 0);
  }
  EXPECT_LE(relative_l2(result.out, naive(a)), 1e-12);
}

TEST(DsaReference, GateIsTheRoundedSigmoid) {
  for (DsaGateDType gate_dtype : {DsaGateDType::kBFloat16, DsaGateDType::kFloat32}) {
    const uint64_t seed = test::fresh_seed();
    SCOPED_TRACE(test::seed_message(seed));
    DsaProblemConfig c = shape(2, 1, 2, 8, 8, 4, 8, DType::kBFloat16, true, gate_dtype, false);
    c.seed = seed;
    const DsaProblem p = make_dsa_problem(c);
    DsaDecodeArgs a = p.host_args(nullptr);
    const DsaResult gated = reference::dsa_decode(a);
    a.gate = nullptr;
    const DsaResult plain = reference::dsa_decode(a);
    a.gate = p.gate.data();
    expect_meaningful(plain);
    for (int64_t r = 0; r < a.num_rows; ++r) {
      if (!p.active[r]) continue;  // its gate is NaN: never read
      for (int h = 0; h < a.num_heads; ++h) {
        const double g = reference::dsa_gate(a, r, h);
        EXPECT_TRUE(g > 0.0 && g <= 1.0);
        if (gate_dtype == DsaGateDType::kBFloat16) {
          EXPECT_EQ(reference::decode_bf16(reference::encode_bf16(g)), g);
        } else {
          EXPECT_EQ(static_cast<double>(static_cast<float>(g)), g);
        }
        const size_t begin = row_begin(a, r) + static_cast<size_t>(h) * kDsaHeadDim;
        for (int d = 0; d < kDsaHeadDim; ++d) ASSERT_EQ(gated.out[begin + d], plain.out[begin + d] * g);
      }
    }
  }
}

// Powers of two move exactly through the formula: k_scale * 2 is scale * 2,
// v_scale * 2 doubles the output.
TEST(DsaReference, Fp8Scales) {
  const uint64_t seed = test::fresh_seed();
  SCOPED_TRACE(test::seed_message(seed));
  DsaProblem p = small_problem(seed, DType::kFloat8E4M3);
  const DsaDecodeArgs a = p.host_args(nullptr);  // k_scale and v_scale point into p
  const DsaResult base = reference::dsa_decode(a);
  expect_meaningful(base);
  EXPECT_LE(relative_l2(base.out, naive(a)), 1e-12);
  DsaDecodeArgs doubled_scale = a;
  doubled_scale.scale = a.scale * 2.0f;
  const DsaResult s2 = reference::dsa_decode(doubled_scale);
  p.k_scale *= 2.0f;
  const DsaResult k2 = reference::dsa_decode(a);
  p.k_scale /= 2.0f;
  EXPECT_EQ(k2.out, s2.out);
  EXPECT_NE(k2.out, base.out);
  p.v_scale *= 2.0f;
  const DsaResult v2 = reference::dsa_decode(a);
  for (size_t i = 0; i < base.out.size(); ++i) ASSERT_EQ(v2.out[i], 2.0 * base.out[i]);
}

// Rows of a request share its table row; the next request's table does not
// change them.
TEST(DsaReference, RequestsShareATableRow) {
  const uint64_t seed = test::fresh_seed();
  SCOPED_TRACE(test::seed_message(seed));
  DsaProblem p = small_problem(seed);
  const DsaDecodeArgs a = p.host_args(nullptr);
  const DsaResult before = reference::dsa_decode(a);
  for (int g = 0; g < a.max_blocks; ++g) p.block_table[a.block_table_stride + g] = -1;  // request 1
  const DsaResult after = reference::dsa_decode(a);
  const int64_t rows_per_request = int64_t{a.num_groups} * a.query_len;
  for (int64_t r = 0; r < a.num_rows; ++r) {
    if (r < rows_per_request) {
      EXPECT_EQ(after.keys[r], before.keys[r]);
    } else {
      EXPECT_EQ(after.keys[r], 0);
    }
  }
  const size_t split = row_begin(a, rows_per_request);
  EXPECT_TRUE(std::equal(before.out.begin(), before.out.begin() + split, after.out.begin()));
}

// The split + combine emulation differs from the exact result only by the
// float32 partials, whatever the number of splits.
TEST(DsaReference, SplitCombineMatches) {
  const uint64_t seed = test::fresh_seed();
  SCOPED_TRACE(test::seed_message(seed));
  DsaProblemConfig c = shape(3, 2, 2, 16, 8, 12, 16, DType::kFloat8E4M3, true, DsaGateDType::kBFloat16, false);
  c.seed = seed;
  DsaProblem p = make_dsa_problem(c);
  for (int32_t splits : {1, 2, 3, 5, 12, 32}) {
    p.config.splits = splits;
    const DsaDecodeArgs a = p.host_args(nullptr);
    const DsaResult exact = reference::dsa_decode(a);
    const DsaResult split = reference::dsa_decode_split_combine(a);
    expect_meaningful(split);
    EXPECT_EQ(split.keys, exact.keys);
    EXPECT_LE(relative_l2(split.out, exact.out), 1e-6) << "splits " << splits;
    for (int64_t r = 0; r < a.num_rows; ++r) {
      if (exact.keys[r] != 0) continue;
      for (int i = 0; i < a.num_heads * kDsaHeadDim; ++i) ASSERT_EQ(split.out[row_begin(a, r) + i], 0.0);
    }
  }
}

// The CPU backend writes the reference rounded to BF16 (nearest even) at the
// output strides; it ignores `splits` (one exact softmax), which the equal
// bits across splits pin; inactive rows are zeroed with clear_inactive and
// untouched without; the padding is never written.
TEST(DsaHostBackend, WritesTheRoundedReference) {
  for (bool clear : {true, false}) {
    const uint64_t seed = test::fresh_seed();
    SCOPED_TRACE(test::seed_message(seed));
    DsaProblemConfig c = shape(3, 2, 2, 5, 8, 6, 10, DType::kFloat8E4M3, true, DsaGateDType::kBFloat16, true);
    c.inactive_fraction = 0.3;
    c.clear_inactive = clear;
    c.seed = seed;
    DsaProblem p = make_dsa_problem(c);
    DsaDecodeArgs a = p.host_args(nullptr);
    a.out_head_stride = kDsaHeadDim + 8;
    a.out_row_stride = a.num_heads * a.out_head_stride + 24;
    std::vector<uint16_t> first;
    for (int32_t splits : {1, 7, 32}) {
      a.splits = splits;
      std::vector<uint16_t> out(static_cast<size_t>(a.num_rows) * a.out_row_stride, test::kOutPoison);
      a.out = out.data();
      const Status status = dsa_decode(a, nullptr, 0, nullptr);
      ASSERT_TRUE(status.ok()) << status.message();
      const DsaResult ref = reference::dsa_decode(a);
      expect_meaningful(ref);
      for (int64_t r = 0; r < a.num_rows; ++r) {
        for (int64_t e = 0; e < a.out_row_stride; ++e) {
          const int64_t h = e / a.out_head_stride, d = e % a.out_head_stride;
          const uint16_t got = out[r * a.out_row_stride + e];
          if (h >= a.num_heads || d >= kDsaHeadDim || (!p.active[r] && !clear)) {
            ASSERT_EQ(got, test::kOutPoison) << "row " << r << " element " << e;
          } else {
            ASSERT_EQ(got, reference::encode_bf16(ref.out[row_begin(a, r) + h * kDsaHeadDim + d]))
                << "row " << r << " element " << e;
          }
        }
      }
      if (first.empty()) first = out;
      EXPECT_EQ(out, first) << "splits " << splits;
    }
  }
}

}  // namespace
}  // namespace sparse_decode
