#include "kernels/cuda_common.cuh"
#include "kernels/norm/norm.h"

namespace di::kernels {

namespace {

// One warp per row for short rows (head norms of 128-256), one block per row for the hidden size.
constexpr int kWarpRowMax = 1024;
constexpr int kRowsPerWarpBlock = 8;  // warps per block in the warp-per-row form

__device__ __forceinline__ float inv_rms(float sum_sq, int64_t dim, float eps) {
  return 1.0f / sqrtf(sum_sq / float(dim) + eps);  // not rsqrtf: it is 2 ulp off
}

// kAddResidual: the row is first the bf16 sum x + residual (rounded as the add kernel rounds), written
// to p.sum, and the norm is taken of that sum: the same values, reduced in the same order, as an add
// followed by rms_norm.
template <bool kBlockPerRow, bool kAddResidual>
__global__ void rms_norm_kernel(RmsNormParams p) {
  wait_for_prior_grid();
  allow_dependent_grid();
  const int64_t row = kBlockPerRow ? blockIdx.x : blockIdx.x * int64_t(kRowsPerWarpBlock) + threadIdx.x / 32;
  if (row >= p.rows) return;
  const int lane = kBlockPerRow ? threadIdx.x : threadIdx.x % 32;
  const int stride = kBlockPerRow ? blockDim.x : 32;
  const bf16* x = static_cast<const bf16*>(p.x) + row * p.dim;
  bf16* out = static_cast<bf16*>(p.out) + row * p.dim;
  float sum = 0.0f;
  if constexpr (kAddResidual) {
    const bf16* residual = static_cast<const bf16*>(p.residual) + row * p.dim;
    bf16* total = static_cast<bf16*>(p.sum) + row * p.dim;
    for (int64_t i = lane; i < p.dim; i += stride) {
      const bf16 t = to_bf16(to_f32(x[i]) + to_f32(residual[i]));
      total[i] = t;
      const float v = to_f32(t);
      sum += v * v;
    }
    x = total;  // the second pass reads back what this thread wrote
  } else {
    for (int64_t i = lane; i < p.dim; i += stride) {
      const float v = to_f32(x[i]);
      sum += v * v;
    }
  }
  sum = kBlockPerRow ? block_sum(sum) : warp_sum(sum);
  const float s = inv_rms(sum, p.dim, p.eps);
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
  float sum = 0.0f;
  for (int64_t i = lane; i < p.dim; i += 32) {
    const float v = to_f32(x[i]);
    sum += v * v;
  }
  const float s = inv_rms(warp_sum(sum), p.dim, p.eps);
  for (int64_t i = lane; i < p.dim; i += 32) {
    const float n = round_bf16(p.weight[i] * round_bf16(to_f32(x[i]) * s));
    out[i] = to_bf16(n * silu(to_f32(z[i])));
  }
}

}  // namespace

cudaError_t launch_rms_norm(const RmsNormParams& p, cudaStream_t stream) {
  if (p.rows < 0 || p.dim <= 0 || !p.x || !p.weight || !p.out) return cudaErrorInvalidValue;
  if ((p.residual == nullptr) != (p.sum == nullptr)) return cudaErrorInvalidValue;
  if (p.rows == 0) return cudaSuccess;
  const bool block_per_row = p.dim > kWarpRowMax;
  const unsigned blocks = block_per_row ? unsigned(p.rows) : ceil_div(p.rows, kRowsPerWarpBlock);
  const unsigned threads = block_per_row ? 256 : 32 * kRowsPerWarpBlock;
  if (p.residual)
    return launch_early(block_per_row ? rms_norm_kernel<true, true> : rms_norm_kernel<false, true>, dim3(blocks),
                        dim3(threads), 0, stream, p);
  return launch_early(block_per_row ? rms_norm_kernel<true, false> : rms_norm_kernel<false, false>, dim3(blocks),
                      dim3(threads), 0, stream, p);
}

cudaError_t launch_gated_rms_norm(const GatedRmsNormParams& p, cudaStream_t stream) {
  if (p.rows < 0 || p.dim <= 0 || !p.x || !p.z || !p.weight || !p.out) return cudaErrorInvalidValue;
  if (p.rows == 0) return cudaSuccess;
  return launch_early(gated_rms_norm_kernel, dim3(ceil_div(p.rows, kRowsPerWarpBlock)), dim3(32 * kRowsPerWarpBlock),
                      0, stream, p);
}

}  // namespace di::kernels
