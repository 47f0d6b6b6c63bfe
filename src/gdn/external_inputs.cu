#include "gdn/external_inputs.h"

#include <cuda_bf16.h>

#include <algorithm>

#include "kernels/cuda_common.cuh"

namespace di::gdn {
namespace {

using bf16 = __nv_bfloat16;
using kernels::to_bf16;
using kernels::to_f32;

__global__ void decay_kernel(const float* g, float* alpha, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    alpha[i] = expf(g[i]);
}

__global__ void slots_kernel(ExternalGdnInputs p) {
  const int32_t s = blockIdx.x * blockDim.x + threadIdx.x;
  if (s >= p.num_seqs) return;
  const int32_t slot = p.state_indices != nullptr ? p.state_indices[s] : s;
  const bool empty = p.cu_seqlens[s + 1] == p.cu_seqlens[s];
  p.read_slot[s] = p.read_initial ? slot : -1;
  p.write_slot[s] = p.write_final && !empty ? slot : -1;
  p.pass_slot[s] = p.write_final && empty ? slot : -1;
}

// One warp per row of q, then of k.
__global__ void l2norm_rows_kernel(ExternalGdnInputs p) {
  const int64_t row = blockIdx.x * int64_t(blockDim.x / 32) + threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  if (row >= 2 * p.qk_rows) return;
  const bool is_q = row < p.qk_rows;
  const int64_t r = is_q ? row : row - p.qk_rows;
  const bf16* src = static_cast<const bf16*>(is_q ? p.q : p.k) + r * p.head_dim;
  bf16* dst = static_cast<bf16*>(is_q ? p.q_out : p.k_out) + r * p.head_dim;
  float sum = 0.0f;
  for (int i = lane; i < p.head_dim; i += 32) {
    const float x = to_f32(src[i]);
    sum += x * x;
  }
  const float inv = 1.0f / sqrtf(kernels::warp_sum(sum) + 1e-6f);
  for (int i = lane; i < p.head_dim; i += 32) dst[i] = to_bf16(to_f32(src[i]) * inv);
}

__global__ void copy_through_kernel(StateCopyThrough p) {
  const int32_t s = blockIdx.y;
  const int32_t write = p.write_slot[s], read = p.read_slot[s];
  if (write < 0) return;
  float* dst = p.final + int64_t(write) * p.floats_per_slot;
  const float* src = read >= 0 ? p.initial + int64_t(read) * p.floats_per_slot : nullptr;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < p.floats_per_slot;
       i += int64_t(gridDim.x) * blockDim.x)
    dst[i] = src != nullptr ? src[i] : 0.0f;
}

}  // namespace

cudaError_t launch_external_gdn_inputs(const ExternalGdnInputs& p, cudaStream_t stream) {
  if (p.gates < 0 || p.num_seqs < 0 || p.qk_rows < 0 || (p.gates > 0 && (!p.g || !p.alpha)) ||
      (p.num_seqs > 0 && (!p.read_slot || !p.write_slot || !p.pass_slot || !p.cu_seqlens)) ||
      (p.q_out != nullptr && (!p.q || !p.k || !p.k_out || p.head_dim <= 0)))
    return cudaErrorInvalidValue;
  if (p.gates > 0) {
    const unsigned blocks = std::min(kernels::ceil_div(p.gates, 256), 4096u);
    decay_kernel<<<blocks, 256, 0, stream>>>(p.g, p.alpha, p.gates);
  }
  if (p.num_seqs > 0) slots_kernel<<<kernels::ceil_div(p.num_seqs, 128), 128, 0, stream>>>(p);
  if (p.q_out != nullptr && p.qk_rows > 0)
    l2norm_rows_kernel<<<kernels::ceil_div(2 * p.qk_rows, 8), 256, 0, stream>>>(p);
  return cudaGetLastError();
}

cudaError_t launch_state_copy_through(const StateCopyThrough& p, cudaStream_t stream) {
  if (p.num_seqs < 0 || p.floats_per_slot <= 0 || (p.num_seqs > 0 && (!p.final || !p.read_slot || !p.write_slot)))
    return cudaErrorInvalidValue;
  if (p.num_seqs == 0) return cudaSuccess;
  const unsigned blocks = std::min(kernels::ceil_div(p.floats_per_slot, 256), 256u);
  copy_through_kernel<<<dim3(blocks, unsigned(p.num_seqs)), 256, 0, stream>>>(p);
  return cudaGetLastError();
}

}  // namespace di::gdn
