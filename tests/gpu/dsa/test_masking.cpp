// Masked keys on the GPU: bad ids of every kind, repeated regions, negative
// and extreme positions, table entries outside the pages; against the fp64
// reference at several splits, with the staged and the direct kernel.
#include <gtest/gtest.h>

#include <algorithm>
#include <climits>
#include <cstdint>
#include <random>
#include <string>

#include "gpu/dsa/checks.h"
#include "support/test_support.h"

namespace sparse_decode::gpu_test::dsa {
namespace {

// Ids masked in every way docs/formats/dsa_layout.md decision 6 lists, a
// repeated region (counted twice), negative positions (INT_MIN too) and a
// position of INT_MAX (every slot of its regions visible; no int32 overflow
// in position - first + 1).
DsaProblem masked_problem(uint64_t seed) {
  std::mt19937_64 rng(seed);
  DsaProblemConfig config = config_of(kCases[1], seed);
  config.requests = 4;
  config.query_len = 2;
  config.heads = 4;
  config.block_size = 8;
  config.regions = 6;
  config.max_blocks = 8;
  config.inactive_fraction = 0.0;
  config.empty_fraction = 0.0;
  DsaProblem p = testing::make_dsa_problem(config);
  const int64_t rows = p.rows();
  const int32_t R = config.regions;
  auto row_regions = [&](int64_t r) { return &p.regions[r * p.regions_stride]; };
  // Row 0 keeps what it sees (the problem's one guaranteed row with keys).
  for (int64_t r = 1; r < rows; ++r) {
    int32_t* regions = row_regions(r);
    switch (r % 6) {
      case 1:  // every kind of bad id in the -1 columns, and one repeated region
        for (int32_t c = 0; c < R; ++c) {
          if (regions[c] != -1) continue;
          const int32_t bad[] = {-2, -1000, INT_MIN, config.max_blocks, config.max_blocks + 7, INT_MAX};
          regions[c] = bad[rng() % 6];
        }
        for (int32_t c = 0; c < R; ++c) {
          if (regions[c] >= 0 && regions[c] < config.max_blocks) {
            regions[(c + 1) % R] = regions[c];  // the same region twice (or more)
            break;
          }
        }
        break;
      case 2:
        p.positions[r] = -1;
        break;
      case 3:
        p.positions[r] = INT_MIN;
        break;
      case 4: {  // INT_MAX: every slot of every named block with a valid page
        p.positions[r] = INT_MAX;
        const DsaDecodeArgs a = p.host_args(nullptr);
        for (const reference::DsaKey& key : reference::dsa_visible_keys(a, r)) {
          p.fill_slot(key.page, static_cast<int32_t>(r % config.groups), key.slot, rng());
        }
        break;
      }
      default:
        break;
    }
  }
  // Table entries outside [0, pages) for a visible block of the last request.
  const int64_t last_request = config.requests - 1;
  const int64_t last_row = rows - 1;
  const int32_t visible_block = std::min(config.max_blocks - 1, std::max(0, p.positions[last_row]) / config.block_size);
  p.block_table[last_request * p.block_table_stride + visible_block] = static_cast<int32_t>(p.pages);
  if (visible_block > 0) p.block_table[last_request * p.block_table_stride] = -7;

  return p;
}

TEST_F(DsaGpu, MaskedIdsRepeatedRegionsAndExtremePositions) {
  const uint64_t seed = test::fresh_seed();
  SCOPED_TRACE(test::seed_message(seed));
  const DsaProblem p = masked_problem(seed);
  const int64_t rows = p.rows();
  const reference::DsaResult ref = reference::dsa_decode(p.host_args(nullptr));
  int64_t empty_rows = 0;
  for (int64_t r = 0; r < rows; ++r) empty_rows += ref.keys[r] == 0;
  EXPECT_GT(empty_rows, 0);
  DeviceProblem d(p, false);
  for (DsaKernel kernel : {DsaKernel::kAuto, DsaKernel::kDirect}) {  // the problem is FP8: both kernels
    for (int32_t splits : {1, 2, 5}) {
      DsaDecodeArgs args = d.args;
      args.kernel = kernel;
      args.splits = splits;
      const std::string name = (kernel == DsaKernel::kDirect ? "direct, " : "auto, ") + run_name(splits, false);
      check_output(run(d, args), args, p, ref, name);
    }
  }
}

}  // namespace
}  // namespace sparse_decode::gpu_test::dsa
