// Varlen requests of dsv4_decode_hca on the GPU: offsets that leave tokens
// outside every request, and enough requests for a search of two rounds.
#include <gtest/gtest.h>

#include <cstdint>

#include "gpu/dsv4_hca/checks.h"
#include "support/dsv4_hca_checks.h"
#include "support/test_support.h"

namespace sparse_decode::gpu_test::dsv4_hca {
namespace {

// Varlen offsets that stop short of T: the last tokens belong to no request
// and read no compressed slot (their window still counts).
TEST_F(Dsv4HcaGpu, TokensOutsideEveryRequest) {
  const uint64_t seed = test::fresh_seed();
  SCOPED_TRACE(test::seed_message(seed));
  Dsv4HcaProblemConfig c = small_config(seed, 64);
  c.tokens = 12;
  c.q_len = 4;
  check_problem(test::with_unheld_tokens(c, 3));
}

// Many requests (varlen): the request search takes more than one round.
TEST_F(Dsv4HcaGpu, ManyVarlenRequests) {
  const uint64_t seed = test::fresh_seed();
  SCOPED_TRACE(test::seed_message(seed));
  Dsv4HcaProblemConfig c = small_config(seed, 2);
  c.varlen = true;
  c.q_len = 2;
  c.tokens = 600;  // about 400 requests: 128-ary search in two rounds
  c.heads = 8;
  const Dsv4HcaProblem p = testing::make_dsv4_hca_problem(c);
  ASSERT_GT(p.num_requests, 128);
  check_problem(p);
}

}  // namespace
}  // namespace sparse_decode::gpu_test::dsv4_hca
