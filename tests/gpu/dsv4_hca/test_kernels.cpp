// dsv4_decode_hca on the GPU over random problems: page sizes, uniform and
// varlen requests, head counts and batch sizes that make kAuto pick each
// section-1 kernel; equal to section 1 on the expansion and to the fp64
// reference (checks.h).
#include <gtest/gtest.h>

#include <cstdint>
#include <ostream>
#include <string>

#include "gpu/dsv4_hca/checks.h"
#include "support/test_support.h"

namespace sparse_decode::gpu_test::dsv4_hca {
namespace {

// Random problems over the page sizes, uniform and varlen, at several head
// counts and batch sizes (so that kAuto picks the cluster, split and stream
// kernels, and 64-head tiles at H = 64, 128 where W' <= 1024).

struct RandomCase {
  int64_t page_size;
  int heads;
  int64_t tokens;
  int q_len;
  bool varlen;
  double holes;
  int32_t max_pages;  // 0: small_config's
};

void PrintTo(const RandomCase& c, std::ostream* os) {
  *os << "page_size " << c.page_size << " heads " << c.heads << " tokens " << c.tokens << " q_len " << c.q_len
      << (c.varlen ? " varlen" : "") << " holes " << c.holes << " max_pages " << c.max_pages;
}

class Dsv4HcaGpuRandom : public Dsv4HcaGpu, public ::testing::WithParamInterface<RandomCase> {};

TEST_P(Dsv4HcaGpuRandom, EqualsSection1OnTheExpansion) {
  const RandomCase& rc = GetParam();
  const uint64_t seed = test::fresh_seed();
  SCOPED_TRACE(test::seed_message(seed));
  Dsv4HcaProblemConfig c = small_config(seed, rc.page_size);
  c.heads = rc.heads;
  c.tokens = rc.tokens;
  c.q_len = rc.q_len;
  c.varlen = rc.varlen;
  c.hole_fraction = rc.holes;
  if (rc.max_pages > 0) {
    c.max_pages = rc.max_pages;
    c.compressed_pages = rc.max_pages + rc.max_pages / 2;
  }
  const Dsv4HcaProblem p = testing::make_dsv4_hca_problem(c);
  check_problem(p);
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, Dsv4HcaGpuRandom,
    ::testing::Values(RandomCase{1, 16, 6, 3, false, 0.0, 0}, RandomCase{2, 8, 8, 2, true, 0.1, 0},
                      RandomCase{61, 16, 7, 4, true, 0.0, 0}, RandomCase{64, 32, 12, 4, false, 0.2, 0},
                      RandomCase{256, 16, 6, 6, true, 0.0, 0}, RandomCase{64, 128, 2, 1, false, 0.0, 0},
                      RandomCase{61, 64, 9, 3, false, 0.3, 0}, RandomCase{64, 64, 4, 2, true, 0.0, 12},
                      // Many tokens: the stream kernel (and the split path in between).
                      RandomCase{64, 16, 256, 4, false, 0.05, 0}, RandomCase{2, 16, 300, 5, true, 0.0, 0},
                      RandomCase{61, 128, 96, 2, false, 0.0, 0},
                      // Wide: W' = 128 + 16384, section 1's widest table.
                      RandomCase{64, 16, 4, 2, false, 0.0, 256}, RandomCase{256, 16, 20, 4, true, 0.0, 64}),
    [](const auto& info) { return "case" + std::to_string(info.index); });

}  // namespace
}  // namespace sparse_decode::gpu_test::dsv4_hca
