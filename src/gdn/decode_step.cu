// The GDN decode step (see decode_step.h): one token per sequence, norms and gates fused.
//
// Traffic: the f32 state, 64 KiB per (sequence, value head), is read once and written once; q, k, v,
// a, b and the output add ~1.3 KiB per sequence and head at most. So the step is bound by HBM:
// bytes = num_seqs * Hv * 128 KiB (e.g. 256 MiB for 64 sequences x 32 heads, ~56 us at 4.8 TB/s).
// FLOP: ~6 K V per (sequence, head) (two K-reductions, the decay and the rank-1 update), ~100 KFLOP.
//
// Design. A CTA of 128 threads (4 warps) owns (sequence, value head, half of the V columns); each warp
// owns 16 columns and each thread 4 columns x 16 key rows of the state, held in registers between
// the load and the store (64 floats). The thread's 16 x 4 block is chosen per layout so that every
// load and store is a float4 and a warp instruction touches whole 32-byte sectors:
//   [K, V] (V contiguous): lane % 4 -> column quad, lane / 4 -> key rows lane/4 + 8 j (j < 16);
//                          one instruction reads 8 rows x 64 contiguous bytes.
//   [V, K] (K contiguous): lane / 8 -> column quad, lane % 8 -> key rows 4 (lane%8) + 32 j + {0..3};
//                          one instruction reads 4 columns x 128 contiguous bytes.
// Both K-reductions (Sᵀk and Sᵀq) run in one pass over the loaded state: a sum over the thread's 16
// rows, then 3 xor-shuffles across the 8 lanes that share the columns. With S' = exp(g) S:
//   v' = beta (v - exp(g) Sᵀk);   o = scale (exp(g) Sᵀq + (k·q) v')     [Sᵀ_new q = S'ᵀq + v' (k·q)]
//   S_new = exp(g) S + k v'ᵀ   (written from registers)
// Every warp normalises the token's q and k itself (128 values each, one shuffle reduction) into its
// own shared slice, so no CTA-wide barrier is needed.
//
// The output norm (kNormed) needs the sum of squares of the whole head's o, whose halves two CTAs
// hold: they run as a cluster of two (cluster rank = half). Each CTA puts its half of o, rounded to
// bf16, in its shared memory; after a cluster barrier every warp reads both halves (the other over
// distributed shared memory) in the order the gated norm kernel sums a 128-wide row, one warp per
// row (kernels/norm/norm_rows.cuh), so the factor and the output are that kernel's bits. The state
// is updated and stored between the barrier's arrival and its wait, which hides the exchange.
#include "gdn/decode_step.h"

#include <cuda_bf16.h>

#include "kernels/cuda_common.cuh"
#include "kernels/norm/norm_rows.cuh"

#include <cstdint>

namespace di::gdn {
namespace {

using bf16 = __nv_bfloat16;

constexpr int kHeadDim = 128;  // K == V
constexpr int kThreads = 128;
constexpr int kWarps = kThreads / 32;
constexpr int kColsPerWarp = 16;
constexpr int kColsPerCta = kWarps * kColsPerWarp;  // 64
constexpr int kCtasPerHead = kHeadDim / kColsPerCta;
constexpr int kKeysPerThread = 16;
constexpr float kNormEps = 1e-6f;

using kernels::bf16_hi;
using kernels::bf16_lo;
using kernels::load_bf16x4;
using kernels::pack_bf16x2;
using kernels::round_bf16;



__device__ __forceinline__ float warp_sum(float x) {
#pragma unroll
  for (int offset = 16; offset > 0; offset /= 2) x += __shfl_xor_sync(0xffffffffu, x, offset);
  return x;
}

// Where this thread's state block lives, per layout (see the design note above).
template <di_gdn_state_layout Layout>
struct StateBlock {
  static constexpr bool kKeyContiguous = Layout == DI_GDN_STATE_VK;
  int lane;
  // First of the thread's 4 columns within the warp's 16.
  __device__ int col_quad() const { return kKeyContiguous ? lane / 8 : lane % 4; }
  // Key row of the thread's j-th row (j < 16).
  __device__ int key(int j) const {
    return kKeyContiguous ? 4 * (lane % 8) + 32 * (j / 4) + j % 4 : lane / 4 + 8 * j;
  }
  // The lanes that share the columns differ in these bits: reduce over xor 1, 2, 4 or 4, 8, 16.
  static constexpr int kFirstXor = kKeyContiguous ? 1 : 4;
  // The one lane of each column group that writes the output.
  __device__ bool writes_output() const { return kKeyContiguous ? lane % 8 == 0 : lane / 4 == 0; }
};

template <di_gdn_state_layout Layout, bool kNormed>
__global__ void __launch_bounds__(kThreads) gdn_decode_step_kernel(const GdnDecodeParams p) {
  __shared__ float q_norm[kWarps][kHeadDim];  // per warp: the normalised q and k of the token
  __shared__ float k_norm[kWarps][kHeadDim];
  __shared__ __align__(16) float o_half[kColsPerCta];  // kNormed: this CTA's half of o, bf16-rounded

  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const int Hk = p.geometry.num_k_heads, Hv = p.geometry.num_v_heads;
  const int part = int(blockIdx.x % kCtasPerHead);
  const int head = int((blockIdx.x / kCtasPerHead) % Hv);
  const int seq = int(blockIdx.x / (uint32_t(kCtasPerHead) * uint32_t(Hv)));
  const int key_head = head / (Hv / Hk);
  const StateBlock<Layout> block{lane};
  const int col0 = part * kColsPerCta + warp * kColsPerWarp + 4 * block.col_quad();  // first of 4 columns

  bf16* const out = static_cast<bf16*>(p.out) + (int64_t(seq) * Hv + head) * kHeadDim + col0;
  // Launched early (programmatic dependent launch), this kernel may start while the kernel ahead (the
  // step's conv) runs, but every kernel before that one has finished: each waits for its own
  // predecessor before it lets the next start. So the slots (copied in before the step) and the state
  // (last written by this layer's previous step) are read before the wait, and their loads overlap
  // the conv's tail; q, k, v, a and b come from the conv, and every write follows the wait.
  const int64_t slot = p.state_indices ? p.state_indices[seq] : seq;
  if (slot < 0) {  // a padding row: zero output, state untouched
    kernels::wait_for_prior_grid();
    kernels::allow_dependent_grid();
    if (block.writes_output()) *reinterpret_cast<uint2*>(out) = make_uint2(0u, 0u);
    return;
  }
  float* const state = p.state + (slot * Hv + head) * int64_t(kHeadDim) * kHeadDim;

  // Issue the state loads first: they are the traffic, everything else hides under them.
  float S[kKeysPerThread][4];
  if constexpr (StateBlock<Layout>::kKeyContiguous) {
#pragma unroll
    for (int c = 0; c < 4; ++c)
#pragma unroll
      for (int jb = 0; jb < 4; ++jb) {
        const float4 x = *reinterpret_cast<const float4*>(state + int64_t(col0 + c) * kHeadDim + block.key(4 * jb));
        S[4 * jb][c] = x.x, S[4 * jb + 1][c] = x.y, S[4 * jb + 2][c] = x.z, S[4 * jb + 3][c] = x.w;
      }
  } else {
#pragma unroll
    for (int j = 0; j < kKeysPerThread; ++j) {
      const float4 x = *reinterpret_cast<const float4*>(state + int64_t(block.key(j)) * kHeadDim + col0);
      S[j][0] = x.x, S[j][1] = x.y, S[j][2] = x.z, S[j][3] = x.w;
    }
  }

  const float dt_bias = p.dt_bias[head], A_log = p.A_log[head];  // parameters
  float norm_w[4];
  if constexpr (kNormed) {
    const float4 w = *reinterpret_cast<const float4*>(p.norm_weight + col0);
    norm_w[0] = w.x, norm_w[1] = w.y, norm_w[2] = w.z, norm_w[3] = w.w;
  }
  kernels::wait_for_prior_grid();
  kernels::allow_dependent_grid();

  // q, k = x * rsqrt(sum x^2 + eps) (each warp for itself: lane l holds elements 4l .. 4l+3).
  const bf16* const row = static_cast<const bf16*>(p.qkv) + int64_t(seq) * p.qkv_row_stride;
  // Every input of the token issued at once (one round trip): q, k, v, a and b.
  float q_raw[4], k_raw[4], v[4];
  load_bf16x4(row + key_head * kHeadDim + 4 * lane, q_raw);
  load_bf16x4(row + (Hk + key_head) * kHeadDim + 4 * lane, k_raw);
  load_bf16x4(row + 2 * Hk * kHeadDim + head * kHeadDim + col0, v);
  const int64_t gate = int64_t(seq) * Hv + head;
  const float a = __bfloat162float(static_cast<const bf16*>(p.a)[gate]);
  const float b = __bfloat162float(static_cast<const bf16*>(p.b)[gate]);
  float z[4];
  if constexpr (kNormed) load_bf16x4(static_cast<const bf16*>(p.z) + gate * kHeadDim + col0, z);
  float qq = 0.f, kk = 0.f;
#pragma unroll
  for (int i = 0; i < 4; ++i) qq = fmaf(q_raw[i], q_raw[i], qq), kk = fmaf(k_raw[i], k_raw[i], kk);
  const float q_inv = 1.0f / sqrtf(warp_sum(qq) + kNormEps);
  const float k_inv = 1.0f / sqrtf(warp_sum(kk) + kNormEps);
  float qk_part = 0.f;
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const float qn = q_raw[i] * q_inv, kn = k_raw[i] * k_inv;
    q_norm[warp][4 * lane + i] = qn;
    k_norm[warp][4 * lane + i] = kn;
    qk_part = fmaf(qn, kn, qk_part);
  }
  const float k_dot_q = warp_sum(qk_part);
  __syncwarp();

  // g = -exp(A_log) softplus(a + dt_bias);  beta = bf16(sigmoid(b)), as a bf16 run rounds it.
  const float x = a + dt_bias;
  const float softplus = x > 20.0f ? x : log1pf(expf(x));
  const float g = -expf(A_log) * softplus;
  const float beta = __bfloat162float(__float2bfloat16_rn(1.0f / (1.0f + expf(-b))));
  const float decay = expf(g);


  // Partial Sᵀk and Sᵀq over the thread's 16 key rows, then over the 8 lanes sharing the columns.
  float k_reg[kKeysPerThread];
  float sk[4] = {0.f, 0.f, 0.f, 0.f}, sq[4] = {0.f, 0.f, 0.f, 0.f};
#pragma unroll
  for (int j = 0; j < kKeysPerThread; ++j) {
    k_reg[j] = k_norm[warp][block.key(j)];
    const float qj = q_norm[warp][block.key(j)];
#pragma unroll
    for (int c = 0; c < 4; ++c) sk[c] = fmaf(S[j][c], k_reg[j], sk[c]), sq[c] = fmaf(S[j][c], qj, sq[c]);
  }
#pragma unroll
  for (int m = StateBlock<Layout>::kFirstXor; m < 8 * StateBlock<Layout>::kFirstXor; m *= 2)
#pragma unroll
    for (int c = 0; c < 4; ++c) {
      sk[c] += __shfl_xor_sync(0xffffffffu, sk[c], m);
      sq[c] += __shfl_xor_sync(0xffffffffu, sq[c], m);
    }

  // v' = beta (v - exp(g) Sᵀk);   o = scale (exp(g) Sᵀq + (k·q) v')
  float v_new[4], o[4];
#pragma unroll
  for (int c = 0; c < 4; ++c) {
    v_new[c] = beta * (v[c] - decay * sk[c]);
    o[c] = p.scale * (decay * sq[c] + k_dot_q * v_new[c]);
  }
  if constexpr (kNormed) {
    if (block.writes_output()) {
      *reinterpret_cast<float4*>(&o_half[col0 - part * kColsPerCta]) =
          make_float4(round_bf16(o[0]), round_bf16(o[1]), round_bf16(o[2]), round_bf16(o[3]));
    }
    kernels::cluster_arrive_release();
  } else if (block.writes_output()) {
    *reinterpret_cast<uint2*>(out) = make_uint2(pack_bf16x2(o[0], o[1]), pack_bf16x2(o[2], o[3]));
  }

  // S_new = exp(g) S + k v'ᵀ, stored where it was loaded from.
#pragma unroll
  for (int j = 0; j < kKeysPerThread; ++j)
#pragma unroll
    for (int c = 0; c < 4; ++c) S[j][c] = fmaf(k_reg[j], v_new[c], decay * S[j][c]);
  if constexpr (StateBlock<Layout>::kKeyContiguous) {
#pragma unroll
    for (int c = 0; c < 4; ++c)
#pragma unroll
      for (int jb = 0; jb < 4; ++jb)
        *reinterpret_cast<float4*>(state + int64_t(col0 + c) * kHeadDim + block.key(4 * jb)) =
            make_float4(S[4 * jb][c], S[4 * jb + 1][c], S[4 * jb + 2][c], S[4 * jb + 3][c]);
  } else {
#pragma unroll
    for (int j = 0; j < kKeysPerThread; ++j)
      *reinterpret_cast<float4*>(state + int64_t(block.key(j)) * kHeadDim + col0) =
          make_float4(S[j][0], S[j][1], S[j][2], S[j][3]);
  }

  if constexpr (kNormed) {
    // The head's o in the gated norm's order: lane l sums elements l, l + 32 (half 0) and l + 64,
    // l + 96 (half 1), then the warp's butterfly; every warp gets the same factor.
    kernels::cluster_wait();
    kernels::StridedRow<4> row_o;
#pragma unroll
    for (int half = 0; half < kCtasPerHead; ++half) {
      const float* src = kernels::in_cluster_block(o_half, half);
      row_o.v[2 * half] = src[lane];
      row_o.v[2 * half + 1] = src[lane + 32];
    }
    const float s = kernels::inv_rms(kernels::warp_sum(row_o.sum_sq()), kHeadDim, p.norm_eps);
    kernels::cluster_arrive_release();  // this CTA's reads of the other's half are done
    if (block.writes_output()) {
      float y[4];
#pragma unroll
      for (int c = 0; c < 4; ++c) y[c] = kernels::gated_rms_normed(round_bf16(o[c]), s, norm_w[c], z[c]);
      *reinterpret_cast<uint2*>(out) = make_uint2(pack_bf16x2(y[0], y[1]), pack_bf16x2(y[2], y[3]));
    }
    kernels::cluster_wait();  // neither CTA leaves while the other may still read its shared memory
  }
}

bool aligned(const void* ptr, size_t bytes) { return reinterpret_cast<uintptr_t>(ptr) % bytes == 0; }

}  // namespace

cudaError_t launch_gdn_decode_step(const GdnDecodeParams& p, cudaStream_t stream) {
  const di_gdn_geometry& g = p.geometry;
  if (g.k_dim != kHeadDim || g.v_dim != kHeadDim || g.num_k_heads <= 0 || g.num_v_heads <= 0 ||
      g.num_v_heads % g.num_k_heads != 0 || p.num_seqs < 0)
    return cudaErrorInvalidValue;
  if (p.state_layout != DI_GDN_STATE_KV && p.state_layout != DI_GDN_STATE_VK) return cudaErrorInvalidValue;
  if (p.num_seqs == 0) return cudaSuccess;
  if (p.qkv == nullptr || p.a == nullptr || p.b == nullptr || p.A_log == nullptr || p.dt_bias == nullptr ||
      p.state == nullptr || p.out == nullptr)
    return cudaErrorInvalidValue;
  const int64_t row_width = int64_t(2 * g.num_k_heads + g.num_v_heads) * kHeadDim;
  if (p.qkv_row_stride < row_width || p.qkv_row_stride % 4 != 0 || !aligned(p.qkv, 8) || !aligned(p.out, 8) ||
      !aligned(p.state, 16))
    return cudaErrorInvalidValue;
  const bool normed = p.norm_weight != nullptr;
  if (normed && (p.z == nullptr || !aligned(p.z, 8) || !aligned(p.norm_weight, 16))) return cudaErrorInvalidValue;
  if (normed && !kernels::clusters_supported()) return cudaErrorNotSupported;
  const int64_t ctas = int64_t(p.num_seqs) * g.num_v_heads * kCtasPerHead;
  if (ctas > int64_t(INT32_MAX)) return cudaErrorInvalidValue;
  const bool kv = p.state_layout == DI_GDN_STATE_KV;
  if (normed)  // a head's two CTAs in one cluster (see the design note)
    return kernels::launch_early_in_clusters(
        kv ? gdn_decode_step_kernel<DI_GDN_STATE_KV, true> : gdn_decode_step_kernel<DI_GDN_STATE_VK, true>,
        dim3(unsigned(ctas)), dim3(kThreads), kCtasPerHead, 0, stream, p);
  return kernels::launch_early(
      kv ? gdn_decode_step_kernel<DI_GDN_STATE_KV, false> : gdn_decode_step_kernel<DI_GDN_STATE_VK, false>,
      dim3(unsigned(ctas)), dim3(kThreads), 0, stream, p);
}

bool gdn_decode_step_fuses_output_norm() { return kernels::clusters_supported(); }

}  // namespace di::gdn
