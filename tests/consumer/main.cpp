// Runs one small host-memory decode through the installed public API and
// checks it against its closed form; exits 0 on success.
//
// T = 1 token, H = 8 heads, W = 128 (SWA only). Every row of the pool holds
// 0.5 in FP8 E4M3 (0x30) and q holds 1.0 (0x38), so each score is
// bmm1 * 512 * 0.5 = 4 with bmm1 = 1/64. Two columns name rows 3 and 5, one
// names row 100 (past the 8-row pool: masked and counted), the rest are -1.
// Equal rows give out = bmm2 * 0.5 = 1.0 (BF16 0x3F80), lse = 4 + log(2).
#include <cmath>
#include <cstdint>
#include <cstdio>

#include "sparse_decode/dsv4_decode.h"

namespace sd = sparse_decode;

int main() {
  constexpr int kHeads = 8, kWidth = 128, kRows = 8;
  alignas(16) static uint8_t q[kHeads * sd::kHeadDim];
  alignas(16) static uint8_t pool[kRows * sd::kHeadDim];
  alignas(16) static int32_t indices[kWidth];
  alignas(16) static uint16_t out[kHeads * sd::kHeadDim];
  alignas(16) static float lse[kHeads];
  for (auto& v : q) v = 0x38;     // 1.0
  for (auto& v : pool) v = 0x30;  // 0.5
  for (auto& v : indices) v = -1;
  indices[0] = 3, indices[7] = 5, indices[9] = 100;
  for (auto& v : out) v = 0xFFFF;  // NaN: an unwritten element shows
  for (auto& v : lse) v = NAN;
  int32_t out_of_range = 0;

  sd::Dsv4DecodeArgs args;
  args.memory = sd::MemorySpace::kHost;
  args.dtype = sd::DType::kFloat8E4M3;
  args.num_tokens = 1;
  args.num_heads = kHeads;
  args.q = q;
  args.q_token_stride = kHeads * sd::kHeadDim;
  args.swa_kv = {pool, 2, 4, 4 * sd::kHeadDim, sd::kHeadDim};  // 2 pages of 4 rows
  args.indices = indices;
  args.width = kWidth;
  args.indices_stride = kWidth;
  args.bmm1_scale.value = 1.0f / 64;
  args.bmm2_scale.value = 2.0f;
  args.out = out;
  args.out_token_stride = kHeads * sd::kHeadDim;
  args.lse = lse;
  args.lse_token_stride = kHeads;
  args.out_of_range_count = &out_of_range;

  const sd::Status status = sd::dsv4_decode(args, nullptr, 0, nullptr);
  if (!status.ok()) {
    std::fprintf(stderr, "dsv4_decode failed: %s\n", status.message().c_str());
    return 1;
  }
  int bad = 0;
  for (uint16_t v : out) bad += v != 0x3F80;
  for (float v : lse) bad += std::fabs(v - static_cast<float>(4.0 + std::log(2.0))) > 1e-6f;
  bad += out_of_range != 1;
  // A refused call says why.
  args.num_heads = 12;
  bad += sd::validate(args).code() != sd::StatusCode::kInvalidArgument;
  if (bad) {
    std::fprintf(stderr, "%d wrong results (out[0] = 0x%04x, lse[0] = %f, out_of_range = %d)\n", bad, out[0], lse[0],
                 out_of_range);
    return 1;
  }
  std::printf("sparse_decode consumer: ok\n");
  return 0;
}
