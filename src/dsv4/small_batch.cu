// Host side of the small-batch kernel: plan, support check, launch.
#include "dsv4/small_batch.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdlib>
#include <string>

#include "dsv4/kernel_params.h"
#include "dsv4/small_batch_traits.cuh"

namespace sparse_decode::dsv4 {

// Defined with its instantiation in small_batch_fp8_h16.cu.
const void* small_batch_kernel_fp8_h16();

namespace {

using Traits16 = SmallBatchTraits<16>;
constexpr size_t kSmemBytes = sizeof(SmallBatchSmem<Traits16>);

Status cuda_status(cudaError_t error, const char* what) {
  if (error == cudaSuccess) return Status::Ok();
  return Status::CudaError(std::string(what) + ": " + cudaGetErrorString(error));
}

// Raises the kernel's shared-memory limit and allows 16-CTA clusters, once a process.
Status configure_kernel() {
  static const cudaError_t error = [] {
    cudaError_t e = cudaFuncSetAttribute(small_batch_kernel_fp8_h16(), cudaFuncAttributeMaxDynamicSharedMemorySize,
                                         static_cast<int>(kSmemBytes));
    if (e == cudaSuccess) {
      e = cudaFuncSetAttribute(small_batch_kernel_fp8_h16(), cudaFuncAttributeNonPortableClusterSizeAllowed, 1);
    }
    return e;
  }();
  return cuda_status(error, "configuring the small-batch kernel");
}

PoolParams pool_params(const KvPool& pool, int64_t element_bytes) {
  PoolParams params{static_cast<const uint8_t*>(pool.data), pool.rows(), pool.page_size,
                    pool.page_stride * element_bytes, pool.row_stride * element_bytes};
  // page_size 1 in the kernel means "rows evenly spaced by row_stride".
  if (pool.page_size == 1) params.row_stride = params.page_stride;
  if (pool.page_stride == pool.page_size * pool.row_stride) params.page_size = 1;
  return params;
}

}  // namespace

SmallBatchPlan small_batch_plan(int32_t width) {
  const int32_t chunks = (width + Traits16::kChunkColumns - 1) / Traits16::kChunkColumns;
  SmallBatchPlan plan;
  plan.chunks_per_cta = (chunks + Traits16::kMaxClusterCtas - 1) / Traits16::kMaxClusterCtas;
  plan.cluster_ctas = (chunks + plan.chunks_per_cta - 1) / plan.chunks_per_cta;
  return plan;
}

Status small_batch_supports(const Dsv4DecodeArgs& args) {
  int device = 0;
  if (cudaGetDevice(&device) != cudaSuccess) {
    cudaGetLastError();
    return Status::NotSupported("device memory: no CUDA device is available");
  }
  int major = 0, minor = 0;
  cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device);
  cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device);
  if (major != 9 || minor != 0) {
    return Status::NotSupported("device: the kernels are built for sm_90a (Hopper), the device is sm_" +
                                std::to_string(major * 10 + minor));
  }
  if (args.dtype != DType::kFloat8E4M3) {
    return Status::NotSupported("dtype: only kFloat8E4M3 is served on the GPU so far (BF16: issue #5)");
  }
  if (args.num_heads != 16) {
    return Status::NotSupported("num_heads: only 16 heads are served on the GPU so far, got " +
                                std::to_string(args.num_heads));
  }
  return Status::Ok();
}

int64_t small_batch_max_tokens(int32_t width) {
  int device = 0;
  if (cudaGetDevice(&device) != cudaSuccess || !configure_kernel().ok()) {
    cudaGetLastError();
    return 0;
  }
  const SmallBatchPlan plan = small_batch_plan(width);
  cudaLaunchConfig_t config = {};
  config.gridDim = dim3(plan.cluster_ctas);
  config.blockDim = dim3(Traits16::kThreads);
  config.dynamicSmemBytes = kSmemBytes;
  cudaLaunchAttribute attribute;
  attribute.id = cudaLaunchAttributeClusterDimension;
  attribute.val.clusterDim = {static_cast<unsigned>(plan.cluster_ctas), 1, 1};
  config.attrs = &attribute;
  config.numAttrs = 1;
  int clusters = 0;
  if (cudaOccupancyMaxActiveClusters(&clusters, small_batch_kernel_fp8_h16(), &config) != cudaSuccess) {
    cudaGetLastError();
    return 0;
  }
  return clusters;
}

Status launch_small_batch(const Dsv4DecodeArgs& args, CUstream_st* stream) {
  if (Status status = configure_kernel(); !status.ok()) return status;
  const SmallBatchPlan plan = small_batch_plan(args.width);
  const int64_t q_bytes = args.dtype == DType::kFloat8E4M3 ? 1 : 2;

  Dsv4Params p{};
  p.q = static_cast<const uint8_t*>(args.q);
  p.q_token_stride = args.q_token_stride * q_bytes;
  p.q_head_stride = args.q_head_stride * q_bytes;
  p.swa = pool_params(args.swa_kv, q_bytes);
  p.compressed = args.compressed_kv.data ? pool_params(args.compressed_kv, q_bytes) : PoolParams{p.swa.data, 0, 1, 0, 0};
  p.indices = args.indices;
  p.indices_stride = args.indices_stride;
  p.width = args.width;
  p.lens = args.lens;
  p.seq_lens = args.seq_lens;
  p.cum_seq_lens_q = args.cum_seq_lens_q;
  p.q_len = args.q_len;
  p.num_requests = args.num_requests;
  p.sinks = args.sinks;
  p.bmm1_scale = args.bmm1_scale.value;
  p.bmm1_scale_ptr = args.bmm1_scale.device;
  p.bmm2_scale = args.bmm2_scale.value;
  p.bmm2_scale_ptr = args.bmm2_scale.device;
  p.out = static_cast<uint16_t*>(args.out);
  p.out_token_stride = args.out_token_stride;
  p.out_head_stride = args.out_head_stride;
  p.lse = args.lse;
  p.lse_token_stride = args.lse_token_stride;
  p.out_of_range_count = args.out_of_range_count;
  p.num_tokens = args.num_tokens;
  p.chunks_per_cta = plan.chunks_per_cta;
  static const int32_t skip_stages = [] {
    const char* value = std::getenv("SPARSE_DECODE_SKIP_STAGES");
    return value ? std::atoi(value) : 0;
  }();
  p.skip_stages = skip_stages;

  cudaLaunchConfig_t config = {};
  config.gridDim = dim3(static_cast<unsigned>(args.num_tokens * plan.cluster_ctas));
  config.blockDim = dim3(Traits16::kThreads);
  config.dynamicSmemBytes = kSmemBytes;
  config.stream = stream;
  cudaLaunchAttribute attributes[2];
  attributes[0].id = cudaLaunchAttributeClusterDimension;
  attributes[0].val.clusterDim = {static_cast<unsigned>(plan.cluster_ctas), 1, 1};
  attributes[1].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attributes[1].val.programmaticStreamSerializationAllowed = args.enable_pdl ? 1 : 0;
  config.attrs = attributes;
  config.numAttrs = 2;
  void* kernel_args[] = {&p};
  return cuda_status(cudaLaunchKernelExC(&config, small_batch_kernel_fp8_h16(), kernel_args), "launching the small-batch kernel");
}

}  // namespace sparse_decode::dsv4
