// The double-precision CPU implementation of SPEC section 1: the oracle of
// every test and the CPU backend of dsv4_decode for host memory.
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "sparse_decode/dsv4_decode.h"

namespace sparse_decode::reference {

struct Dsv4Result {
  std::vector<double> out;   // [T, H, 512]
  std::vector<double> lse;   // [T, H]; -inf for a token with no active column
  int64_t out_of_range = 0;  // active columns whose index is past its pool
};

// Computes SPEC section 1 from host pointers (args.memory is not looked at;
// args.out, args.lse and args.out_of_range_count are not written).
Dsv4Result dsv4_decode(const Dsv4DecodeArgs& args);

// Whether column `column` of token `token` takes part in the softmax, and the
// row it names. Shared by the reference and the tests that build edge cases.
struct ColumnState {
  bool active = false;
  bool out_of_range = false;  // would be active but its index is past its pool
  const KvPool* pool = nullptr;
  int64_t row = -1;
};
ColumnState dsv4_column(const Dsv4DecodeArgs& args, int64_t token, int32_t column);

// Runs dsv4_decode() and writes args.out (BF16, nearest even), args.lse and
// adds to *args.out_of_range_count: the CPU backend.
void dsv4_decode_host(const Dsv4DecodeArgs& args);

// ---------------------------------------------------------------------------
// The parts shared with the packed-row reference (dsv4_packed_reference.h):
// once the active rows of a token are decoded to doubles, both operations
// compute the same softmax and write their results the same way.

// One head of one token: the softmax of SPEC section 1 of q [512] over `rows`
// decoded rows kv [rows, 512] (key = value). Adds the output to out [512]
// (zero on entry) and returns lse; with no rows, out stays zero and lse is -inf.
double attend(const double* q, const double* kv, size_t rows, double bmm1, double bmm2, double sink, double* out);

// lse with the sink term: log(exp(lse) + exp(sink)) (the sink alone for lse =
// -inf, +inf for a sink of +inf).
double lse_with_sink(double lse, double sink);

// The token loop of every section: for each of `tokens` tokens, `gather(t,
// kv)` appends the token's active rows, decoded, to kv [rows, 512] (empty on
// entry; every head reads them) and returns how many active columns it found
// past their pool; with at least one row, `load_q(t, h, q)` decodes q [512]
// of each head and attend() gives its output and lse (sink: sinks[h], or none
// without sinks or with SinkTerm::kNone). A token without rows keeps zeros
// and lse = -inf; with SinkTerm::kInOutputAndLse every lse counts the sink
// (lse_with_sink). Tokens run on the machine's threads where `width` (the
// most rows a token can have) makes the call long enough; gather and load_q
// are called from several threads at once, and the bits do not change.
Dsv4Result attend_tokens(int64_t tokens, int heads, int64_t width, double bmm1, double bmm2, const float* sinks,
                         SinkTerm sink_term, const std::function<int64_t(int64_t token, std::vector<double>& kv)>& gather,
                         const std::function<void(int64_t token, int head, double* q)>& load_q);

// Where a call's outputs go: out [T, H, 512] BF16 and lse [T, H] (may be
// null) at their strides, as flat arguments or request views (q_len), and
// the counter (may be null). The arguments of sections 1, 2 and 3 name them alike.
struct HostOutputs {
  void* out;
  int64_t out_token_stride, out_head_stride, out_request_stride;
  float* lse;
  int64_t lse_token_stride, lse_request_stride;
  int32_t q_len;
  int32_t* out_of_range_count;
};
template <typename Args>
HostOutputs host_outputs(const Args& args) {
  return {args.out,       args.out_token_stride,   args.out_head_stride, args.out_request_stride,
          args.lse,       args.lse_token_stride,   args.lse_request_stride, args.q_len,
          args.out_of_range_count};
}

// Writes `result` as BF16 out (nearest even) and float32 lse (if not null),
// and adds result.out_of_range to *out_of_range_count (if not null).
void write_host_outputs(const Dsv4Result& result, int64_t tokens, int heads, const HostOutputs& outputs);

}  // namespace sparse_decode::reference
