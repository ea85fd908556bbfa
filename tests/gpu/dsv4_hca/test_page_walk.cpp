// The page walk of dsv4_decode_hca (section 1's kernels reading the HCA
// metadata, src/dsv4/steps/column_source.cuh) over the batch sizes that make
// kAuto pick every kernel of both head group sizes: bit for bit dsv4_decode
// on the host-side expansion, with pages and rows past the pools counted
// exactly, and the same workspace_size. Large batches compare bits only (the
// fp64 reference of 2048 tokens would take minutes); the other suites of
// this folder check the reference.
#include <gtest/gtest.h>

#include <cstdint>
#include <ostream>
#include <random>
#include <string>

#include "gpu/dsv4_hca/checks.h"
#include "support/dsv4_hca_checks.h"
#include "support/test_support.h"

namespace sparse_decode::gpu_test::dsv4_hca {
namespace {

struct WalkCase {
  int64_t page_size;
  int32_t max_pages;  // W' = 128 + max_pages * page_size, rounded up to 4
  int heads;
  int64_t tokens;
  bool varlen;
};

void PrintTo(const WalkCase& c, std::ostream* os) {
  *os << "page_size " << c.page_size << " max_pages " << c.max_pages << " heads " << c.heads << " tokens "
      << c.tokens << (c.varlen ? " varlen" : "");
}

class Dsv4HcaGpuPageWalk : public Dsv4HcaGpu, public ::testing::WithParamInterface<WalkCase> {};

// Holes, short windows and lens, pages and rows past the pools and negative
// ones (break_active_ids: its count is SPEC section 3's rule, straight).
TEST_P(Dsv4HcaGpuPageWalk, EqualsSection1OnTheExpansion) {
  const WalkCase& wc = GetParam();
  const uint64_t seed = test::fresh_seed();
  SCOPED_TRACE(test::seed_message(seed));
  Dsv4HcaProblemConfig c = small_config(seed, wc.page_size);
  c.heads = wc.heads;
  c.tokens = wc.tokens;
  c.q_len = wc.varlen ? 5 : 1;
  c.varlen = wc.varlen;
  c.max_pages = wc.max_pages;
  c.compressed_pages = wc.max_pages * 2;
  c.hole_fraction = 0.05;
  Dsv4HcaProblem p = testing::make_dsv4_hca_problem(c);
  std::mt19937_64 rng(seed ^ 0x5DEECE66Dull);
  const int64_t out_of_range = test::break_active_ids(p, rng);
  DeviceProblem d(p);
  const DeviceResult hca = run_hca(d);
  const DeviceResult section1 = run_section1(d);
  expect_same_bits(hca, section1, "dsv4_decode_hca vs dsv4_decode on the expansion");
  EXPECT_EQ(hca.count, kCountStart + out_of_range) << "out_of_range_count";
  if (p.config.tokens * p.config.heads <= 64 * 16) {
    const reference::Dsv4Result ref = reference::dsv4_decode_hca(p.host_args(nullptr, nullptr));
    expect_matches_reference(hca, ref, p.config.tokens, p.config.heads, "dsv4_decode_hca vs the reference");
  }
}

// W' = 640 and 2176 (the benchmark widths), 616 (page size 61) and the
// other page sizes; T from 1 to 2048: the cluster, split and stream kernels,
// the deep one with and without P V warps, the halves; 64-head tiles at H =
// 64, 128 where W' <= 1024.
INSTANTIATE_TEST_SUITE_P(
    Batches, Dsv4HcaGpuPageWalk,
    ::testing::Values(WalkCase{64, 8, 16, 1, false}, WalkCase{64, 8, 16, 6, false}, WalkCase{64, 8, 16, 12, false},
                      WalkCase{64, 8, 16, 48, false}, WalkCase{64, 8, 16, 128, false},
                      WalkCase{64, 8, 16, 512, false}, WalkCase{64, 8, 16, 2048, false},
                      WalkCase{64, 32, 16, 1, false}, WalkCase{64, 32, 16, 12, false},
                      WalkCase{64, 32, 16, 128, false}, WalkCase{64, 32, 16, 512, true},
                      WalkCase{64, 32, 16, 2048, false}, WalkCase{61, 8, 8, 7, true}, WalkCase{61, 8, 32, 133, false},
                      WalkCase{64, 8, 64, 3, false}, WalkCase{64, 8, 64, 200, false}, WalkCase{64, 8, 128, 1, false},
                      WalkCase{64, 8, 128, 96, true}, WalkCase{64, 32, 128, 40, false}, WalkCase{1, 300, 16, 9, true},
                      WalkCase{2, 150, 16, 300, false}, WalkCase{256, 2, 16, 20, false},
                      WalkCase{256, 64, 16, 6, false}),
    [](const auto& info) { return "case" + std::to_string(info.index); });

// Tokens that no request holds (varlen offsets that stop short of T): no
// compressed slot, as in the expansion.
TEST_F(Dsv4HcaGpu, PageWalkTokensOfNoRequest) {
  const uint64_t seed = test::fresh_seed();
  SCOPED_TRACE(test::seed_message(seed));
  Dsv4HcaProblemConfig c = small_config(seed, 61);
  c.tokens = 20;
  c.q_len = 4;
  check_problem(test::with_unheld_tokens(c, 3));
}

}  // namespace
}  // namespace sparse_decode::gpu_test::dsv4_hca
