// The workspace of dsv4_decode_hca on the GPU: none for zero tokens (nothing
// launched or written); section 1's on the same rows, optional as there.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <string>
#include <tuple>
#include <vector>

#include "gpu/dsv4_hca/checks.h"
#include "support/test_support.h"

namespace sparse_decode::gpu_test::dsv4_hca {
namespace {

// T = 0: Ok, workspace 0, nothing launched or written.
TEST_F(Dsv4HcaGpu, ZeroTokensWritesNothing) {
  const uint64_t seed = test::fresh_seed();
  SCOPED_TRACE(test::seed_message(seed));
  const Dsv4HcaProblem p = testing::make_dsv4_hca_problem(small_config(seed, 64));
  DeviceProblem d(p);
  prepare_outputs(d);
  Dsv4HcaDecodeArgs args = d.hca;
  args.num_tokens = 0;
  EXPECT_EQ(workspace_size(args), 0u);
  EXPECT_TRUE(supports(args).ok()) << supports(args).message();
  const Status status = dsv4_decode_hca(args, nullptr, 0, nullptr);
  EXPECT_TRUE(status.ok()) << status.message();
  const DeviceResult r = download(d);
  EXPECT_TRUE(std::all_of(r.out.begin(), r.out.end(), [](uint16_t b) { return b == 0xFFFF; }));
  EXPECT_EQ(r.count, kCountStart);
}

// The workspace serves the split path as in dsv4_decode: too small, null
// or misaligned, the call runs without it, with the same bits (every
// kernel of a head group size gives the same bits), and leaves it untouched.
// At 6 and 20 tokens kAuto picks the split path where the workspace fits.
TEST_F(Dsv4HcaGpu, AnyWorkspaceGivesTheSameBits) {
  const uint64_t seed = test::fresh_seed();
  SCOPED_TRACE(test::seed_message(seed));
  for (int64_t tokens : {int64_t{6}, int64_t{20}, int64_t{96}}) {
    SCOPED_TRACE(::testing::Message() << tokens << " tokens");
    Dsv4HcaProblemConfig c = small_config(seed + tokens, 61);
    c.tokens = tokens;
    c.q_len = 2;
    c.max_pages = 14;  // W' = 128 + 854 -> 984: groups of one chunk, the split path up to ~37 units
    c.compressed_pages = 21;
    const Dsv4HcaProblem p = testing::make_dsv4_hca_problem(c);
    DeviceProblem d(p);
    const DeviceResult want = run_section1(d);
    const size_t bytes = workspace_size(d.hca);
    EXPECT_EQ(bytes, workspace_size(d.section1));
    if (tokens <= 20) EXPECT_GT(bytes, 0u) << "kAuto picks the split path: the cases below run without it";
    expect_same_bits(run_hca(d), want, "workspace_size(args) bytes");
    const size_t smaller = bytes > 0 ? bytes - 1 : 0;
    DeviceBuffer workspace = poisoned_workspace(bytes + 16);
    for (const auto& [pointer, given, what] :
         {std::tuple{workspace.get(), smaller, "one byte short"},
          std::tuple{static_cast<void*>(static_cast<uint8_t*>(workspace.get()) + 4), bytes, "misaligned"},
          std::tuple{static_cast<void*>(nullptr), size_t{0}, "null"}}) {
      prepare_outputs(d);
      const Status status = dsv4_decode_hca(d.hca, pointer, given, nullptr);
      ASSERT_TRUE(status.ok()) << what << ": " << status.message();
      expect_same_bits(download(d), want, what);
    }
    const std::vector<uint8_t> after = workspace.download<uint8_t>();
    EXPECT_TRUE(std::all_of(after.begin(), after.end(), [](uint8_t b) { return b == kWorkspacePoison; }))
        << "a workspace too small for the split path is not written";
  }
}

}  // namespace
}  // namespace sparse_decode::gpu_test::dsv4_hca
