#include "kernels/cuda_common.cuh"
#include "kernels/norm/norm.h"
#include "kernels/norm/norm_rows.cuh"

namespace di::kernels {

namespace {

constexpr int kRowsPerWarpBlock = 8;  // warps per block in the warp-per-row form

// Every kernel here loads a thread's elements of its row together (StridedRow<kPer>: kPer elements
// per thread, enough for the row), the weights before the wait for the kernel ahead (they are
// parameters), and keeps them in registers for the output: a few round trips to memory per row where
// element-by-element loops took one per element (these kernels are a few microseconds of latency,
// not bandwidth). kPer = 0: rows too long for that, element by element.

// One warp per row for short rows (head norms of 128-256), one block per row for the hidden size.
template <bool kBlockPerRow, int kPer>
__global__ void rms_norm_kernel(RmsNormParams p) {
  const int64_t row = kBlockPerRow ? blockIdx.x : blockIdx.x * int64_t(kRowsPerWarpBlock) + threadIdx.x / 32;
  const int lane = kBlockPerRow ? threadIdx.x : threadIdx.x % 32;
  const int stride = kBlockPerRow ? kNormBlockThreads : 32;
  const bf16* x = static_cast<const bf16*>(p.x) + row * p.dim;
  bf16* out = static_cast<bf16*>(p.out) + row * p.dim;
  if constexpr (kPer > 0) {
    StridedRow<kPer> w, v;
    w.load(p.weight, p.dim, lane, stride);
    wait_for_prior_grid();
    allow_dependent_grid();
    if (!kBlockPerRow && row >= p.rows) return;  // (a block's rows are all in range)
    v.load(x, p.dim, lane, stride);
    const float s = inv_rms(kBlockPerRow ? block_sum(v.sum_sq()) : warp_sum(v.sum_sq()), p.dim, p.eps);
#pragma unroll
    for (int u = 0; u < kPer; ++u) {
      const int64_t i = lane + int64_t(u) * stride;
      if (i < p.dim) out[i] = to_bf16(v.v[u] * s * (p.zero_centred ? 1.0f + w.v[u] : w.v[u]));
    }
  } else {
    wait_for_prior_grid();
    allow_dependent_grid();
    if (row >= p.rows) return;
    const float s = kBlockPerRow ? block_row_inv_rms(x, p.dim, p.eps) : warp_row_inv_rms(x, p.dim, p.eps, lane);
    for (int64_t i = lane; i < p.dim; i += stride) {
      const float scale = p.zero_centred ? 1.0f + p.weight[i] : p.weight[i];
      out[i] = to_bf16(to_f32(x[i]) * s * scale);
    }
  }
}

template <int kPer>
__global__ void gated_rms_norm_kernel(GatedRmsNormParams p) {
  const int64_t row = blockIdx.x * int64_t(kRowsPerWarpBlock) + threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  const bf16* x = static_cast<const bf16*>(p.x) + row * p.dim;
  const bf16* z = static_cast<const bf16*>(p.z) + row * p.dim;
  bf16* out = static_cast<bf16*>(p.out) + row * p.dim;
  if constexpr (kPer > 0) {
    StridedRow<kPer> w, v, g;
    w.load(p.weight, p.dim, lane, 32);
    wait_for_prior_grid();
    allow_dependent_grid();
    if (row >= p.rows) return;
    v.load(x, p.dim, lane, 32);
    g.load(z, p.dim, lane, 32);
    const float s = inv_rms(warp_sum(v.sum_sq()), p.dim, p.eps);
#pragma unroll
    for (int u = 0; u < kPer; ++u) {
      const int64_t i = lane + int64_t(u) * 32;
      if (i < p.dim) out[i] = to_bf16(gated_rms_normed(v.v[u], s, w.v[u], g.v[u]));
    }
  } else {
    wait_for_prior_grid();
    allow_dependent_grid();
    if (row >= p.rows) return;
    const float s = warp_row_inv_rms(x, p.dim, p.eps, lane);
    for (int64_t i = lane; i < p.dim; i += 32)
      out[i] = to_bf16(gated_rms_normed(to_f32(x[i]), s, p.weight[i], to_f32(z[i])));
  }
}

// One warp per (token, head) over the q heads then the k heads.
template <int kPer>
__global__ void attention_qk_norm_kernel(AttentionQkNormParams p) {
  const int64_t item = blockIdx.x * int64_t(kRowsPerWarpBlock) + threadIdx.x / 32;
  const int64_t heads = p.q_heads + p.k_heads, D = p.head_dim;
  const int lane = threadIdx.x % 32;
  const int64_t t = item / heads, h = item % heads;
  const bool is_q = h < p.q_heads;
  const bf16* x = is_q ? static_cast<const bf16*>(p.q_and_gate) + (t * p.q_heads + h) * 2 * D
                       : static_cast<const bf16*>(p.k) + (t * p.k_heads + (h - p.q_heads)) * D;
  bf16* out = is_q ? static_cast<bf16*>(p.q_out) + (t * p.q_heads + h) * D
                   : static_cast<bf16*>(p.k_out) + (t * p.k_heads + (h - p.q_heads)) * D;
  const float* weight = is_q ? p.q_weight : p.k_weight;
  bf16* gate = static_cast<bf16*>(p.gate_out) + (t * p.q_heads + h) * D;
  if constexpr (kPer > 0) {
    StridedRow<kPer> w, v;
    w.load(weight, D, lane, 32);
    wait_for_prior_grid();
    allow_dependent_grid();
    if (item >= p.tokens * heads) return;
    v.load(x, D, lane, 32);
    bf16 g[kPer];  // the gate half, copied as it is
#pragma unroll
    for (int u = 0; u < kPer; ++u) {
      const int64_t i = lane + int64_t(u) * 32;
      if (is_q && i < D) g[u] = x[D + i];
    }
    const float s = inv_rms(warp_sum(v.sum_sq()), D, p.eps);
#pragma unroll
    for (int u = 0; u < kPer; ++u) {
      const int64_t i = lane + int64_t(u) * 32;
      if (i >= D) continue;
      out[i] = to_bf16(v.v[u] * s * (1.0f + w.v[u]));
      if (is_q) gate[i] = g[u];
    }
  } else {
    wait_for_prior_grid();
    allow_dependent_grid();
    if (item >= p.tokens * heads) return;
    const float s = warp_row_inv_rms(x, D, p.eps, lane);
    for (int64_t i = lane; i < D; i += 32) out[i] = to_bf16(to_f32(x[i]) * s * (1.0f + weight[i]));
    if (is_q)
      for (int64_t i = lane; i < D; i += 32) gate[i] = x[D + i];
  }
}

// The kPer a row of `dim` elements takes over `threads` threads (0: element by element).
int per_thread(int64_t dim, int threads) {
  for (int per : {4, 8, 16, 32})
    if (dim <= int64_t(per) * threads) return per;
  return 0;
}

// The kernel instantiated for that kPer.
template <template <int> class Pick>
auto pick_per(int per) {
  switch (per) {
    case 4: return Pick<4>::kernel;
    case 8: return Pick<8>::kernel;
    case 16: return Pick<16>::kernel;
    case 32: return Pick<32>::kernel;
    default: return Pick<0>::kernel;
  }
}
template <int kPer> struct WarpRms { static constexpr auto kernel = rms_norm_kernel<false, kPer>; };
template <int kPer> struct BlockRms { static constexpr auto kernel = rms_norm_kernel<true, kPer>; };
template <int kPer> struct Gated { static constexpr auto kernel = gated_rms_norm_kernel<kPer>; };
template <int kPer> struct QkNorm { static constexpr auto kernel = attention_qk_norm_kernel<kPer>; };

}  // namespace

cudaError_t launch_attention_qk_norm(const AttentionQkNormParams& p, cudaStream_t stream) {
  if (p.tokens < 0 || p.q_heads <= 0 || p.k_heads <= 0 || p.head_dim <= 0 || p.head_dim > kNormWarpRowMax ||
      !p.q_and_gate || !p.k || !p.q_weight || !p.k_weight || !p.q_out || !p.gate_out || !p.k_out)
    return cudaErrorInvalidValue;
  if (p.tokens == 0) return cudaSuccess;
  return launch_early(pick_per<QkNorm>(per_thread(p.head_dim, 32)),
                      dim3(ceil_div(p.tokens * (p.q_heads + p.k_heads), kRowsPerWarpBlock)), dim3(32 * kRowsPerWarpBlock),
                      0, stream, p);
}

cudaError_t launch_rms_norm(const RmsNormParams& p, cudaStream_t stream) {
  if (p.rows < 0 || p.dim <= 0 || !p.x || !p.weight || !p.out) return cudaErrorInvalidValue;
  if (p.rows == 0) return cudaSuccess;
  if (p.dim > kNormWarpRowMax)
    return launch_early(pick_per<BlockRms>(per_thread(p.dim, kNormBlockThreads)), dim3(unsigned(p.rows)),
                        dim3(kNormBlockThreads), 0, stream, p);
  return launch_early(pick_per<WarpRms>(per_thread(p.dim, 32)), dim3(ceil_div(p.rows, kRowsPerWarpBlock)),
                      dim3(32 * kRowsPerWarpBlock), 0, stream, p);
}

cudaError_t launch_gated_rms_norm(const GatedRmsNormParams& p, cudaStream_t stream) {
  if (p.rows < 0 || p.dim <= 0 || !p.x || !p.z || !p.weight || !p.out) return cudaErrorInvalidValue;
  if (p.rows == 0) return cudaSuccess;
  return launch_early(pick_per<Gated>(per_thread(p.dim, 32)), dim3(ceil_div(p.rows, kRowsPerWarpBlock)),
                      dim3(32 * kRowsPerWarpBlock), 0, stream, p);
}

}  // namespace di::kernels
