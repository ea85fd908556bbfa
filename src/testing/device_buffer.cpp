#include "testing/device_buffer.h"

#include <cuda_runtime_api.h>

#include <stdexcept>
#include <utility>

namespace sparse_decode::testing {

bool cuda_device_available(std::string* why) {
  int count = 0;
  const cudaError_t status = cudaGetDeviceCount(&count);
  if (status != cudaSuccess || count == 0) {
    if (why) *why = status != cudaSuccess ? cudaGetErrorString(status) : "no CUDA device";
    cudaGetLastError();
    return false;
  }
  return true;
}

void check_cuda(int status, const char* what) {
  if (status != cudaSuccess) {
    throw std::runtime_error(std::string(what) + ": " + cudaGetErrorString(static_cast<cudaError_t>(status)));
  }
}

DeviceBuffer::DeviceBuffer(size_t bytes) : bytes_(bytes) {
  if (bytes) check_cuda(cudaMalloc(&data_, bytes), "cudaMalloc");
}

DeviceBuffer::DeviceBuffer(const void* host, size_t bytes) : DeviceBuffer(bytes) {
  if (bytes) check_cuda(cudaMemcpy(data_, host, bytes, cudaMemcpyHostToDevice), "cudaMemcpy to device");
}

DeviceBuffer::~DeviceBuffer() {
  if (data_) cudaFree(data_);
}

DeviceBuffer::DeviceBuffer(DeviceBuffer&& other) noexcept
    : data_(std::exchange(other.data_, nullptr)), bytes_(std::exchange(other.bytes_, 0)) {}

DeviceBuffer& DeviceBuffer::operator=(DeviceBuffer&& other) noexcept {
  if (this != &other) {
    if (data_) cudaFree(data_);
    data_ = std::exchange(other.data_, nullptr);
    bytes_ = std::exchange(other.bytes_, 0);
  }
  return *this;
}

void DeviceBuffer::fill_bytes(uint8_t value) {
  if (!bytes_) return;
  check_cuda(cudaMemset(data_, value, bytes_), "cudaMemset");
  // cudaMemset runs on the legacy stream, which work on a non-blocking
  // stream does not wait for: finish it before returning.
  check_cuda(cudaDeviceSynchronize(), "cudaMemset");
}

void DeviceBuffer::fill_bytes(uint8_t value, CUstream_st* stream) {
  if (bytes_) check_cuda(cudaMemsetAsync(data_, value, bytes_, stream), "cudaMemsetAsync");
}

void DeviceBuffer::download(void* host, size_t bytes) const {
  if (bytes) check_cuda(cudaMemcpy(host, data_, bytes, cudaMemcpyDeviceToHost), "cudaMemcpy to host");
}

DeviceOutputs::DeviceOutputs(int64_t tokens, int32_t heads)
    : out(static_cast<size_t>(tokens) * heads * kHeadDim * 2),
      lse(static_cast<size_t>(tokens) * heads * sizeof(float)),
      out_of_range_count(sizeof(int32_t)) {
  out_of_range_count.fill_bytes(0);
}

Dsv4DeviceProblem::Dsv4DeviceProblem(const Dsv4Problem& problem)
    : DeviceOutputs(problem.config.tokens, problem.config.heads),
      q(problem.q),
      swa_kv(problem.swa_kv),
      compressed_kv(problem.compressed_kv),
      indices(problem.indices),
      lens(problem.lens),
      sinks(problem.sinks) {
  args = problem.host_args(out.get(), lse.as<float>());
  args.memory = MemorySpace::kDevice;
  args.q = q.get();
  args.swa_kv.data = swa_kv.get();
  args.compressed_kv.data = compressed_kv.get();
  args.indices = indices.as<int32_t>();
  args.lens = problem.lens.empty() ? nullptr : lens.as<int32_t>();
  args.sinks = problem.sinks.empty() ? nullptr : sinks.as<float>();
  args.out_of_range_count = out_of_range_count.as<int32_t>();
}

Dsv4HcaDeviceProblem::Dsv4HcaDeviceProblem(const Dsv4HcaProblem& p)
    : DeviceOutputs(p.config.tokens, p.config.heads),
      expansion(expand_to_section1(p)),
      q(p.q),
      swa_kv(p.swa_kv),
      compressed_kv(p.compressed_kv),
      swa_rows(p.swa_rows),
      swa_lens(p.swa_lens),
      block_table(p.block_table),
      lens(p.lens),
      hca_seq_lens(p.hca_seq_lens),
      cum_seq_lens_q(p.cum_seq_lens_q),
      sinks(p.sinks),
      expanded_indices(expansion.indices),
      expanded_lens(expansion.lens) {
  hca = p.host_args(out.get(), lse.as<float>());
  hca.memory = MemorySpace::kDevice;
  hca.q = q.get();
  hca.swa_kv.data = swa_kv.get();
  hca.compressed_kv.data = compressed_kv.get();
  hca.swa_rows = swa_rows.as<int32_t>();
  hca.swa_lens = swa_lens.as<int32_t>();
  hca.block_table = block_table.as<int32_t>();
  hca.lens = lens.as<int32_t>();
  hca.hca_seq_lens = hca_seq_lens.as<int32_t>();
  hca.cum_seq_lens_q = p.cum_seq_lens_q.empty() ? nullptr : cum_seq_lens_q.as<int32_t>();
  hca.sinks = p.sinks.empty() ? nullptr : sinks.as<float>();
  hca.out_of_range_count = out_of_range_count.as<int32_t>();

  section1 = expansion.args(p, out.get(), lse.as<float>());
  section1.memory = MemorySpace::kDevice;
  section1.q = hca.q;
  section1.swa_kv = hca.swa_kv;
  section1.compressed_kv = hca.compressed_kv;
  section1.indices = expanded_indices.as<int32_t>();
  section1.lens = expanded_lens.as<int32_t>();
  section1.sinks = hca.sinks;
  section1.out_of_range_count = hca.out_of_range_count;
}

Dsv4PackedDeviceProblem::Dsv4PackedDeviceProblem(const Dsv4PackedProblem& problem)
    : DeviceOutputs(problem.config.tokens, problem.config.heads),
      q(problem.q),
      swa_pool(problem.swa_pool),
      extra_pool(problem.extra_pool),
      swa_indices(problem.swa_indices),
      swa_lens(problem.swa_lens),
      extra_indices(problem.extra_indices),
      extra_lens(problem.extra_lens),
      sinks(problem.sinks) {
  args = problem.host_args(out.get(), lse.as<float>());
  args.memory = MemorySpace::kDevice;
  args.q = q.get();
  args.swa.pool.data = swa_pool.as<uint8_t>();
  args.swa.indices = swa_indices.as<int32_t>();
  args.swa.lens = problem.swa_lens.empty() ? nullptr : swa_lens.as<int32_t>();
  if (problem.has_extra()) {
    args.extra.pool.data = extra_pool.as<uint8_t>();
    args.extra.indices = extra_indices.as<int32_t>();
    args.extra.lens = extra_lens.as<int32_t>();
  }
  args.sinks = problem.sinks.empty() ? nullptr : sinks.as<float>();
  args.out_of_range_count = out_of_range_count.as<int32_t>();
}

}  // namespace sparse_decode::testing
