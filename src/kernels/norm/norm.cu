#include "kernels/cuda_common.cuh"
#include "kernels/norm/norm.h"
#include "kernels/norm/norm_rows.cuh"

namespace di::kernels {

namespace {

constexpr int kRowsPerWarpBlock = 8;  // warps per block in the warp-per-row form

// One warp per row for short rows (head norms of 128-256), one block per row for the hidden size.
template <bool kBlockPerRow>
__global__ void rms_norm_kernel(RmsNormParams p) {
  wait_for_prior_grid();
  allow_dependent_grid();
  const int64_t row = kBlockPerRow ? blockIdx.x : blockIdx.x * int64_t(kRowsPerWarpBlock) + threadIdx.x / 32;
  if (row >= p.rows) return;
  const int lane = kBlockPerRow ? threadIdx.x : threadIdx.x % 32;
  const int stride = kBlockPerRow ? kNormBlockThreads : 32;
  const bf16* x = static_cast<const bf16*>(p.x) + row * p.dim;
  bf16* out = static_cast<bf16*>(p.out) + row * p.dim;
  const float s = kBlockPerRow ? block_row_inv_rms(x, p.dim, p.eps) : warp_row_inv_rms(x, p.dim, p.eps, lane);
  for (int64_t i = lane; i < p.dim; i += stride) {
    const float scale = p.zero_centred ? 1.0f + p.weight[i] : p.weight[i];
    out[i] = to_bf16(to_f32(x[i]) * s * scale);
  }
}

__global__ void gated_rms_norm_kernel(GatedRmsNormParams p) {
  wait_for_prior_grid();
  allow_dependent_grid();
  const int64_t row = blockIdx.x * int64_t(kRowsPerWarpBlock) + threadIdx.x / 32;
  if (row >= p.rows) return;
  const int lane = threadIdx.x % 32;
  const bf16* x = static_cast<const bf16*>(p.x) + row * p.dim;
  const bf16* z = static_cast<const bf16*>(p.z) + row * p.dim;
  bf16* out = static_cast<bf16*>(p.out) + row * p.dim;
  const float s = warp_row_inv_rms(x, p.dim, p.eps, lane);
  for (int64_t i = lane; i < p.dim; i += 32) out[i] = to_bf16(gated_rms_normed(to_f32(x[i]), s, p.weight[i], to_f32(z[i])));
}

// One warp per (token, head) over the q heads then the k heads.
__global__ void attention_qk_norm_kernel(AttentionQkNormParams p) {
  wait_for_prior_grid();
  allow_dependent_grid();
  const int64_t item = blockIdx.x * int64_t(kRowsPerWarpBlock) + threadIdx.x / 32;
  const int64_t heads = p.q_heads + p.k_heads, D = p.head_dim;
  if (item >= p.tokens * heads) return;
  const int lane = threadIdx.x % 32;
  const int64_t t = item / heads, h = item % heads;
  const bool is_q = h < p.q_heads;
  const bf16* x = is_q ? static_cast<const bf16*>(p.q_and_gate) + (t * p.q_heads + h) * 2 * D
                       : static_cast<const bf16*>(p.k) + (t * p.k_heads + (h - p.q_heads)) * D;
  bf16* out = is_q ? static_cast<bf16*>(p.q_out) + (t * p.q_heads + h) * D
                   : static_cast<bf16*>(p.k_out) + (t * p.k_heads + (h - p.q_heads)) * D;
  const float* w = is_q ? p.q_weight : p.k_weight;
  const float s = warp_row_inv_rms(x, D, p.eps, lane);
  for (int64_t i = lane; i < D; i += 32) out[i] = to_bf16(to_f32(x[i]) * s * (1.0f + w[i]));
  if (is_q) {
    bf16* gate = static_cast<bf16*>(p.gate_out) + (t * p.q_heads + h) * D;
    for (int64_t i = lane; i < D; i += 32) gate[i] = x[D + i];
  }
}

}  // namespace

cudaError_t launch_attention_qk_norm(const AttentionQkNormParams& p, cudaStream_t stream) {
  if (p.tokens < 0 || p.q_heads <= 0 || p.k_heads <= 0 || p.head_dim <= 0 || p.head_dim > kNormWarpRowMax ||
      !p.q_and_gate || !p.k || !p.q_weight || !p.k_weight || !p.q_out || !p.gate_out || !p.k_out)
    return cudaErrorInvalidValue;
  if (p.tokens == 0) return cudaSuccess;
  return launch_early(attention_qk_norm_kernel, dim3(ceil_div(p.tokens * (p.q_heads + p.k_heads), kRowsPerWarpBlock)),
                      dim3(32 * kRowsPerWarpBlock), 0, stream, p);
}

cudaError_t launch_rms_norm(const RmsNormParams& p, cudaStream_t stream) {
  if (p.rows < 0 || p.dim <= 0 || !p.x || !p.weight || !p.out) return cudaErrorInvalidValue;
  if (p.rows == 0) return cudaSuccess;
  if (p.dim > kNormWarpRowMax)
    return launch_early(rms_norm_kernel<true>, dim3(unsigned(p.rows)), dim3(kNormBlockThreads), 0, stream, p);
  return launch_early(rms_norm_kernel<false>, dim3(ceil_div(p.rows, kRowsPerWarpBlock)), dim3(32 * kRowsPerWarpBlock),
                      0, stream, p);
}

cudaError_t launch_gated_rms_norm(const GatedRmsNormParams& p, cudaStream_t stream) {
  if (p.rows < 0 || p.dim <= 0 || !p.x || !p.z || !p.weight || !p.out) return cudaErrorInvalidValue;
  if (p.rows == 0) return cudaSuccess;
  return launch_early(gated_rms_norm_kernel, dim3(ceil_div(p.rows, kRowsPerWarpBlock)), dim3(32 * kRowsPerWarpBlock),
                      0, stream, p);
}

}  // namespace di::kernels
