// Makes sure the benchmark does not time garbage: runs one layer's decode
// once and compares its first tokens with the fp64 reference, computed on the
// host from copies of that layer's q, indices, sinks and the rows they name.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "bench/accuracy.h"
#include "sparse_decode/dsv4_decode.h"

struct CUstream_st;

namespace sparse_decode::bench {

struct LayerCheck {
  int64_t tokens_checked = 0;
  OutputComparison first_tokens;  // the first tokens_checked tokens against the reference
  OutputHealth whole_output;      // every token of the layer: finite, not all zero

  bool passes() const { return first_tokens.passes() && whole_output.nonfinite == 0 && whole_output.any_nonzero; }
  std::string summary() const;
};

// The output half of a check, shared by both layouts: waits for `stream` (on
// which the decode ran), downloads out [tokens, heads, 512] (it must be
// contiguous: token stride heads * 512, head stride 512, else it throws) and
// compares its first min(tokens, max_tokens) tokens with `reference(n)`, the
// fp64 reference of the first n tokens.
LayerCheck check_output(const void* out, int64_t out_token_stride, int64_t out_head_stride, int64_t tokens,
                        int32_t heads, int64_t max_tokens, CUstream_st* stream,
                        const std::function<std::vector<double>(int64_t)>& reference);

// `args`: device memory, contiguous out [T, H, 512], no seq_lens. Runs
// dsv4_decode on `stream` once (throws if it fails) and checks the output.
LayerCheck check_layer(const Dsv4DecodeArgs& args, int64_t max_tokens, CUstream_st* stream);

}  // namespace sparse_decode::bench
