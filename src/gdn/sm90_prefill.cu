// The Hopper GDN chunked prefill, "sm90": chunk length C = 64, K = V = 128, every chunk product on
// warpgroup MMA (wgmma, bf16 operands from shared memory, f32 accumulators).
//
// Math: as in baseline_prefill.cu (GDN_KERNELS.md 1.2, "no W/U materialisation"), per chunk of 64
// tokens entering with state S0 [K, V]:
//   P      = scale · Gamma ⊙ Q Kᵀ ⊙ causal (diagonal included)     L = strict_lower(diag(beta) Gamma ⊙ K Kᵀ)
//   Tinv   = (I + L)^-1                                             (float32, forward substitution + merges)
//   X      = diag(beta) (V - D · K · S0)                            Vnew = Tinv · X
//   O      = scale · D · Q · S0 + P · Vnew
//   S      = exp(G_last) S0 + Kᵀ · W,   W = diag(exp(G_last - G)) Vnew
// with the q and k inverse norms (DI_GDN_QK_L2NORM) folded in as row and column scalings.
//
// Design. One CTA = one warpgroup (128 threads) owns (sequence, value head, half of the 128 value
// columns): it reads its [128, 64] state slice once, keeps it in f32 wgmma accumulators (two
// m64n64 tiles, 64 registers per thread) for the whole sequence, and writes it once. Two CTAs fit an
// SM (shared memory 109,056 bytes each, at most 255 registers per thread), so one CTA's serial chain
// (the inverse, the chunk-to-chunk state dependency) overlaps the other's tensor-core work.
// Per chunk (GEMM shapes M x N x contraction; every one an m64n64k16 sequence):
//   gram      Q Kᵀ, K Kᵀ               64 x 64 x 128, both            -> P (bf16), L (f32) in shared memory
//   K S, Q S  64 x 64 x 128, both, issued before the inverse and awaited after it (the inverse runs
//             on the CUDA cores, register-tiled, while the tensor cores work)
//   Vnew      Tinv X as hi/lo products   64 x 64 x 64 (three)
//   output    (scaled Q S) + P Vnew_hi + P Vnew_lo   64 x 64 x 64 (two), onto the Q S registers
//   state     S += Kᵀ W_hi + Kᵀ W_lo     (128 = 2 x 64) x 64 x 64 (four)
// Numerics. Products of bf16 operands are exact in the f32 accumulators; what rounds is an operand
// made from f32 values. The kernel keeps ~16 bits (a bf16 hi + lo pair) where that rounding was
// measured to dominate the error against the float64 oracle: Tinv, X, W and Vnew; Kᵀ is the raw bf16
// input, exact. Sᵀ (for K S, Q S) and P are single bf16: with everything else single, splitting Sᵀ
// changed no error statistic, splitting W took the state's max error from 4.4e-3 to 2.3e-3 and
// splitting X as well to 1.6e-5 (docs/benchmarks/gdn-sm90.md). A P or Sᵀ split would cost one more
// operand of shared memory each, and with it the second CTA per SM.
// Operands live in shared memory in the no-swizzle canonical layout of kernels/wgmma.cuh; those
// made from registers are written there by the threads, then fenced for the async proxy. The next
// chunk's Q and K are fetched with cp.async while the chunk's last products run, V once X's low part
// (which borrows V's region) is consumed. No atomics, no scratch, no host synchronisation.
//
// FLOP per chunk and CTA (tensor cores): gram 2.10 M, K S + Q S 2.10 M, Vnew 1.57 M, output 1.05 M,
// state 2.10 M: 8.9 MFLOP; per value head (2 CTAs) 17.8 MFLOP against the fused ideal of 10.5 MFLOP
// (GDN_KERNELS.md 9.1): the two column halves each compute the Gram matrices and the inverse, and the
// hi/lo splits add 5.2 MFLOP per head.
#include "gdn/sm90_prefill.h"

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "gdn/backend_common.cuh"
#include "gdn/chunk_math.cuh"
#include "kernels/cuda_common.cuh"
#include "kernels/wgmma.cuh"

namespace di::gdn {
namespace {

using bf16 = __nv_bfloat16;
namespace wg = kernels::wgmma;
using kernels::cp_async_16;
using kernels::cp_async_commit;
using kernels::cp_async_wait_all;

constexpr int kChunk = kGdnChunk;      // C
constexpr int kHeadDim = 128;          // K == V
constexpr int kTileV = 64;             // value columns per CTA
constexpr int kTilesPerHead = kHeadDim / kTileV;
constexpr int kThreads = 128;          // one warpgroup
constexpr int kInvStride = kChunk + 4; // floats per row of the f32 (I + L) / Tinv matrix

// Shared memory (byte offsets; every region 128-byte aligned).
constexpr size_t kQkBytes = size_t(kChunk) * kHeadDim * 2;     // Q or K chunk: operand 64 x 128
constexpr size_t kVBytes = size_t(kChunk) * kTileV * 2;        // V rows of the tile, row-major [64][64]
constexpr size_t kStateOpBytes = size_t(kTileV) * kHeadDim * 2; // Sᵀ bf16: operand 64 (values) x 128 (keys)
constexpr size_t kMatOpBytes = size_t(kChunk) * kChunk * 2;    // P, Tinv hi/lo, X then Vnew: 64 x 64
constexpr size_t kInvBytes = size_t(kChunk) * kInvStride * 4;  // f32 (I + L) -> Tinv, then Kᵀ' (128 x 64 bf16)
constexpr size_t kVecBytes = size_t(kChunk) * 4;
constexpr size_t kOffQ = 0;
constexpr size_t kOffK = kOffQ + kQkBytes;
constexpr size_t kOffV = kOffK + kQkBytes;
constexpr size_t kOffSt = kOffV + kVBytes;
constexpr size_t kOffP = kOffSt + kStateOpBytes;
constexpr size_t kOffTHi = kOffP + kMatOpBytes;
constexpr size_t kOffTLo = kOffTHi + kMatOpBytes;
constexpr size_t kOffX = kOffTLo + kMatOpBytes;
constexpr size_t kOffInv = kOffX + kMatOpBytes;
constexpr size_t kOffVec = kOffInv + kInvBytes;  // G, beta, exp(G), tail, 1/|q|, 1/|k|
constexpr size_t kSmemBytes = kOffVec + 6 * kVecBytes;
static_assert(kSmemBytes == 109056, "the shared memory budget the header comment documents");
static_assert(kInvBytes >= size_t(kHeadDim) * kChunk * 2, "Kᵀ' reuses the inverse's region");
static_assert(kMatOpBytes >= 1024 * sizeof(float), "X's region is the inverse's merge scratch");
static_assert(kOffInv % 128 == 0 && kOffVec % 128 == 0, "aligned regions");

__device__ __forceinline__ uint32_t u32_at(const void* p) { return *reinterpret_cast<const uint32_t*>(p); }
__device__ __forceinline__ void store_bf16(unsigned char* base, uint32_t offset, float x) {
  *reinterpret_cast<bf16*>(base + offset) = __float2bfloat16_rn(x);
}

// Rows [t0, t0 + len) of one head of q or k ([T, heads, 128] bf16) into a 64 x 128 operand tile;
// rows past len are zeros. Thread tid copies 16-byte piece tid % 16 of rows tid / 16 + 8 e.
__device__ __forceinline__ void load_qk_async(unsigned char* tile, const bf16* src, int64_t t0, int len, int heads,
                                              int head, int tid) {
  const int row0 = tid / 16, part = tid % 16;
  unsigned char* dst = tile + wg::operand_offset(row0, part * 8, kHeadDim);
#pragma unroll
  for (int e = 0; e < kChunk / 8; ++e) {
    const int row = row0 + 8 * e;  // 8 rows further = one core-matrix row of the tile further
    const bool valid = row < len;
    const bf16* from = valid ? src + ((t0 + row) * heads + head) * kHeadDim + part * 8 : src;
    cp_async_16(dst + e * (kHeadDim / 8) * wg::kCoreBytes, from, valid ? 16 : 0);
  }
}

// Rows [t0, t0 + len) of the tile's 64 value columns ([T, heads, 128] bf16, from column v0) into a
// row-major [64][64] tile. Thread tid copies piece tid % 8 of rows tid / 8 + 16 e.
__device__ __forceinline__ void load_v_async(unsigned char* tile, const bf16* src, int64_t t0, int len, int heads,
                                             int head, int v0, int tid) {
  const int row0 = tid / 8, part = tid % 8;
#pragma unroll
  for (int e = 0; e < kChunk / 16; ++e) {
    const int row = row0 + 16 * e;
    const bool valid = row < len;
    const bf16* from = valid ? src + ((t0 + row) * heads + head) * kHeadDim + v0 + part * 8 : src;
    cp_async_16(tile + (row * kTileV + part * 8) * 2, from, valid ? 16 : 0);
  }
}

template <int n>
__device__ __forceinline__ void zero(float (&d)[n]) {
#pragma unroll
  for (int i = 0; i < n; ++i) d[i] = 0.f;
}

// Sᵀ in bf16 for the next K S and Q S: operand element (value column c, key row k). (A hi + lo split
// of S was measured to change no error statistic: X and W dominate, see the header.)
__device__ __forceinline__ void write_state_operand(const float (&state)[2][32], unsigned char* st_s,
                                                    const wg::Fragment& f) {
#pragma unroll
  for (int half = 0; half < 2; ++half)
#pragma unroll
    for (int i = 0; i < 32; ++i) store_bf16(st_s, f.transposed_offset(i, kHeadDim, 64 * half), state[half][i]);
}

__global__ void __launch_bounds__(kThreads, 2) gdn_sm90_prefill_kernel(const di_gdn_prefill_args args) {
#if defined(__CUDA_ARCH__) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
  extern __shared__ __align__(128) unsigned char smem[];
  unsigned char* const q_s = smem + kOffQ;
  unsigned char* const k_s = smem + kOffK;
  unsigned char* const v_s = smem + kOffV;
  unsigned char* const st_s = smem + kOffSt;
  unsigned char* const p_s = smem + kOffP;
  unsigned char* const t_hi_s = smem + kOffTHi;
  unsigned char* const t_lo_s = smem + kOffTLo;
  unsigned char* const x_s = smem + kOffX;
  float* const inv_s = reinterpret_cast<float*>(smem + kOffInv);  // [64][kInvStride]
  unsigned char* const kt_s = smem + kOffInv;                     // Kᵀ' operand 128 x 64, after the inverse
  float* const G_s = reinterpret_cast<float*>(smem + kOffVec);
  float* const beta_s = G_s + kChunk;
  float* const expG_s = beta_s + kChunk;
  float* const tail_s = expG_s + kChunk;
  float* const q_inv_s = tail_s + kChunk;
  float* const k_inv_s = q_inv_s + kChunk;
  const bool normalize_qk = (args.flags & DI_GDN_QK_L2NORM) != 0;

  const int tid = threadIdx.x, lane = tid % 32, warp = tid / 32;
  const wg::Fragment frag(tid);
  const int Hk = args.geometry.num_k_heads, Hv = args.geometry.num_v_heads;
  const int tile = int(blockIdx.x % kTilesPerHead);
  const int head = int((blockIdx.x / kTilesPerHead) % Hv);
  const int seq = int(blockIdx.x / (uint32_t(kTilesPerHead) * uint32_t(Hv)));
  const int key_head = head / (Hv / Hk);
  const int v0 = tile * kTileV;

  const bf16* const q = static_cast<const bf16*>(args.q);
  const bf16* const k = static_cast<const bf16*>(args.k);
  const bf16* const v = static_cast<const bf16*>(args.v);
  bf16* const out = static_cast<bf16*>(args.out);

  const int64_t seq_begin = args.cu_seqlens[seq];
  const int64_t seq_len = args.cu_seqlens[seq + 1] - seq_begin;
  const int num_chunks = int((seq_len + kChunk - 1) / kChunk);
  const int64_t slot = args.state_indices ? args.state_indices[seq] : seq;
  const int64_t state_base = (slot * Hv + head) * int64_t(kHeadDim) * kHeadDim;
  const bool kv_layout = args.state_layout == DI_GDN_STATE_KV;

  // The state slice in accumulator form: state[half][i] = S[64 half + row(i)][v0 + col(i)].
  float state[2][32];
  if (args.initial_state != nullptr && slot >= 0) {
    const float* src = args.initial_state + state_base;
#pragma unroll
    for (int half = 0; half < 2; ++half)
#pragma unroll
      for (int i = 0; i < 32; i += 2) {
        const int kr = 64 * half + frag.row(i), c = v0 + frag.col(i);
        if (kv_layout) {
          const float2 x = *reinterpret_cast<const float2*>(src + int64_t(kr) * kHeadDim + c);
          state[half][i] = x.x, state[half][i + 1] = x.y;
        } else {
          state[half][i] = src[int64_t(c) * kHeadDim + kr], state[half][i + 1] = src[int64_t(c + 1) * kHeadDim + kr];
        }
      }
  } else {
    zero(state[0]), zero(state[1]);
  }
  write_state_operand(state, st_s, frag);

  if (num_chunks > 0) {
    const int len0 = int(seq_len < kChunk ? seq_len : kChunk);
    load_qk_async(q_s, q, seq_begin, len0, Hk, key_head, tid);
    load_qk_async(k_s, k, seq_begin, len0, Hk, key_head, tid);
    load_v_async(v_s, v, seq_begin, len0, Hv, head, v0, tid);
    cp_async_commit();
  }

  for (int chunk = 0; chunk < num_chunks; ++chunk) {
    const int64_t t0 = seq_begin + int64_t(chunk) * kChunk;
    const int64_t remaining = seq_len - int64_t(chunk) * kChunk;
    const int len = int(remaining < kChunk ? remaining : kChunk);

    // ---- gates; the chunk's Q, K, V have landed.
    if (warp == 0) load_chunk_gates(args.g, args.beta, t0, len, Hv, head, lane, G_s, beta_s, expG_s, tail_s);
    cp_async_wait_all();
    __syncthreads();

    // ---- inverse norms 1 / sqrt(sum x^2 + 1e-6) of the raw rows (DI_GDN_QK_L2NORM), else 1:
    // thread r < 64 takes q row r, thread 64 + r k row r.
    {
      const unsigned char* tile = tid < kChunk ? q_s : k_s;
      const int r = tid % kChunk;
      float inv = 1.0f;
      if (normalize_qk) {
        float sum = 0.f;
        const unsigned char* row = tile + wg::operand_offset(r, 0, kHeadDim);
#pragma unroll
        for (int part = 0; part < kHeadDim / 8; ++part) {
          const uint4 raw = *reinterpret_cast<const uint4*>(row + part * wg::kCoreBytes);
          const uint32_t w[4] = {raw.x, raw.y, raw.z, raw.w};
#pragma unroll
          for (int j = 0; j < 4; ++j) {
            const float a = kernels::bf16_lo(w[j]), b = kernels::bf16_hi(w[j]);
            sum = fmaf(a, a, sum), sum = fmaf(b, b, sum);
          }
        }
        inv = 1.0f / sqrtf(sum + 1e-6f);
      }
      (tid < kChunk ? q_inv_s : k_inv_s)[r] = inv;
    }
    wg::fence_async_shared();  // the cp.async-written tiles, before wgmma reads them
    __syncthreads();

    // ---- gram: Q Kᵀ and K Kᵀ.
    {
      float qk[32], kk[32];
      zero(qk), zero(kk);
      wg::wgmma_fence();
      wg::mma_m64n64<kHeadDim>(qk, q_s, k_s, false);
      wg::mma_m64n64<kHeadDim>(kk, k_s, k_s, false);
      wg::wgmma_commit();
      wg::wgmma_wait<0>();
      wg::fence_registers(qk), wg::fence_registers(kk);
      // P (scale folded in) as a bf16 operand [i][j]; L in f32 for the inverse. Pairs (i, j), (i, j + 1).
      const float scale = args.scale;
#pragma unroll
      for (int i = 0; i < 32; i += 2) {
        const int r = frag.row(i), c = frag.col(i);
        const float gr = G_s[r], qi = q_inv_s[r], ki = k_inv_s[r], br = beta_s[r];
        float p[2], l[2];
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          const int cc = c + e;
          const float decay = cc <= r ? expf(fminf(gr - G_s[cc], 0.f)) : 0.f;  // mask, then exp
          p[e] = cc <= r ? scale * decay * (qi * k_inv_s[cc]) * qk[i + e] : 0.f;
          l[e] = cc < r ? br * decay * (ki * k_inv_s[cc]) * kk[i + e] : 0.f;
        }
        *reinterpret_cast<uint32_t*>(p_s + frag.direct_offset(i, kChunk)) = kernels::pack_bf16x2(p[0], p[1]);
        *reinterpret_cast<float2*>(inv_s + r * kInvStride + c) = make_float2(l[0], l[1]);
      }
    }
    wg::fence_async_shared();
    __syncthreads();

    // ---- K S and Q S on the tensor cores while the CUDA cores invert (I + L).
    float ks[32], qs[32];
    zero(ks), zero(qs);
    wg::wgmma_fence();
    wg::mma_m64n64<kHeadDim>(ks, k_s, st_s, false);
    wg::mma_m64n64<kHeadDim>(qs, q_s, st_s, false);
    wg::wgmma_commit();

    invert_unit_lower_tiled<kThreads, kInvStride>(inv_s, reinterpret_cast<float*>(x_s), tid);
    // Tinv = hi + lo in bf16, as operands [i][j]: thread tid converts columns 8 (tid % 8) .. + 7 of
    // rows tid / 8 + 16 e.
    {
      const int r0 = tid / 8, c = (tid % 8) * 8;
      const uint32_t dst = wg::operand_offset(r0, c, kChunk);
#pragma unroll
      for (int e = 0; e < kChunk / 16; ++e) {
        const float* src = inv_s + (r0 + 16 * e) * kInvStride + c;
        uint32_t hi[4], lo[4];
#pragma unroll
        for (int j = 0; j < 4; ++j) {
          const float2 x = *reinterpret_cast<const float2*>(src + 2 * j);
          const float hx = kernels::round_bf16(x.x), hy = kernels::round_bf16(x.y);
          hi[j] = kernels::pack_bf16x2(hx, hy);
          lo[j] = kernels::pack_bf16x2(x.x - hx, x.y - hy);
        }
        const uint32_t at = dst + e * 2 * (kChunk / 8) * wg::kCoreBytes;  // 16 rows further
        *reinterpret_cast<uint4*>(t_hi_s + at) = make_uint4(hi[0], hi[1], hi[2], hi[3]);
        *reinterpret_cast<uint4*>(t_lo_s + at) = make_uint4(lo[0], lo[1], lo[2], lo[3]);
      }
    }
    __syncthreads();  // every read of the f32 inverse is done: its region becomes Kᵀ'

    wg::wgmma_wait<0>();
    wg::fence_registers(ks), wg::fence_registers(qs);
    // X = diag(beta) (V - D diag(1/|k|) K S) as an operand (value column, token), split into bf16
    // hi (over X's region) + lo (over V's, once every thread holds its V values); the output starts
    // as scale D diag(1/|q|) Q S.
    {
      uint32_t v_pairs[16];
#pragma unroll
      for (int i = 0; i < 32; i += 2) v_pairs[i / 2] = u32_at(v_s + (frag.row(i) * kTileV + frag.col(i)) * 2);
      __syncthreads();  // every V read is done before V's region takes X's low part
#pragma unroll
      for (int i = 0; i < 32; i += 2) {
        const int r = frag.row(i);
        const float b = beta_s[r], e = expG_s[r] * k_inv_s[r], o = args.scale * expG_s[r] * q_inv_s[r];
        const float x[2] = {b * (kernels::bf16_lo(v_pairs[i / 2]) - e * ks[i]),
                            b * (kernels::bf16_hi(v_pairs[i / 2]) - e * ks[i + 1])};
#pragma unroll
        for (int j = 0; j < 2; ++j) {
          const float hi = kernels::round_bf16(x[j]);
          store_bf16(x_s, frag.transposed_offset(i + j, kChunk), hi);
          store_bf16(v_s, frag.transposed_offset(i + j, kChunk), x[j] - hi);
        }
        qs[i] *= o, qs[i + 1] *= o;
      }
    }
    // Kᵀ as an operand (key, token), a bit-exact copy of the raw rows (the decay and 1/|k| go into
    // W): thread tid writes key row tid, tokens 8 e .. 8 e + 7 (one 16-byte run each). Token t of key
    // tid sits in K's core-matrix row t / 8 (16 core matrices each), byte row t % 8.
    {
      const unsigned char* k_col = k_s + wg::operand_offset(0, tid, kHeadDim);
      unsigned char* kt_row = kt_s + wg::operand_offset(tid, 0, kChunk);
#pragma unroll
      for (int e = 0; e < kChunk / 8; ++e) {
        uint32_t packed[4];
#pragma unroll
        for (int j = 0; j < 4; ++j) {
          const unsigned char* at = k_col + e * 16 * wg::kCoreBytes + (2 * j) * 16;
          packed[j] = uint32_t(*reinterpret_cast<const uint16_t*>(at)) |
                      (uint32_t(*reinterpret_cast<const uint16_t*>(at + 16)) << 16);
        }
        *reinterpret_cast<uint4*>(kt_row + e * wg::kCoreBytes) = make_uint4(packed[0], packed[1], packed[2], packed[3]);
      }
    }
    wg::fence_async_shared();
    __syncthreads();

    // Q and K of this chunk are no longer read: fetch the next chunk's (V's region holds X's and then
    // Vnew's low part until the chunk's last products; the next V is fetched after them).
    const int64_t next_remaining = remaining - kChunk;
    const int next_len = int(next_remaining < kChunk ? next_remaining : kChunk);
    if (chunk + 1 < num_chunks) {
      load_qk_async(q_s, q, t0 + kChunk, next_len, Hk, key_head, tid);
      load_qk_async(k_s, k, t0 + kChunk, next_len, Hk, key_head, tid);
      cp_async_commit();
    }

    // ---- Vnew = Tinv X = Tinv_hi X_hi + Tinv_lo X_hi + Tinv_hi X_lo (the lo x lo term is below
    // f32 rounding). Then Vnew as hi (over Tinv_hi) + lo (over X_lo in V's region) for the output,
    // and W = diag(exp(G_last - G) / |k|) Vnew as hi (over X_hi) + lo (over Tinv_lo) for the state.
    {
      float vnew[32];
      zero(vnew);
      wg::wgmma_fence();
      wg::mma_m64n64<kChunk>(vnew, t_hi_s, x_s, false);
      wg::mma_m64n64<kChunk>(vnew, t_lo_s, x_s, true);
      wg::mma_m64n64<kChunk>(vnew, t_hi_s, v_s, true);
      wg::wgmma_commit();
      wg::wgmma_wait<0>();
      wg::fence_registers(vnew);
      __syncthreads();  // every warp's products have read X and Tinv
#pragma unroll
      for (int i = 0; i < 32; ++i) {
        const int r = frag.row(i);
        const uint32_t at = frag.transposed_offset(i, kChunk);
        const float w = tail_s[r] * k_inv_s[r] * vnew[i], w_hi = kernels::round_bf16(w);
        const float vnew_hi = kernels::round_bf16(vnew[i]);
        store_bf16(t_hi_s, at, vnew_hi);
        store_bf16(v_s, at, vnew[i] - vnew_hi);
        store_bf16(x_s, at, w_hi);
        store_bf16(t_lo_s, at, w - w_hi);
      }
    }
    wg::fence_async_shared();
    __syncthreads();

    // ---- output O = (scaled Q S) + P Vnew; state S = exp(G_last) S + Kᵀ' Vnew.
    const float chunk_decay = expG_s[len - 1];
#pragma unroll
    for (int half = 0; half < 2; ++half)
#pragma unroll
      for (int i = 0; i < 32; ++i) state[half][i] *= chunk_decay;
    wg::wgmma_fence();
    const unsigned char* kt_hi_half = kt_s + wg::operand_offset(64, 0, kChunk);  // key rows 64 .. 127
    wg::mma_m64n64<kChunk>(qs, p_s, t_hi_s, true);          // P Vnew_hi
    wg::mma_m64n64<kChunk>(qs, p_s, v_s, true);             // P Vnew_lo
    wg::mma_m64n64<kChunk>(state[0], kt_s, x_s, true);        // Kᵀ W_hi
    wg::mma_m64n64<kChunk>(state[1], kt_hi_half, x_s, true);
    wg::mma_m64n64<kChunk>(state[0], kt_s, t_lo_s, true);     // Kᵀ W_lo
    wg::mma_m64n64<kChunk>(state[1], kt_hi_half, t_lo_s, true);
    wg::wgmma_commit();
    wg::wgmma_wait<0>();
    wg::fence_registers(qs), wg::fence_registers(state[0]), wg::fence_registers(state[1]);
    __syncthreads();  // every warp's products have read Vnew_lo: V's region takes the next chunk's V
    if (chunk + 1 < num_chunks) {
      load_v_async(v_s, v, t0 + kChunk, next_len, Hv, head, v0, tid);
      cp_async_commit();
    }

#pragma unroll
    for (int i = 0; i < 32; i += 2) {
      const int r = frag.row(i);
      if (r >= len) continue;
      *reinterpret_cast<uint32_t*>(out + ((t0 + r) * Hv + head) * kHeadDim + v0 + frag.col(i)) =
          kernels::pack_bf16x2(qs[i], qs[i + 1]);
    }
    __syncthreads();  // the next chunk rewrites the gate vectors and reuses the regions read above
    if (chunk + 1 < num_chunks) write_state_operand(state, st_s, frag);
    wg::fence_async_shared();
  }

  if (args.final_state != nullptr && slot >= 0) {
    float* dst = args.final_state + state_base;
#pragma unroll
    for (int half = 0; half < 2; ++half)
#pragma unroll
      for (int i = 0; i < 32; i += 2) {
        const int kr = 64 * half + frag.row(i), c = v0 + frag.col(i);
        if (kv_layout) {
          *reinterpret_cast<float2*>(dst + int64_t(kr) * kHeadDim + c) = make_float2(state[half][i], state[half][i + 1]);
        } else {
          dst[int64_t(c) * kHeadDim + kr] = state[half][i], dst[int64_t(c + 1) * kHeadDim + kr] = state[half][i + 1];
        }
      }
  }
#endif
}

// ---------------------------------------------------------------------------------------------
// The ABI entry points.

int sm90_supports(const di_gdn_geometry* geometry, const di_gdn_device* device, di_gdn_state_layout layout,
                  char* reason, size_t reason_capacity) {
  if (geometry == nullptr || device == nullptr) return refuse(reason, reason_capacity, "geometry or device is NULL");
  if (const int status = check_geometry("sm90", *geometry, layout, reason, reason_capacity); status != DI_GDN_OK)
    return status;
#if !DI_GDN_SM90A
  return refuse(reason, reason_capacity,
                "this build has no sm_90a code (CMAKE_CUDA_ARCHITECTURES lacks 90a): sm90 needs wgmma");
#endif
  if (device->sm_major != 9 || device->sm_minor != 0)
    return refuse(reason, reason_capacity,
                  "sm_%d%d unsupported: sm90 runs sm_90a code (wgmma), which only compute capability 9.0 executes",
                  device->sm_major, device->sm_minor);
  if (device->shared_memory_per_block_optin < kSmemBytes)
    return refuse(reason, reason_capacity, "sm90 needs %zu bytes of shared memory per block, the device allows %zu",
                  kSmemBytes, device->shared_memory_per_block_optin);
  return accept(reason, reason_capacity);
}

size_t sm90_scratch_bytes(const di_gdn_prefill_shape*) { return 0; }

int sm90_run(const di_gdn_prefill_args* args, void* /*scratch*/, size_t /*scratch_size*/, di_gdn_stream stream) {
  if (const int status = check_run_args(args); status != DI_GDN_OK) return status;
  const di_gdn_prefill_args& a = *args;
  const di_gdn_geometry& g = a.geometry;
  // Vector accesses: q, k, v by 16 bytes (cp.async), out by 4, the state pools by 8.
  if (!aligned(a.q, 16) || !aligned(a.k, 16) || !aligned(a.v, 16) || !aligned(a.out, 4) ||
      !aligned(a.initial_state, 8) || !aligned(a.final_state, 8))
    return DI_GDN_INVALID_ARGUMENT;
  if (check_geometry("sm90", g, a.state_layout, nullptr, 0) != DI_GDN_OK) return DI_GDN_UNSUPPORTED;
  if (a.num_seqs == 0) return DI_GDN_OK;
  const int64_t ctas = int64_t(a.num_seqs) * g.num_v_heads * kTilesPerHead;
  if (ctas > int64_t(INT32_MAX)) return DI_GDN_UNSUPPORTED;

  di_gdn_device info{};
  if (!current_device(info)) return DI_GDN_LAUNCH_FAILED;
  if (sm90_supports(&g, &info, a.state_layout, nullptr, 0) != DI_GDN_OK) return DI_GDN_UNSUPPORTED;
  if (cudaFuncSetAttribute(gdn_sm90_prefill_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(kSmemBytes)) !=
      cudaSuccess)
    return DI_GDN_LAUNCH_FAILED;
  gdn_sm90_prefill_kernel<<<unsigned(ctas), kThreads, kSmemBytes, reinterpret_cast<cudaStream_t>(stream)>>>(a);
  return cudaGetLastError() == cudaSuccess ? DI_GDN_OK : DI_GDN_LAUNCH_FAILED;
}

}  // namespace

const di_gdn_prefill_backend& gdn_sm90_backend() {
  static const di_gdn_prefill_backend backend{"sm90", &sm90_supports, &sm90_scratch_bytes, &sm90_run};
  return backend;
}

size_t sm90_prefill_smem_bytes() { return kSmemBytes; }

}  // namespace di::gdn
