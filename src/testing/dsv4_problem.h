// Synthetic DeepSeek-V4-shaped decode problems on the host, for the tests,
// the demo and the benchmark: random non-zero FP8/BF16 data, consecutive
// sliding-window rows per request, scattered top-k rows, and every KV row
// that no active column names filled with NaN.
#pragma once

#include <cstdint>
#include <random>
#include <vector>

#include "sparse_decode/dsv4_decode.h"

namespace sparse_decode::testing {

struct Dsv4ProblemConfig {
  int64_t tokens = 6;              // T
  int32_t heads = 16;              // H
  int32_t width = 640;             // W = 128 SWA + top-k columns
  DType dtype = DType::kFloat8E4M3;
  int32_t q_len = 6;               // query tokens per request (T % q_len == 0 is not required)
  int64_t swa_rows = 4096;         // rows of the SWA pool (the last quarter is never active: NaN)
  int64_t compressed_rows = 8192;  // rows of the compressed pool (last quarter NaN too)
  int64_t page_size = 64;          // rows per page of both pools
  int64_t row_stride = kHeadDim;   // elements between rows, >= 512
  int64_t page_gap = 0;            // extra elements between pages (page_stride - page_size*row_stride)
  bool sinks = true;               // draw sinks [H] from N(0, 1)
  bool lens = true;                // per-token lens drawn in [W/2, W]; else lens = W, no array
  double hole_fraction = 0.0;      // fraction of active top-k columns set to -1
  uint64_t seed = 1;
};

struct Dsv4Problem {
  Dsv4ProblemConfig config;
  std::vector<uint8_t> q;              // [T, H, 512] elements of dtype, contiguous
  std::vector<uint8_t> swa_kv;         // pages * page_stride elements of dtype
  std::vector<uint8_t> compressed_kv;  // pages * page_stride elements of dtype
  std::vector<int32_t> indices;        // [T, W]
  std::vector<int32_t> lens;           // [T] (empty when config.lens is false)
  std::vector<float> sinks;            // [H] (empty when config.sinks is false)
  float bmm1_scale = 0.0f;
  float bmm2_scale = 1.0f;

  int64_t page_stride() const { return config.page_size * config.row_stride + config.page_gap; }
  int64_t element_bytes() const { return config.dtype == DType::kFloat8E4M3 ? 1 : 2; }

  // Arguments over this problem's host vectors; out [T, H, 512] BF16 and lse
  // [T, H] (may be null) are contiguous buffers of the caller.
  Dsv4DecodeArgs host_args(void* out, float* lse) const;

  // Sets row `row` of a pool to fresh random values (used by tests that make
  // a masked column's row active).
  void fill_row(bool compressed, int64_t row, uint64_t seed);
};

Dsv4Problem make_dsv4_problem(const Dsv4ProblemConfig& config);

// A random value rounded to the problem dtype, stored little-endian in `bytes`.
void encode_element(DType dtype, double value, uint8_t* bytes);

// The argument fields the dsv4 operations share (Dsv4DecodeArgs,
// Dsv4PackedDecodeArgs, Dsv4HcaDecodeArgs), over a problem's host vectors:
// host memory, q [tokens, heads, 512] contiguous, sinks [heads] (null when
// empty), and the caller's contiguous out [tokens, heads, 512] BF16 and lse
// [tokens, heads] (may be null).
template <typename Args>
void set_contiguous_host_args(Args& args, int64_t tokens, int heads, const void* q, const std::vector<float>& sinks,
                              void* out, float* lse) {
  args.memory = MemorySpace::kHost;
  args.num_tokens = tokens;
  args.num_heads = heads;
  args.q = q;
  args.q_token_stride = int64_t{heads} * kHeadDim;
  args.q_head_stride = kHeadDim;
  args.sinks = sinks.empty() ? nullptr : sinks.data();
  args.out = out;
  args.out_token_stride = int64_t{heads} * kHeadDim;
  args.out_head_stride = kHeadDim;
  args.lse = lse;
  args.lse_token_stride = heads;
}

// Sinks [heads] drawn from `normal` (the generator's own distribution, so
// that its stream is unchanged), or none when `draw` is false.
std::vector<float> draw_sinks(bool draw, int heads, std::mt19937_64& rng, std::normal_distribution<double>& normal);

}  // namespace sparse_decode::testing
