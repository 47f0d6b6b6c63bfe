#pragma once
// The row reductions of the RMSNorm kernels, shared with the projections that apply a norm to their
// input on the way in (kernels/gemm/small_batch_linear.cu), so that both sum a row in the same order
// and give the same bits.
#include "kernels/cuda_common.cuh"

namespace di::kernels {

// Rows up to this width are reduced by one warp; wider rows by a block of kNormBlockThreads.
constexpr int kNormWarpRowMax = 1024;
constexpr int kNormBlockThreads = 256;

__device__ __forceinline__ float inv_rms(float sum_sq, int64_t dim, float eps) {
  return 1.0f / sqrtf(sum_sq / float(dim) + eps);  // not rsqrtf: it is 2 ulp off
}

// This thread's share of sum(x^2) over a bf16 row: elements first, first + stride, ...
__device__ __forceinline__ float sum_sq_strided(const bf16* row, int64_t dim, int first, int stride) {
  float sum = 0.0f;
  for (int64_t i = first; i < dim; i += stride) {
    const float v = to_f32(row[i]);
    sum += v * v;
  }
  return sum;
}

// A thread's elements first, first + stride, ... of a row, at most kPer of them, loaded together: one
// round trip to memory where a loop that adds each element as it arrives takes one per element. Past
// the row's end they are zeros, which add nothing (s + 0 * 0 == s for the sums below, which are never
// -0), so sum_sq() is sum_sq_strided() bit for bit.
template <int kPer>
struct StridedRow {
  float v[kPer];
  template <typename T>
  __device__ __forceinline__ void load(const T* row, int64_t dim, int first, int stride) {
#pragma unroll
    for (int u = 0; u < kPer; ++u) {
      const int64_t i = first + int64_t(u) * stride;
      v[u] = i < dim ? to_f32(row[i]) : 0.0f;
    }
  }
  __device__ __forceinline__ float sum_sq() const {
    float sum = 0.0f;
#pragma unroll
    for (int u = 0; u < kPer; ++u) sum += v[u] * v[u];
    return sum;
  }
};

// 1 / rms of a row, by one warp (every lane gets it).
__device__ __forceinline__ float warp_row_inv_rms(const bf16* row, int64_t dim, float eps, int lane) {
  return inv_rms(warp_sum(sum_sq_strided(row, dim, lane, 32)), dim, eps);
}

// 1 / rms of a row, by a whole block of kNormBlockThreads (every thread gets it; all must call).
__device__ __forceinline__ float block_row_inv_rms(const bf16* row, int64_t dim, float eps) {
  return inv_rms(block_sum(sum_sq_strided(row, dim, threadIdx.x, kNormBlockThreads)), dim, eps);
}

// The normalised values, rounded as the reference rounds.
// Zero-centred RMSNorm: bf16(x * s * (1 + w)).
__device__ __forceinline__ float rms_normed(float x, float s, float w) { return round_bf16(x * s * (1.0f + w)); }
// The GDN output norm: bf16(bf16(w * bf16(x * s)) * silu(z)).
__device__ __forceinline__ float gated_rms_normed(float x, float s, float w, float z) {
  return round_bf16(round_bf16(w * round_bf16(x * s)) * silu(z));
}

}  // namespace di::kernels
