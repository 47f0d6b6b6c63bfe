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
//
// The conv (kConv, with the norm): qkv is then the conv's input, and the step computes the token's
// conv outputs itself, as the one-token conv kernel does (gdn/prep.cu), rather than reading them
// from that kernel's output: one launch and one dependent round trip fewer per layer. The q and k
// channels of a key head are read by all its value heads, and the old conv state may be replaced
// only once every reader has it; so a CTA pair (a cluster, one CTA per half as above) serves a whole
// key head, 4 warps per value head, and the first CTA replaces the q and k states after the cluster
// barrier. (Clusters of 2 Hv/Hk CTAs, one per half head, measured 3 us slower at 8 and 16 sequences:
// the GPU holds 124 clusters of 4 at once against 264 of 2.) The threads convolve the 256 q and k
// channels and the CTA's v columns into shared memory, their states and taps staged there before
// the wait; after a CTA barrier every warp reads them as it read the conv's output.
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
constexpr int kConvTaps = 4;            // the fused conv's kernel size (every Qwen3.5 model's)
constexpr int kMaxHeadsPerKeyHead = 4;  // the fused conv's CTAs: 4 warps per value head of a key head

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

// The conv of one channel for one token, as conv1d_silu_one_token_kernel computes it: the output
// bf16(silu(bf16(sum_j w_j ctx_j))) over ctx = [state 1..3 | x] (state: the channel's 4 newest
// earlier inputs, bf16, oldest first), and the state that replaces it, [state 1..3 | x].
struct ConvChannel {
  uint2 state;  // 4 bf16
  uint16_t x;   // the token's input
  float4 taps;
  __device__ float output() const {
    const float ctx[kConvTaps] = {bf16_hi(state.x), bf16_lo(state.y), bf16_hi(state.y),
                                  __uint_as_float(uint32_t(x) << 16)};
    const float w[kConvTaps] = {taps.x, taps.y, taps.z, taps.w};
    float acc = 0.0f;
#pragma unroll
    for (int j = 0; j < kConvTaps; ++j) acc += w[j] * ctx[j];
    return round_bf16(kernels::silu(round_bf16(acc)));
  }
  __device__ uint2 next_state() const {
    return make_uint2((state.x >> 16) | (state.y << 16), (state.y >> 16) | (uint32_t(x) << 16));
  }
};

// A channel's state and taps in shared memory, copied there ahead of the wait (they do not depend on
// the kernel ahead), each by the thread that convolves the channel.
struct ConvStaging {
  uint2 state;
  float4 taps;
};
constexpr int kQkChannels = 2 * kHeadDim;  // a key head's q and k channels
__device__ __forceinline__ void stage_conv_channel(const GdnDecodeParams& p, const uint2* conv_state, int64_t c,
                                                   ConvStaging& to) {
  kernels::cp_async_8(&to.state, conv_state + c);
  kernels::cp_async_16(&to.taps, p.conv_weight + c * kConvTaps, 16);
}

template <di_gdn_state_layout Layout, bool kNormed, bool kConv>
__global__ void __launch_bounds__(kConv ? kThreads * kMaxHeadsPerKeyHead : kThreads)
    gdn_decode_step_kernel(const GdnDecodeParams p) {
  static_assert(kNormed || !kConv, "the fused conv runs in the norm's clusters");
  constexpr int kHeadsPerCta = kConv ? kMaxHeadsPerKeyHead : 1;  // at most
  __shared__ float q_norm[kWarps * kHeadsPerCta][kHeadDim];  // per warp: the normalised q and k of the token
  __shared__ float k_norm[kWarps * kHeadsPerCta][kHeadDim];
  __shared__ __align__(16) float o_half[kHeadsPerCta][kColsPerCta];  // kNormed: each head's part of o, bf16-rounded
  // kConv: the conv's outputs (the key head's q and k, the CTA's v columns) and its staged inputs.
  __shared__ float conv_qk[kConv ? kQkChannels : 1], conv_v[kConv ? kHeadsPerCta * kColsPerCta : 1];
  __shared__ __align__(16) ConvStaging staging_qk[kConv ? kQkChannels : 1];
  __shared__ __align__(16) ConvStaging staging_v[kConv ? kHeadsPerCta * kColsPerCta : 1];

  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const int Hk = p.geometry.num_k_heads, Hv = p.geometry.num_v_heads, ratio = Hv / Hk;
  const int part = int(blockIdx.x % kCtasPerHead);
  // A CTA pair serves (sequence, value head) or, with the conv, (sequence, key head): then its warps
  // take the key head's value heads four at a time, head_in_cta = warp / 4.
  const int heads_apart = kConv ? Hk : Hv;
  const int group = int((blockIdx.x / kCtasPerHead) % uint32_t(heads_apart));
  const int seq = int(blockIdx.x / (uint32_t(kCtasPerHead) * uint32_t(heads_apart)));
  const int head_in_cta = kConv ? warp / kWarps : 0;
  const int head = kConv ? group * ratio + head_in_cta : group;
  const int key_head = kConv ? group : head / ratio;
  const StateBlock<Layout> block{lane};
  const int col_in_part = (warp % kWarps) * kColsPerWarp + 4 * block.col_quad();
  const int col0 = part * kColsPerCta + col_in_part;  // first of the thread's 4 columns

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

  // The conv (kConv): the key head's 256 q and k channels, then the CTA's v columns (64 a value
  // head), one or two per thread; their states and taps on their way to shared memory before the
  // wait, and ahead of the recurrent state, so that they have landed when the token's input has.
  const int t = threadIdx.x, threads = int(blockDim.x);
  auto qk_channel = [&](int i) {  // i < 256: q (i < 128), then k, of the key head
    return int64_t(i < kHeadDim ? key_head : Hk + key_head) * kHeadDim + i % kHeadDim;
  };
  const int v_columns = ratio * kColsPerCta;
  auto v_channel = [&](int i) {  // i < v_columns
    return int64_t(2 * Hk + key_head * ratio + i / kColsPerCta) * kHeadDim + part * kColsPerCta + i % kColsPerCta;
  };
  uint2* conv_state = nullptr;
  if constexpr (kConv) {
    conv_state = static_cast<uint2*>(p.conv_state) + slot * (int64_t(2 * Hk + Hv) * kHeadDim);  // [C] of 4 bf16
    for (int i = t; i < kQkChannels; i += threads) stage_conv_channel(p, conv_state, qk_channel(i), staging_qk[i]);
    if (t < v_columns) stage_conv_channel(p, conv_state, v_channel(t), staging_v[t]);
    kernels::cp_async_commit();
  }

  // Then the state loads: they are the traffic, everything else hides under them.
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
  // Every input of the token issued at once (one round trip): q, k, v (or the conv's inputs), a, b.
  const uint16_t* const raw = reinterpret_cast<const uint16_t*>(row);
  uint16_t x_qk[2] = {}, x_v = 0;  // kConv: the inputs of this thread's channels
  float q_raw[4], k_raw[4], v[4];
  if constexpr (kConv) {
#pragma unroll
    for (int n = 0; n < 2; ++n)
      if (t + n * threads < kQkChannels) x_qk[n] = raw[qk_channel(t + n * threads)];
    if (t < v_columns) x_v = raw[v_channel(t)];
  } else {
    load_bf16x4(row + key_head * kHeadDim + 4 * lane, q_raw);
    load_bf16x4(row + (Hk + key_head) * kHeadDim + 4 * lane, k_raw);
    load_bf16x4(row + 2 * Hk * kHeadDim + head * kHeadDim + col0, v);
  }
  const int64_t gate = int64_t(seq) * Hv + head;
  const float a = __bfloat162float(static_cast<const bf16*>(p.a)[gate]);
  const float b = __bfloat162float(static_cast<const bf16*>(p.b)[gate]);
  float z[4];
  if constexpr (kNormed) load_bf16x4(static_cast<const bf16*>(p.z) + gate * kHeadDim + col0, z);
  ConvChannel conv_of_qk[2], conv_of_v;  // kConv: this thread's channels, for their new states
  if constexpr (kConv) {  // the conv's outputs through shared memory, then read as the conv kernel's
    kernels::cp_async_wait_all();  // this thread's own copies: no barrier needed to read them
#pragma unroll
    for (int n = 0; n < 2; ++n) {
      const int i = t + n * threads;
      if (i < kQkChannels) {
        conv_of_qk[n] = ConvChannel{staging_qk[i].state, x_qk[n], staging_qk[i].taps};
        conv_qk[i] = conv_of_qk[n].output();
      }
    }
    if (t < v_columns) {
      conv_of_v = ConvChannel{staging_v[t].state, x_v, staging_v[t].taps};
      conv_v[t] = conv_of_v.output();
    }
    __syncthreads();
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      q_raw[i] = conv_qk[4 * lane + i];
      k_raw[i] = conv_qk[kHeadDim + 4 * lane + i];
      v[i] = conv_v[head_in_cta * kColsPerCta + col_in_part + i];
    }
  }
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
      *reinterpret_cast<float4*>(&o_half[head_in_cta][col_in_part]) =
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
    if constexpr (kConv) {
      // Both CTAs of the key head have read its old conv states: replace them (q and k by the first).
#pragma unroll
      for (int n = 0; n < 2; ++n)
        if (part == 0 && t + n * threads < kQkChannels) conv_state[qk_channel(t + n * threads)] = conv_of_qk[n].next_state();
      if (t < v_columns) conv_state[v_channel(t)] = conv_of_v.next_state();
    }
    kernels::StridedRow<4> row_o;
#pragma unroll
    for (int half = 0; half < kCtasPerHead; ++half) {
      const float* src = kernels::in_cluster_block(&o_half[head_in_cta][0], half);
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
  const bool conv = p.conv_weight != nullptr;
  if (conv && (!normed || p.conv_state == nullptr || !aligned(p.conv_state, 8) || !aligned(p.conv_weight, 16)))
    return cudaErrorInvalidValue;
  if (conv && !gdn_decode_step_fuses_conv(g)) return cudaErrorNotSupported;
  const int64_t ctas = int64_t(p.num_seqs) * g.num_v_heads * kCtasPerHead;
  if (ctas > int64_t(INT32_MAX)) return cudaErrorInvalidValue;
  const bool kv = p.state_layout == DI_GDN_STATE_KV;
  if (conv)  // a CTA pair per key head, 4 warps per value head (see the design note)
    return kernels::launch_early_in_clusters(
        kv ? gdn_decode_step_kernel<DI_GDN_STATE_KV, true, true> : gdn_decode_step_kernel<DI_GDN_STATE_VK, true, true>,
        dim3(unsigned(int64_t(p.num_seqs) * g.num_k_heads * kCtasPerHead)),
        dim3(unsigned(kThreads * (g.num_v_heads / g.num_k_heads))), kCtasPerHead, 0, stream, p);
  if (normed)  // a head's two CTAs in one cluster (see the design note)
    return kernels::launch_early_in_clusters(
        kv ? gdn_decode_step_kernel<DI_GDN_STATE_KV, true, false> : gdn_decode_step_kernel<DI_GDN_STATE_VK, true, false>,
        dim3(unsigned(ctas)), dim3(kThreads), kCtasPerHead, 0, stream, p);
  return kernels::launch_early(
      kv ? gdn_decode_step_kernel<DI_GDN_STATE_KV, false, false> : gdn_decode_step_kernel<DI_GDN_STATE_VK, false, false>,
      dim3(unsigned(ctas)), dim3(kThreads), 0, stream, p);
}

bool gdn_decode_step_fuses_output_norm() { return kernels::clusters_supported(); }

bool gdn_decode_step_fuses_conv(const di_gdn_geometry& g) {
  return kernels::clusters_supported() && g.num_k_heads > 0 && g.num_v_heads % g.num_k_heads == 0 &&
         g.num_v_heads / g.num_k_heads <= kMaxHeadsPerKeyHead;
}

}  // namespace di::gdn
