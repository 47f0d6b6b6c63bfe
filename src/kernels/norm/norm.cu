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

}  // namespace

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
