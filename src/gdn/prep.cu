#include "gdn/prep.h"
#include "kernels/cuda_common.cuh"

namespace di::gdn {

using kernels::bf16;
using kernels::round_bf16;
using kernels::to_bf16;
using kernels::to_f32;
using kernels::unpack_bf16x8;

namespace {

constexpr int kMaxConvKernel = 8;

// Input i of a sequence's context [state (K) | x (n)] for channel c.
__device__ __forceinline__ float conv_context(const ConvParams& p, const bf16* state, int64_t first, int64_t i,
                                              int32_t c) {
  return i < p.kernel ? to_f32(state[int64_t(c) * p.kernel + i])
                      : to_f32(static_cast<const bf16*>(p.x)[(first + i - p.kernel) * p.channels + c]);
}

// The channel of this thread in a (row, channel block) grid; past p.channels it has none.
__device__ __forceinline__ int32_t thread_channel() { return int32_t(blockIdx.y * blockDim.x + threadIdx.x); }
// Sequence s's conv state [C, K] in the pool.
__device__ __forceinline__ bf16* sequence_conv_state(const ConvParams& p, int32_t s) {
  return static_cast<bf16*>(p.conv_state) + int64_t(p.seq_slot[s]) * p.channels * p.kernel;
}

// grid (N, channel blocks): one thread per (token, channel). Reads the old state, writes only out.
__global__ void conv1d_silu_kernel(ConvParams p) {
  kernels::wait_for_prior_grid();
  kernels::allow_dependent_grid();
  const int64_t t = blockIdx.x;
  const int32_t c = thread_channel();
  if (c >= p.channels) return;
  const int32_t s = p.token_seq[t];
  const int64_t first = p.cu_seqlens[s];
  const bf16* state = sequence_conv_state(p, s);
  const int64_t i = t - first;  // index within the sequence's piece
  // Output i sees the K inputs ending at itself: ctx[i + 1 .. i + K], summed in the reference's order.
  float acc = 0.0f;
  for (int32_t j = 0; j < p.kernel; ++j) acc += p.weight[int64_t(c) * p.kernel + j] * conv_context(p, state, first, i + 1 + j, c);
  static_cast<bf16*>(p.out)[t * p.channels + c] = to_bf16(kernels::silu(round_bf16(acc)));
}

// The prefill conv in vectors, for kK taps where the rows allow 16-byte access (C % 8 == 0; x, out
// and the taps 16-byte aligned): grid (runs of kConvRun tokens, channel blocks); a thread takes 8
// adjacent channels of a run. Its taps are loaded once for the run, its tokens' inputs all issued at
// once (16 bytes each), and the window of each output's kK inputs slides along the run (rebuilt where
// a sequence starts), each output stored in 16 bytes. The scalar kernel above moves 64 bytes a warp
// instruction and reads every input and tap again for each token: it ran at an eighth of the
// bandwidth. Each output's sum is that kernel's, in its order: the same bits.
constexpr int kConvRun = 8;
template <int kK>
__global__ void conv1d_silu_vector_kernel(ConvParams p) {
  kernels::wait_for_prior_grid();
  kernels::allow_dependent_grid();
  const int32_t c0 = 8 * thread_channel();
  if (c0 >= p.channels) return;
  const bf16* const x = static_cast<const bf16*>(p.x);
  const int64_t t0 = int64_t(blockIdx.x) * kConvRun;
  uint4 inputs[kConvRun];
#pragma unroll
  for (int r = 0; r < kConvRun; ++r)
    inputs[r] = t0 + r < p.tokens ? *reinterpret_cast<const uint4*>(x + (t0 + r) * p.channels + c0) : uint4{};
  // The taps of the 8 channels: [c][j], 8 kK consecutive floats.
  float w[8][kK];
  const float4* taps = reinterpret_cast<const float4*>(p.weight + int64_t(c0) * kK);
#pragma unroll
  for (int q = 0; q < 2 * kK; ++q) {
    const float4 f = __ldg(taps + q);
    const int e = 4 * q;
    w[e / kK][e % kK] = f.x, w[(e + 1) / kK][(e + 1) % kK] = f.y;
    w[(e + 2) / kK][(e + 2) % kK] = f.z, w[(e + 3) / kK][(e + 3) % kK] = f.w;
  }
  // ctx[j][v]: input i + 1 + j of channel c0 + v for the token's output i (j = kK - 1 is its own).
  float ctx[kK][8];
  int32_t s = -1;
#pragma unroll
  for (int r = 0; r < kConvRun; ++r) {
    const int64_t t = t0 + r;
    if (t >= p.tokens) break;
    const int32_t seq = p.token_seq[t];
    if (seq != s) {  // the run's first token, or its sequence's: the window from the state and x
      s = seq;
      const int64_t first = p.cu_seqlens[s], i = t - first;
      const bf16* const state = sequence_conv_state(p, s);
#pragma unroll
      for (int j = 0; j + 1 < kK; ++j) {
        const int64_t m = i + 1 + j;  // index in [state (kK) | x of the piece]
        if (m >= kK) {
          unpack_bf16x8(*reinterpret_cast<const uint4*>(x + (first + m - kK) * p.channels + c0), ctx[j]);
        } else {
#pragma unroll
          for (int v = 0; v < 8; ++v) ctx[j][v] = to_f32(state[int64_t(c0 + v) * kK + m]);
        }
      }
    } else {
#pragma unroll
      for (int j = 0; j + 1 < kK; ++j)
#pragma unroll
        for (int v = 0; v < 8; ++v) ctx[j][v] = ctx[j + 1][v];
    }
    unpack_bf16x8(inputs[r], ctx[kK - 1]);
    float y[8];
#pragma unroll
    for (int v = 0; v < 8; ++v) {
      float acc = 0.0f;
#pragma unroll
      for (int j = 0; j < kK; ++j) acc += w[v][j] * ctx[j][v];
      y[v] = kernels::silu(round_bf16(acc));
    }
    *reinterpret_cast<uint4*>(static_cast<bf16*>(p.out) + t * p.channels + c0) = kernels::pack_bf16x8(y);
  }
}

// grid (num_seqs, channel blocks): the state becomes ctx[n .. n + K - 1]. Each thread reads all K
// old values of its channel before writing, so the update is safe in place.
__global__ void conv_state_update_kernel(ConvParams p) {
  kernels::wait_for_prior_grid();
  kernels::allow_dependent_grid();
  const int32_t s = blockIdx.x;
  const int32_t c = thread_channel();
  if (c >= p.channels) return;
  const int64_t first = p.cu_seqlens[s], n = p.cu_seqlens[s + 1] - first;
  bf16* state = sequence_conv_state(p, s);
  float next[kMaxConvKernel];
  for (int32_t j = 0; j < p.kernel; ++j) next[j] = conv_context(p, state, first, n + j, c);
  for (int32_t j = 0; j < p.kernel; ++j) state[int64_t(c) * p.kernel + j] = to_bf16(next[j]);
}

// grid (num_seqs, channel blocks), one token per sequence: the conv of conv1d_silu_kernel and the
// state update of conv_state_update_kernel in one pass (same values, same order), since the thread
// that reads a (sequence, channel)'s context is the only one that writes its state.
// Launched early, it may start while the kernel ahead (the input projections) runs, but every kernel
// before that one has finished (each waits for its own predecessor before it lets the next start).
// So everything but the token's input is read before the wait, together: the sequence's row and slot
// (copied in before the step), the weights, and the state (last written by this layer's previous
// step). Register arrays indexed only by unrolled constants, so they stay in registers.
__global__ void conv1d_silu_one_token_kernel(ConvParams p) {
  const int32_t s = blockIdx.x;
  const int32_t c = thread_channel();
  const bool active = c < p.channels;
  float weight[kMaxConvKernel], ctx[kMaxConvKernel + 1];
  int64_t t = 0;
  bf16* state = nullptr;
  if (active) {
    t = p.cu_seqlens[s];
    state = sequence_conv_state(p, s);
#pragma unroll
    for (int32_t j = 0; j < kMaxConvKernel; ++j)
      if (j < p.kernel) {
        weight[j] = p.weight[int64_t(c) * p.kernel + j];
        ctx[j] = to_f32(state[int64_t(c) * p.kernel + j]);
      }
  }
  kernels::wait_for_prior_grid();
  kernels::allow_dependent_grid();
  if (!active) return;
  const float x = to_f32(static_cast<const bf16*>(p.x)[t * p.channels + c]);
#pragma unroll
  for (int32_t j = 0; j <= kMaxConvKernel; ++j)
    if (j == p.kernel) ctx[j] = x;
  float acc = 0.0f;
#pragma unroll
  for (int32_t j = 0; j < kMaxConvKernel; ++j)
    if (j < p.kernel) acc += weight[j] * ctx[1 + j];
  static_cast<bf16*>(p.out)[t * p.channels + c] = to_bf16(kernels::silu(round_bf16(acc)));
#pragma unroll
  for (int32_t j = 0; j < kMaxConvKernel; ++j)
    if (j < p.kernel) state[int64_t(c) * p.kernel + j] = to_bf16(ctx[1 + j]);
}

// One block per token, one warp per head: q and k rows L2-normalised (x / sqrt(sum x^2 + 1e-6)) or
// copied raw, v copied, gates computed by the first Hv threads. In 16-byte vectors (the launch
// requires dims that are multiples of 8 and 16-byte aligned rows): lane l takes elements
// [8l, 8l + 8) of each 256 of a head, so a 128-wide head is half a warp's load. The sum of squares
// is each lane's 8 in order, then the warp's butterfly.
__global__ void prefill_inputs_kernel(PrefillInputParams p) {
  const int64_t t = blockIdx.x;
  const int64_t qk_width = int64_t(p.num_k_heads) * p.k_dim, v_width = int64_t(p.num_v_heads) * p.v_dim;
  const bf16* row = static_cast<const bf16*>(p.qkv) + t * (2 * qk_width + v_width);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, warps = blockDim.x / 32;
  for (int head = warp; head < 2 * p.num_k_heads; head += warps) {  // heads of q, then of k
    const uint4* src = reinterpret_cast<const uint4*>(row + int64_t(head) * p.k_dim);
    float sum = 0.0f;
    for (int i = lane; i < p.k_dim / 8 && p.normalize_qk; i += 32) {
      float x[8];
      unpack_bf16x8(src[i], x);
#pragma unroll
      for (int e = 0; e < 8; ++e) sum += x[e] * x[e];
    }
    const float inv = p.normalize_qk ? 1.0f / sqrtf(kernels::warp_sum(sum) + 1e-6f) : 1.0f;
    const bool is_q = head < p.num_k_heads;
    uint4* dst = reinterpret_cast<uint4*>(static_cast<bf16*>(is_q ? p.q : p.k) + t * qk_width +
                                          int64_t(is_q ? head : head - p.num_k_heads) * p.k_dim);
    for (int i = lane; i < p.k_dim / 8; i += 32) {
      float x[8];
      unpack_bf16x8(src[i], x);
#pragma unroll
      for (int e = 0; e < 8; ++e) x[e] *= inv;
      dst[i] = kernels::pack_bf16x8(x);
    }
  }
  const uint4* v_src = reinterpret_cast<const uint4*>(row + 2 * qk_width);
  uint4* v_dst = reinterpret_cast<uint4*>(static_cast<bf16*>(p.v) + t * v_width);
  for (int64_t i = threadIdx.x; i < v_width / 8; i += blockDim.x) v_dst[i] = v_src[i];
  for (int h = threadIdx.x; h < p.num_v_heads; h += blockDim.x) {
    const float a = to_f32(static_cast<const bf16*>(p.a)[t * p.num_v_heads + h]);
    const float b = to_f32(static_cast<const bf16*>(p.b)[t * p.num_v_heads + h]);
    p.g[t * p.num_v_heads + h] = -expf(p.A_log[h]) * kernels::softplus(a + p.dt_bias[h]);
    p.beta[t * p.num_v_heads + h] = round_bf16(kernels::sigmoid(b));
  }
}

bool aligned16(const void* ptr) { return reinterpret_cast<uintptr_t>(ptr) % 16 == 0; }

}  // namespace

cudaError_t launch_conv1d_silu(const ConvParams& p, cudaStream_t stream) {
  if (p.tokens < 0 || p.num_seqs < 0 || p.channels <= 0 || p.kernel <= 0 || p.kernel > kMaxConvKernel || !p.x ||
      !p.weight || !p.conv_state || !p.cu_seqlens || !p.token_seq || !p.seq_slot || !p.out)
    return cudaErrorInvalidValue;
  const unsigned channel_blocks = kernels::ceil_div(p.channels, 256);
  if (p.one_token_each) {
    if (p.tokens != p.num_seqs) return cudaErrorInvalidValue;
    if (p.num_seqs == 0) return cudaSuccess;
    return kernels::launch_early(conv1d_silu_one_token_kernel, dim3(unsigned(p.num_seqs), channel_blocks), dim3(256),
                                 0, stream, p);
  }
  // The state update waits for the conv, which reads the state it replaces.
  constexpr int kVectorTaps = 4;  // every Qwen3.5 model's; other kernel sizes take the scalar kernel
  const bool vectors =
      p.kernel == kVectorTaps && p.channels % 8 == 0 && aligned16(p.x) && aligned16(p.out) && aligned16(p.weight);
  if (p.tokens > 0) {
    const cudaError_t e =
        vectors ? kernels::launch_early(conv1d_silu_vector_kernel<kVectorTaps>,
                                        dim3(kernels::ceil_div(p.tokens, kConvRun), kernels::ceil_div(p.channels / 8, 256)),
                                        dim3(256), 0, stream, p)
                : kernels::launch_early(conv1d_silu_kernel, dim3(unsigned(p.tokens), channel_blocks), dim3(256), 0,
                                        stream, p);
    if (e != cudaSuccess) return e;
  }
  if (p.num_seqs > 0)
    return kernels::launch_early(conv_state_update_kernel, dim3(unsigned(p.num_seqs), channel_blocks), dim3(256), 0,
                                 stream, p);
  return cudaSuccess;
}

cudaError_t launch_prefill_inputs(const PrefillInputParams& p, cudaStream_t stream) {
  if (p.tokens < 0 || p.num_k_heads <= 0 || p.num_v_heads <= 0 || p.k_dim <= 0 || p.v_dim <= 0 || !p.qkv || !p.a ||
      !p.b || !p.A_log || !p.dt_bias || !p.q || !p.k || !p.v || !p.g || !p.beta)
    return cudaErrorInvalidValue;
  // 16-byte vectors (every Qwen3.5 head dim is 128).
  if (p.k_dim % 8 != 0 || p.v_dim % 8 != 0 || !aligned16(p.qkv) || !aligned16(p.q) || !aligned16(p.k) ||
      !aligned16(p.v))
    return cudaErrorInvalidValue;
  if (p.tokens == 0) return cudaSuccess;
  prefill_inputs_kernel<<<unsigned(p.tokens), 256, 0, stream>>>(p);
  return cudaGetLastError();
}

}  // namespace di::gdn
