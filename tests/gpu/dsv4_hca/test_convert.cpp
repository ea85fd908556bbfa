// convert_page_aligned_indices on the device (src/dsv4_hca/convert_kernel.cu):
// the device's outputs and report equal the host conversion's bit for bit
// (every output array, the padding of every stride, the report), on random
// tables at every page size and on adversarial ones: a table of -1, lens
// past the width, pages at the pool's end and one past it, a block table one
// page short, refusals far apart in a grid of more tokens than CTAs, page
// size 1 and 256 (refused before anything runs). A refused device
// conversion writes nothing but its report. The call is captured in a CUDA
// graph (no allocation, no host synchronization) and replayed on new
// tables, and gives the same bits run after run. Outputs are poisoned
// before every run. Without a CUDA device every test reports SKIPPED.
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <climits>
#include <cstdint>
#include <functional>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "support/dsv4_hca_convert_tables.h"
#include "support/gpu_test_support.h"
#include "support/test_support.h"
#include "testing/device_buffer.h"

namespace sparse_decode::gpu_test::dsv4_hca {
namespace {

using test::ConvertOutputs;
using testing::DeviceBuffer;

class Dsv4HcaConvertGpu : public gpu_test::GpuTest {};

void check(cudaError_t error, const char* what) { testing::check_cuda(static_cast<int>(error), what); }

// A table and poisoned outputs on the device, shaped as `host` (the host
// conversion's outputs, whose strides the device copies).
struct DeviceConvert {
  DeviceConvert(const reference::ConvertInput& in, const ConvertOutputs& host)
      : indices(in.indices),
        lens(in.lens),
        seq_lens(in.seq_lens),
        swa_rows(host.swa_rows.size() * sizeof(int32_t)),
        swa_lens(host.swa_lens.size() * sizeof(int32_t)),
        block_table(host.block_table.size() * sizeof(int32_t)),
        hca_seq_lens(host.hca_seq_lens.size() * sizeof(int32_t)),
        error(kConvertErrorWords * sizeof(int32_t)),
        shape(in, host.swa_rows_stride - 128, host.block_table_stride - in.max_pages) {
    args = test::convert_args(in, shape);
    args.memory = MemorySpace::kDevice;
    args.indices = indices.as<int32_t>();
    args.lens = lens.as<int32_t>();
    args.seq_lens = seq_lens.as<int32_t>();
    args.swa_rows = swa_rows.as<int32_t>();
    args.swa_lens = swa_lens.as<int32_t>();
    args.block_table = block_table.as<int32_t>();
    args.hca_seq_lens = hca_seq_lens.as<int32_t>();
    args.error = error.as<int32_t>();
    poison();
  }
  void poison() {
    for (DeviceBuffer* b : {&swa_rows, &swa_lens, &block_table, &hca_seq_lens, &error}) b->fill_bytes(kPoisonByte);
  }
  // The outputs and the report, downloaded (after the device is done).
  ConvertOutputs download() const {
    check(cudaDeviceSynchronize(), "convert kernels");
    ConvertOutputs o = shape;
    o.swa_rows = swa_rows.download<int32_t>();
    o.swa_lens = swa_lens.download<int32_t>();
    o.block_table = block_table.download<int32_t>();
    o.hca_seq_lens = hca_seq_lens.download<int32_t>();
    o.error = error.download<int32_t>();
    return o;
  }
  static constexpr uint8_t kPoisonByte = 0x7F;  // 0x7F7F7F7F: no value a conversion writes

  DeviceBuffer indices, lens, seq_lens, swa_rows, swa_lens, block_table, hca_seq_lens, error;
  ConvertOutputs shape;
  Dsv4HcaConvertArgs args;
};

// Host outputs poisoned as the device's.
ConvertOutputs poisoned_like_device(const reference::ConvertInput& in, int64_t swa_pad, int64_t table_pad) {
  ConvertOutputs o(in, swa_pad, table_pad);
  for (auto* v : {&o.swa_rows, &o.swa_lens, &o.block_table, &o.hca_seq_lens, &o.error}) {
    for (auto& x : *v) x = 0x7F7F7F7F;
  }
  return o;
}

void expect_same(const ConvertOutputs& device, const ConvertOutputs& host) {
  EXPECT_EQ(device.error, host.error) << "the report";
  EXPECT_EQ(device.swa_lens, host.swa_lens) << "swa_lens";
  EXPECT_EQ(device.hca_seq_lens, host.hca_seq_lens) << "hca_seq_lens";
  for (size_t i = 0; i < host.swa_rows.size(); ++i) {
    ASSERT_EQ(device.swa_rows[i], host.swa_rows[i]) << "swa_rows element " << i;
  }
  for (size_t i = 0; i < host.block_table.size(); ++i) {
    ASSERT_EQ(device.block_table[i], host.block_table[i]) << "block_table element " << i;
  }
}

// Converts `in` on the host and on the device (outputs padded by `swa_pad`
// and `table_pad`), expects the same bits, and returns the host status.
Status convert_both(const reference::ConvertInput& in, int64_t swa_pad = 0, int64_t table_pad = 0,
                    cudaStream_t stream = nullptr) {
  ConvertOutputs host = poisoned_like_device(in, swa_pad, table_pad);
  const Status status = convert_page_aligned_indices(test::convert_args(in, host), nullptr);
  DeviceConvert d(in, host);
  const Status queued = convert_page_aligned_indices(d.args, stream);
  EXPECT_TRUE(queued.ok()) << queued.message();
  expect_same(d.download(), host);
  return status;
}

test::ConvertTableConfig random_config(std::mt19937_64& rng, int64_t page_size) {
  test::ConvertTableConfig c;
  c.requests = 1 + static_cast<int32_t>(rng() % 6);
  c.q_len = 1 + static_cast<int32_t>(rng() % 4);
  c.page_size = page_size;
  c.extra_width = static_cast<int32_t>(rng() % 3) * 60;
  c.stride_pad = static_cast<int64_t>(rng() % 5);
  c.extra_pages = static_cast<int32_t>(rng() % 3);
  return c;
}

TEST_F(Dsv4HcaConvertGpu, DeviceEqualsHostOnRandomTables) {
  for (int64_t page_size : {2, 4, 8, 16, 32, 64, 128}) {
    for (int round = 0; round < 3; ++round) {
      const uint64_t seed = test::fresh_seed();
      SCOPED_TRACE(test::seed_message(seed));
      SCOPED_TRACE(::testing::Message() << "page_size " << page_size);
      std::mt19937_64 rng(seed);
      const reference::ConvertInput in = test::make_convert_table(random_config(rng, page_size), rng);
      ASSERT_EQ(reference::convert_reference(in).refused, 0);
      const Status status = convert_both(in, 4 * static_cast<int64_t>(rng() % 3), static_cast<int64_t>(rng() % 4));
      EXPECT_TRUE(status.ok()) << status.message();
    }
  }
}

// The same table with one value broken, each rule in turn: both refuse, with
// the same report (the reference's), and write nothing else.
TEST_F(Dsv4HcaConvertGpu, DeviceRefusesAsTheHostDoes) {
  const uint64_t seed = test::fresh_seed();
  SCOPED_TRACE(test::seed_message(seed));
  std::mt19937_64 rng(seed);
  test::ConvertTableConfig c = random_config(rng, 8);
  c.requests = 3;
  c.q_len = 2;
  c.max_seq_len = 128 * 200;
  c.long_last = true;
  const reference::ConvertInput valid = test::make_convert_table(c, rng);
  const int64_t t = 5, slots = valid.lens[t] - 128;  // the last token: at least 99 slots
  ASSERT_GT(slots, 16);
  std::vector<std::pair<std::string, std::function<void(reference::ConvertInput&)>>> changes = {
      {"all -1", [](reference::ConvertInput& in) { in.indices.assign(in.indices.size(), -1); }},
      {"seq_lens below q_len", [](reference::ConvertInput& in) { in.seq_lens[1] = 0; }},
      {"lens past the width", [&](reference::ConvertInput& in) { in.lens[t] = in.width + 4; }},
      {"block table a page short",
       [](reference::ConvertInput& in) {
         const int32_t longest = *std::max_element(in.seq_lens.begin(), in.seq_lens.end());
         in.max_pages = convert_max_pages(longest, in.page_size) - 1;  // random_config may add spare pages
       }},
      {"window row past the pool",
       [&](reference::ConvertInput& in) { in.indices[t * in.stride + 5] = static_cast<int32_t>(in.swa_pool_rows); }},
      {"page past the pool",
       [&](reference::ConvertInput& in) {
         for (int64_t j = 8; j < 16 && j < slots; ++j) {
           in.indices[t * in.stride + 128 + j] = static_cast<int32_t>(in.compressed_pool_pages * 8 + j % 8);
         }
       }},
      {"not canonical", [&](reference::ConvertInput& in) { in.indices[t * in.stride + 128 + 3] += 8; }},
  };
  for (const auto& [label, change] : changes) {
    SCOPED_TRACE(label);
    reference::ConvertInput in = valid;
    change(in);
    if (label == "block table a page short" && in.max_pages < 1) continue;
    const reference::ConvertOutput want = reference::convert_reference(in);
    ASSERT_GT(want.refused, 0);
    ConvertOutputs host = poisoned_like_device(in, 4, 1);
    EXPECT_EQ(convert_page_aligned_indices(test::convert_args(in, host), nullptr).code(),
              StatusCode::kInvalidArgument);
    EXPECT_EQ(host.error, test::expected_report(want));
    DeviceConvert d(in, host);
    ASSERT_TRUE(convert_page_aligned_indices(d.args, nullptr).ok());
    const ConvertOutputs device = d.download();
    expect_same(device, host);
    for (const auto* v : {&device.swa_rows, &device.swa_lens, &device.block_table, &device.hca_seq_lens}) {
      for (int32_t x : *v) ASSERT_EQ(x, 0x7F7F7F7F) << "a refused device conversion wrote an output";
    }
  }
}

// Pages at the pool's end: the last page is a page, the next is not; a pool
// of one page; the largest page size; more tokens than CTAs, with two
// refused tokens far apart.
TEST_F(Dsv4HcaConvertGpu, PoolEndsLargePagesAndManyTokens) {
  const uint64_t seed = test::fresh_seed();
  SCOPED_TRACE(test::seed_message(seed));
  std::mt19937_64 rng(seed);
  {
    test::ConvertTableConfig c = random_config(rng, 128);
    c.compressed_pool_pages = 1;  // every page is page 0, the pool's last
    c.max_seq_len = 128 * 1000;
    const reference::ConvertInput in = test::make_convert_table(c, rng);
    EXPECT_TRUE(convert_both(in).ok());
  }
  {
    test::ConvertTableConfig c = random_config(rng, 2);
    c.compressed_pool_pages = 3;
    c.swa_pool_rows = 130;
    reference::ConvertInput in = test::make_convert_table(c, rng);
    EXPECT_TRUE(convert_both(in, 0, 2).ok());
    const int64_t t = static_cast<int64_t>(rng() % in.lens.size());
    in.indices[t * in.stride] = 130;  // the row after the pool's last
    EXPECT_EQ(convert_both(in).code(), StatusCode::kInvalidArgument);
  }
  {
    test::ConvertTableConfig c;
    c.requests = 3000;
    c.q_len = 3;  // 9000 tokens: more than the 8192 CTAs of the grid
    c.page_size = 4;
    c.max_seq_len = 128 * 12;
    reference::ConvertInput in = test::make_convert_table(c, rng);
    EXPECT_TRUE(convert_both(in).ok());
    in.lens[8999] += 1;
    in.lens[5000] -= 1;
    const reference::ConvertOutput want = reference::convert_reference(in);
    ASSERT_EQ(test::expected_report(want), (std::vector<int32_t>{2, 5000, 3}));
    EXPECT_EQ(convert_both(in).code(), StatusCode::kInvalidArgument);
  }
  for (int64_t page_size : {1, 256}) {  // FlashInfer's page sizes are 2..128: refused before any launch
    test::ConvertTableConfig c = random_config(rng, 2);
    const reference::ConvertInput in = test::make_convert_table(c, rng);
    ConvertOutputs host(in);
    DeviceConvert d(in, host);
    d.args.page_size = page_size;
    const Status status = convert_page_aligned_indices(d.args, nullptr);
    EXPECT_EQ(status.code(), StatusCode::kInvalidArgument) << status.message();
    const ConvertOutputs device = d.download();
    for (int32_t x : device.error) EXPECT_EQ(x, 0x7F7F7F7F) << "page_size " << page_size << ": the report was written";
  }
}

// Captured in a CUDA graph and replayed on new table contents in the same
// buffers: the outputs follow the tables; two runs give the same bits.
TEST_F(Dsv4HcaConvertGpu, GraphCaptureReplaysAndRunsAreIdentical) {
  const uint64_t seed = test::fresh_seed();
  SCOPED_TRACE(test::seed_message(seed));
  std::mt19937_64 rng(seed);
  test::ConvertTableConfig c;
  c.requests = 4;
  c.q_len = 2;
  c.page_size = 16;
  c.max_seq_len = 128 * 150;
  const reference::ConvertInput first = test::make_convert_table(c, rng);
  ConvertOutputs host = poisoned_like_device(first, 4, 2);
  DeviceConvert d(first, host);

  cudaStream_t stream = nullptr;
  check(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "stream");
  cudaGraph_t graph = nullptr;
  cudaGraphExec_t exec = nullptr;
  check(cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal), "begin capture");
  const Status captured = convert_page_aligned_indices(d.args, stream);
  check(cudaStreamEndCapture(stream, &graph), "end capture");
  ASSERT_TRUE(captured.ok()) << captured.message();
  check(cudaGraphInstantiate(&exec, graph, 0), "instantiate");

  for (int replay = 0; replay < 3; ++replay) {
    SCOPED_TRACE(::testing::Message() << "replay " << replay);
    // A new table of the same shape: same seq_lens (so the same lens and
    // width), new rows and pages; the third replay breaks a token.
    reference::ConvertInput in = first;
    std::mt19937_64 redraw(seed + replay + 1);
    for (int64_t t = 0; t < static_cast<int64_t>(in.lens.size()); ++t) {
      for (int col = 0; col < 128; ++col) {
        int32_t& v = in.indices[t * in.stride + col];
        if (v >= 0 && v < in.swa_pool_rows) v = static_cast<int32_t>(redraw() % in.swa_pool_rows);
      }
      for (int64_t j = 0; j < in.lens[t] - 128; j += in.page_size) {
        const int64_t page = static_cast<int64_t>(redraw() % in.compressed_pool_pages);
        for (int64_t k = j; k < std::min<int64_t>(j + in.page_size, in.lens[t] - 128); ++k) {
          in.indices[t * in.stride + 128 + k] = static_cast<int32_t>(page * in.page_size + k % in.page_size);
        }
      }
    }
    if (replay == 2) in.lens[1] = 5;
    check(cudaMemcpy(d.indices.get(), in.indices.data(), in.indices.size() * 4, cudaMemcpyHostToDevice), "table");
    check(cudaMemcpy(d.lens.get(), in.lens.data(), in.lens.size() * 4, cudaMemcpyHostToDevice), "lens");
    d.poison();
    ConvertOutputs want = poisoned_like_device(in, 4, 2);
    const Status status = convert_page_aligned_indices(test::convert_args(in, want), nullptr);
    EXPECT_EQ(status.ok(), replay != 2) << status.message();
    check(cudaGraphLaunch(exec, stream), "replay");
    check(cudaStreamSynchronize(stream), "replay");
    const ConvertOutputs got = d.download();
    expect_same(got, want);
    d.poison();
    check(cudaGraphLaunch(exec, stream), "second run");
    check(cudaStreamSynchronize(stream), "second run");
    expect_same(d.download(), got);
  }
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
  cudaStreamDestroy(stream);
}

}  // namespace
}  // namespace sparse_decode::gpu_test::dsv4_hca
