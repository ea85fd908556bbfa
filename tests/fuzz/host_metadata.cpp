// The separate check of inconsistent request metadata that the host can see:
// a decreasing cum_seq_lens_q, offsets below 0 or past the tokens, a request
// count that disagrees with the tokens. Each call must be refused with a
// message naming one of the arguments involved; values in device memory
// are visible to the CPU backend only (a device call may not read them), so
// the device backend is asked only where the shapes alone disagree.
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "fuzz/case.h"
#include "fuzz/data.h"
#include "fuzz/device.h"
#include "sparse_decode/dsv4_decode.h"
#include "sparse_decode/dsv4_decode_hca.h"

namespace sparse_decode::fuzz {
namespace {

constexpr int64_t kTokens = 4;
constexpr int kHeads = 8;

struct Variant {
  const char* what;
  std::vector<int32_t> cum;      // empty: uniform q_len
  int32_t num_requests = 0, q_len = 0;
  std::vector<const char*> names;  // a refusal must name one of these
  bool shape_only = false;         // visible without reading the values: the device call must refuse it too
};

std::vector<Variant> variants() {
  return {
      {"decreasing cum_seq_lens_q", {0, 3, 1, 4}, 3, 0, {"cum_seq_lens_q"}, false},
      {"cum_seq_lens_q ending past the tokens", {0, 2, 6}, 2, 0, {"cum_seq_lens_q", "num_tokens"}, false},
      {"cum_seq_lens_q starting below 0", {-1, 2, 4}, 2, 0, {"cum_seq_lens_q"}, false},
      {"seq_lens of the wrong length (num_requests * q_len != tokens)", {}, 3, 1,
       {"num_tokens", "num_requests", "seq_lens", "q_len"}, true},
  };
}

// A small valid problem with request metadata in an arena: q, a pool of 4
// FP8 rows, a table naming rows 0..3, seq_lens, cum_seq_lens_q, out.
struct Problem {
  Arena arena;
  size_t q, pool, indices, seq_lens, cum = kAbsent, out, block_table, lens, swa_lens, hca_seq_lens;
  Variant v;
};

Problem make_problem(const Variant& v) {
  Problem p;
  p.v = v;
  Rng rng(1);
  p.q = p.arena.add("q", kTokens * kHeads * 512, RegionKind::kInput);
  p.pool = p.arena.add("pool", 4 * 512, RegionKind::kInput);
  for (size_t i = 0; i < kTokens * kHeads * 512; ++i) put_element(DType::kFloat8E4M3, rng.normal(), p.arena.host(p.q) + i);
  for (size_t i = 0; i < 4 * 512; ++i) put_element(DType::kFloat8E4M3, rng.normal(), p.arena.host(p.pool) + i);
  std::vector<int32_t> indices(kTokens * 128), swa_lens(kTokens, 4), lens(kTokens, 130), table(kTokens, 0);
  for (int64_t t = 0; t < kTokens; ++t) {
    for (int c = 0; c < 128; ++c) indices[static_cast<size_t>(t * 128 + c)] = c < 4 ? c : -1;
  }
  p.indices = add_ints(p.arena, "indices", indices);
  p.seq_lens = add_ints(p.arena, "seq_lens", std::vector<int32_t>(static_cast<size_t>(v.num_requests), 20));
  if (!v.cum.empty()) p.cum = add_ints(p.arena, "cum_seq_lens_q", v.cum);
  p.block_table = add_ints(p.arena, "block_table", table);
  p.lens = add_ints(p.arena, "lens", lens);
  p.swa_lens = add_ints(p.arena, "swa_lens", swa_lens);
  p.hca_seq_lens = add_ints(p.arena, "hca_seq_lens", std::vector<int32_t>(static_cast<size_t>(v.num_requests), 130));
  p.out = p.arena.add("out", kTokens * kHeads * 512 * 2, RegionKind::kOutput, 0xFF);
  p.arena.allow(p.out, 0, kTokens * kHeads * 512 * 2);
  return p;
}

KvPool pool_at(const Problem& p, uint8_t* base) {
  KvPool pool;
  pool.data = at<uint8_t>(p.arena, base, p.pool);
  pool.pages = 4;
  pool.page_size = 1;
  pool.page_stride = 512;
  return pool;
}

Dsv4DecodeArgs dsv4_args(const Problem& p, uint8_t* base, MemorySpace memory) {
  Dsv4DecodeArgs a;
  a.memory = memory;
  a.num_tokens = kTokens;
  a.num_heads = kHeads;
  a.q = at<uint8_t>(p.arena, base, p.q);
  a.q_token_stride = kHeads * 512;
  a.swa_kv = pool_at(p, base);
  a.indices = at<int32_t>(p.arena, base, p.indices);
  a.width = 128;
  a.indices_stride = 128;
  a.seq_lens = at<int32_t>(p.arena, base, p.seq_lens);
  a.num_requests = p.v.num_requests;
  a.cum_seq_lens_q = at<int32_t>(p.arena, base, p.cum);
  a.q_len = p.v.q_len;
  a.max_q_len = p.v.cum.empty() ? 0 : 4;
  a.bmm1_scale.value = 0.05f;
  a.out = at<uint16_t>(p.arena, base, p.out);
  a.out_token_stride = kHeads * 512;
  return a;
}

Dsv4HcaDecodeArgs hca_args(const Problem& p, uint8_t* base, MemorySpace memory) {
  Dsv4HcaDecodeArgs a;
  a.memory = memory;
  a.num_tokens = kTokens;
  a.num_heads = kHeads;
  a.q = at<uint8_t>(p.arena, base, p.q);
  a.q_token_stride = kHeads * 512;
  a.swa_kv = pool_at(p, base);
  a.compressed_kv = pool_at(p, base);
  a.swa_rows = at<int32_t>(p.arena, base, p.indices);
  a.swa_lens = at<int32_t>(p.arena, base, p.swa_lens);
  a.block_table = at<int32_t>(p.arena, base, p.block_table);
  a.max_pages = 1;
  a.block_table_stride = 1;
  a.lens = at<int32_t>(p.arena, base, p.lens);
  a.hca_seq_lens = at<int32_t>(p.arena, base, p.hca_seq_lens);
  a.num_requests = p.v.num_requests;
  a.cum_seq_lens_q = at<int32_t>(p.arena, base, p.cum);
  a.q_len = p.v.q_len;
  a.max_q_len = p.v.cum.empty() ? 0 : 4;
  a.bmm1_scale = 0.05f;
  a.out = at<uint16_t>(p.arena, base, p.out);
  a.out_token_stride = kHeads * 512;
  return a;
}

// Whether `s` is a refusal naming one of the variant's arguments.
bool names_one(const Status& s, const Variant& v) {
  if (s.code() != StatusCode::kInvalidArgument) return false;
  for (const char* name : v.names) {
    if (s.message().find(name) != std::string::npos) return true;
  }
  return false;
}

void expect_refusal(const std::string& call, const Status& s, const Variant& v, std::vector<std::string>& problems) {
  if (names_one(s, v)) return;
  std::string names;
  for (const char* name : v.names) names += std::string(names.empty() ? "" : " or ") + name;
  problems.push_back(call + ", " + v.what + ": " + (s.ok() ? "accepted" : "refused: " + s.message()) +
                     " (expected InvalidArgument naming " + names + ")");
}

}  // namespace

std::vector<std::string> host_metadata_check(bool with_device) {
  std::vector<std::string> problems;
  std::unique_ptr<CudaDevice> device;
  if (with_device) device = std::make_unique<CudaDevice>();
  for (const Variant& v : variants()) {
    Problem p = make_problem(v);
    std::vector<uint8_t> copy = p.arena.image();
    expect_refusal("dsv4_decode (CPU)", dsv4_decode(dsv4_args(p, copy.data(), MemorySpace::kHost), nullptr, 0, nullptr),
                   v, problems);
    copy = p.arena.image();
    expect_refusal("dsv4_decode_hca (CPU)",
                   dsv4_decode_hca(hca_args(p, copy.data(), MemorySpace::kHost), nullptr, 0, nullptr), v, problems);
    if (!device || !v.shape_only) continue;
    // A refusal writes nothing; an acceptance would run on real device memory.
    device->reserve(p.arena.size());
    device->upload(p.arena);
    auto* stream = static_cast<CUstream_st*>(device->stream());
    expect_refusal("dsv4_decode (GPU)", dsv4_decode(dsv4_args(p, device->base(), MemorySpace::kDevice), nullptr, 0, stream),
                   v, problems);
    expect_refusal("dsv4_decode_hca (GPU)",
                   dsv4_decode_hca(hca_args(p, device->base(), MemorySpace::kDevice), nullptr, 0, stream), v, problems);
    std::vector<uint8_t> after;
    const std::string fault = device->download(p.arena, after);
    if (!fault.empty()) problems.push_back("device: " + fault);
  }
  return problems;
}

}  // namespace sparse_decode::fuzz
