// The expand kernel of dsv4_decode_hca (src/dsv4_hca/expand.cu) on the GPU,
// alone: the section-1 table it writes, read back from the workspace.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <vector>

#include "gpu/dsv4_hca/checks.h"
#include "support/test_support.h"

namespace sparse_decode::gpu_test::dsv4_hca {
namespace {

// The expand kernel alone: the table and lens it writes in the workspace are
// expand_to_section1's, entry for entry. The layout: section 1's split scratch
// (workspace_size of the expansion, rounded up to 16), the table [T, W'],
// then lens [T].

TEST_F(Dsv4HcaGpu, ExpandedTableIsExpandToSection1) {
  for (int64_t page_size : kPageSizes) {
    for (bool varlen : {false, true}) {
      const uint64_t seed = test::fresh_seed();
      SCOPED_TRACE(test::seed_message(seed));
      SCOPED_TRACE(::testing::Message() << "page_size " << page_size << (varlen ? " varlen" : " uniform"));
      Dsv4HcaProblemConfig c = small_config(seed, page_size);
      c.varlen = varlen;
      c.q_len = varlen ? 4 : 3;
      c.tokens = 9;
      c.hole_fraction = 0.1;
      const Dsv4HcaProblem p = testing::make_dsv4_hca_problem(c);
      DeviceProblem d(p);
      DeviceBuffer workspace;
      run_hca(d, nullptr, &workspace);
      const size_t scratch = (workspace_size(d.section1) + 15) / 16 * 16;
      const int32_t W = d.expansion.width;
      const size_t table_bytes = static_cast<size_t>(c.tokens) * W * 4;
      ASSERT_GE(workspace.bytes(), scratch + table_bytes + c.tokens * 4);
      std::vector<uint8_t> bytes = workspace.download<uint8_t>();
      std::vector<int32_t> table(static_cast<size_t>(c.tokens) * W), lens(c.tokens);
      std::memcpy(table.data(), bytes.data() + scratch, table_bytes);
      std::memcpy(lens.data(), bytes.data() + scratch + table_bytes, lens.size() * 4);
      for (int64_t t = 0; t < c.tokens; ++t) {
        EXPECT_EQ(lens[t], d.expansion.lens[t]) << "lens of token " << t;
        for (int32_t col = 0; col < W; ++col) {
          ASSERT_EQ(table[t * W + col], d.expansion.indices[t * W + col]) << "token " << t << " column " << col;
        }
      }
    }
  }
}

}  // namespace
}  // namespace sparse_decode::gpu_test::dsv4_hca
