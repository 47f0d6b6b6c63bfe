#include <algorithm>

#include "kernels/cuda_common.cuh"
#include "kernels/rope/rope.h"

namespace di::kernels {

namespace {

// The token's cos and sin take rotary_dim floats of shared memory: 32 KB at most, under the 48 KB a
// launch may take without asking.
constexpr int64_t kMaxRotaryDim = 8192;

// One block per token; each thread owns one rotation pair (i, i + half) of one head (of x, then of x2).
// The token's cos and sin of each i, which every head shares, are computed once into shared memory
// (2 * half floats): a power, a cosine and a sine per pair and head had made the kernel compute-bound.
__global__ void rope_kernel(RopeParams p) {
  extern __shared__ float angles[];  // cos of each i, then sin
  wait_for_prior_grid();
  allow_dependent_grid();
  const int64_t t = blockIdx.x;
  const int64_t half = p.rotary_dim / 2;
  const float pos = float(p.positions[t]);
  for (int64_t i = threadIdx.x; i < half; i += blockDim.x) {
    // inv_freq = 1 / theta^(2i / rotary_dim) in float32, as transformers computes it.
    const float inv_freq = 1.0f / powf(p.theta, float(2 * i) / float(p.rotary_dim));
    const float angle = pos * inv_freq;
    angles[i] = round_bf16(cosf(angle)), angles[half + i] = round_bf16(sinf(angle));
  }
  __syncthreads();
  bf16* x = static_cast<bf16*>(p.x) + t * p.heads * p.head_dim;
  bf16* x2 = static_cast<bf16*>(p.x2) + t * p.heads2 * p.head_dim;
  for (int64_t j = threadIdx.x; j < (p.heads + p.heads2) * half; j += blockDim.x) {
    const int64_t h = j / half, i = j % half;
    const float c = angles[i], s = angles[half + i];
    bf16* v = h < p.heads ? x + h * p.head_dim : x2 + (h - p.heads) * p.head_dim;
    const float a = to_f32(v[i]), b = to_f32(v[i + half]);
    v[i] = to_bf16(round_bf16(a * c) + round_bf16(-b * s));
    v[i + half] = to_bf16(round_bf16(b * c) + round_bf16(a * s));
  }
}

}  // namespace

cudaError_t launch_rope(const RopeParams& p, cudaStream_t stream) {
  if (p.tokens < 0 || p.heads <= 0 || p.rotary_dim <= 0 || p.rotary_dim % 2 != 0 || p.rotary_dim > p.head_dim ||
      !p.x || !p.positions || p.heads2 < 0 || (p.heads2 > 0 && !p.x2) || p.rotary_dim > kMaxRotaryDim)
    return cudaErrorInvalidValue;
  if (p.tokens == 0) return cudaSuccess;
  // A thread per rotation pair where a block holds them all (one pass: the pairs' loads in flight at
  // once), else 1024 threads taking pairs in turn.
  const int64_t pairs = (p.heads + p.heads2) * (p.rotary_dim / 2);
  const unsigned threads = unsigned(std::min<int64_t>(1024, (pairs + 31) / 32 * 32));
  const size_t angles = 2 * size_t(p.rotary_dim / 2) * sizeof(float);
  return launch_early(rope_kernel, dim3(unsigned(p.tokens)), dim3(threads), angles, stream, p);
}

}  // namespace di::kernels
