// The baseline GDN chunked prefill: portable CUDA (sm_80+), chunk length C = 64, K = V = 128.
//
// Math (docs GDN_KERNELS.md 1.2, "no W/U materialisation"). Per sequence and value head, for each
// chunk of C tokens entering with state S0 [K, V] (the last chunk may be shorter: its missing rows
// are zeros, g = 0 there, so they change nothing and the decay stops at the last valid token):
//   G      = cumsum(g) inside the chunk                     D = diag(exp G)
//   L      = strict_lower( diag(beta) (Gamma ⊙ K Kᵀ) )       Gamma_ij = exp(G_i - G_j), i >= j only
//   Tinv   = (I + L)^-1                                     forward substitution, 16x16 blocks merged
//   Vnew   = Tinv · diag(beta) · (V - D · K · S0)           [C, V]
//   O      = scale · ( D · Q · S0 + (Gamma ⊙ Q Kᵀ ⊙ causal, diagonal included) · Vnew )
//   S      = exp(G_last) · S0 + Kᵀ · diag(exp(G_last - G)) · Vnew
// Exponents are taken only of G_i - G_j with i >= j (masked before exp, clamped to <= 0), and
// exp(G_r) of a strongly decaying chunk underflows to 0, never to inf: no 0 · inf anywhere.
//
// Design. One CTA of 256 threads owns (sequence, value head, tile of BV = 32 value columns): it reads
// its whole [K, BV] state slice before the first chunk and writes it after the last, so distinct CTAs
// touch disjoint slices and initial_state == final_state is safe. Each CTA walks its sequence's chunks
// in order (cu_seqlens is read on the device; the grid depends only on num_seqs and the geometry).
// Per chunk, with a __syncthreads between the stages:
//   load     Q, K chunk rows (bf16, cp.async, zero-filled past the sequence) to shared memory; V rows
//            of the tile to registers; warp 0 loads g and beta and scans G.
//   gram     Q Kᵀ and K Kᵀ, lower 16x16 blocks only, with mma.sync m16n8k16 bf16 -> f32 (bf16 inputs
//            multiply exactly; f32 accumulation), gated and masked into P and L.
//   inverse  the four 16x16 diagonal blocks of (I + L) by forward substitution (one thread per
//            column), then the block merges 16 -> 32 -> 64: T_hl = -T_hh L_hl T_ll.
//   K S, Q S one 128x32 f32 FMA GEMM over the stacked rows [K; Q]; each thread a 4x4 register tile
//            (rows r, r+32 of K and of Q, 4 columns). B = diag(beta)(V - D K S) goes to shared memory;
//            Q S stays in registers for the output.
//   Vnew     Tinv · B (lower-triangular sum), 2x4 register tile per thread.
//   output   D Q S + P · Vnew, times scale, rounded once to bf16.
//   state    S = exp(G_last) S + Kᵀ (exp(G_last - G) ⊙ Vnew): each thread keeps its 4 key rows x 4
//            columns of the state in registers for the whole sequence and rewrites the shared copy.
// The next chunk's Q is prefetched (cp.async) while the chunk's last three stages run.
//
// FLOP per chunk, per CTA (BV = 32 columns; a value head is K/BV = 4 CTAs):
//   gram     2 x 20 mma tiles of 16x8x128            = 2 x 20 x 16 x 8 x 128 x 2 = 1.31 MFLOP (tensor)
//   inverse  diag 4 x 16 x 120 + merges 2x512x16 + 2x1024x32, FMA              ~ 0.18 MFLOP
//   K S, Q S 2 x 64 x 32 x 128 x 2                                             = 1.05 MFLOP
//   Vnew, O  2 x 64 x 32 x ~50 (lower-triangular sums, warp-granular) x 2      ~ 0.41 MFLOP
//   state    128 x 32 x 64 x 2                                                 = 0.52 MFLOP
//   total ~3.5 MFLOP per CTA, ~13.9 MFLOP per head and chunk (the ideal fused count, GDN_KERNELS.md
//   9.1, is 163,840 x 64 = 10.5 MFLOP: the 4 column tiles each recompute the Gram matrices and Tinv).
// Bytes per chunk, per CTA: Q and K 2 x 64 x 128 x 2 = 32 KiB (shared through L2 by the 4 column
// tiles and the Hv/Hk value heads of a key head), V and out 64 x 32 x 2 = 4 KiB each, g and beta
// 512 B; the f32 state slice, 16 KiB, is read and written once per sequence. HBM traffic per token
// over all heads (the floor): 4·Hk·K (q, k) + 4·Hv·V (v, out) + 8·Hv (g, beta) bytes.
//
// Shared memory, 97,792 bytes: K and Q chunks bf16 [64][136] (row padded by 8 so mma fragment loads
// are conflict-free), the state slice f32 [128][32], L/Tinv and P f32 [64][72] (padded), a [64][32]
// work tile (merge scratch, then B, then Vnew, then the decayed Vnew), and G, beta, exp(G),
// exp(G_last - G), and the inverse norms of the q and k rows [64] each.
#include "gdn/baseline_prefill.h"

#include <cuda_bf16.h>

#include <cuda_runtime.h>

#include <cstdint>

#include "gdn/backend_common.cuh"
#include "gdn/chunk_math.cuh"
#include "kernels/cuda_common.cuh"

namespace di::gdn {
namespace {

using bf16 = __nv_bfloat16;

constexpr int kChunk = 64;                 // C
constexpr int kHeadDim = 128;              // K == V
constexpr int kTileV = 32;                 // BV: value columns per CTA
constexpr int kTilesPerHead = kHeadDim / kTileV;
constexpr int kThreads = 256;
constexpr int kWarps = kThreads / 32;
constexpr int kQkStride = kHeadDim + 8;    // bf16 per shared row of Q and K
constexpr int kMatStride = kChunk + 8;     // floats per shared row of L/Tinv and P
constexpr int kGramTiles = 20;             // 16x8 output tiles on or below the 16x16 block diagonal

// Shared memory layout (byte offsets; every region 16-byte aligned).
constexpr size_t kQkBytes = size_t(kChunk) * kQkStride * sizeof(bf16);
constexpr size_t kStateBytes = size_t(kHeadDim) * kTileV * sizeof(float);
constexpr size_t kMatBytes = size_t(kChunk) * kMatStride * sizeof(float);
constexpr size_t kWorkBytes = size_t(kChunk) * kTileV * sizeof(float);
constexpr size_t kVecBytes = size_t(kChunk) * sizeof(float);
constexpr size_t kOffK = 0;
constexpr size_t kOffQ = kOffK + kQkBytes;
constexpr size_t kOffState = kOffQ + kQkBytes;
constexpr size_t kOffT = kOffState + kStateBytes;
constexpr size_t kOffP = kOffT + kMatBytes;
constexpr size_t kOffWork = kOffP + kMatBytes;
constexpr size_t kOffG = kOffWork + kWorkBytes;
constexpr size_t kOffBeta = kOffG + kVecBytes;
constexpr size_t kOffExpG = kOffBeta + kVecBytes;
constexpr size_t kOffTail = kOffExpG + kVecBytes;
constexpr size_t kOffQInv = kOffTail + kVecBytes;
constexpr size_t kOffKInv = kOffQInv + kVecBytes;
constexpr size_t kSmemBytes = kOffKInv + kVecBytes;
static_assert(kSmemBytes == 97792, "the shared memory budget the header documents");
static_assert(kQkBytes % 16 == 0 && kMatBytes % 16 == 0 && kStateBytes % 16 == 0, "16-byte aligned regions");
static_assert(kThreads == 8 * kTileV, "thread mappings: 8 column groups of 4 x 32 row groups");

// ---------------------------------------------------------------------------------------------
// Small device helpers.

using kernels::bf16_hi;
using kernels::cp_async_16;
using kernels::cp_async_commit;
using kernels::cp_async_wait_all;
using kernels::bf16_lo;
using kernels::load_bf16x4;
using kernels::pack_bf16x2;

__device__ __forceinline__ uint32_t load_u32(const bf16* p) { return *reinterpret_cast<const uint32_t*>(p); }



__device__ __forceinline__ float4 load_f4(const float* p) { return *reinterpret_cast<const float4*>(p); }
__device__ __forceinline__ void store_f4(float* p, float a, float b, float c, float d) {
  *reinterpret_cast<float4*>(p) = make_float4(a, b, c, d);
}

// D += A B for one 16x8x16 tile: A row-major bf16 16x16, B "col" (n-major) bf16 16x8, D f32 16x8.
__device__ __forceinline__ void mma_bf16_16x8x16(float (&d)[4], const uint32_t (&a)[4], const uint32_t (&b)[2]) {
  asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
      "{%0,%1,%2,%3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}

// Offset of state element (key row i, value column j) within one head's matrix.
__device__ __forceinline__ int64_t state_offset(di_gdn_state_layout layout, int i, int j) {
  return layout == DI_GDN_STATE_KV ? int64_t(i) * kHeadDim + j : int64_t(j) * kHeadDim + i;
}

// Copies the chunk's rows [t0, t0 + len) of one key head of q or k ([T, Hk, K] bf16) into a shared
// [64][kQkStride] tile; rows >= len become zeros. 64 rows x 16 pieces of 16 bytes, 4 per thread.
__device__ __forceinline__ void load_chunk_rows_async(bf16* tile, const bf16* src, int64_t t0, int len,
                                                      int num_k_heads, int key_head, int tid) {
#pragma unroll
  for (int e = 0; e < kChunk * 16 / kThreads; ++e) {
    const int piece = tid + e * kThreads;
    const int row = piece / 16, part = piece % 16;
    const bool valid = row < len;
    const bf16* from = valid ? src + ((t0 + row) * num_k_heads + key_head) * kHeadDim + part * 8 : src;
    cp_async_16(tile + row * kQkStride + part * 8, from, valid ? 16 : 0);
  }
}

// acc[rr][c] += sum_{s < tri_end} mat[rows[rr]][s] · work[s][col0 + c]: a lower-triangular [64, 64]
// matrix (Tinv or P; stored zeros above the diagonal) times the [64, 32] work tile, for this thread's
// two chunk rows and four columns. The sum stops at the warp's triangle edge.
__device__ __forceinline__ void accumulate_lower_rows(const float* mat, const float* work, const int (&rows)[2],
                                                      int col0, int tri_end, float (&acc)[2][4]) {
  for (int s = 0; s < tri_end; s += 4) {
    float4 w[4];
#pragma unroll
    for (int j = 0; j < 4; ++j) w[j] = load_f4(work + (s + j) * kTileV + col0);
#pragma unroll
    for (int rr = 0; rr < 2; ++rr) {
      const float4 m4 = load_f4(mat + rows[rr] * kMatStride + s);
      const float m[4] = {m4.x, m4.y, m4.z, m4.w};
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        acc[rr][0] = fmaf(m[j], w[j].x, acc[rr][0]), acc[rr][1] = fmaf(m[j], w[j].y, acc[rr][1]);
        acc[rr][2] = fmaf(m[j], w[j].z, acc[rr][2]), acc[rr][3] = fmaf(m[j], w[j].w, acc[rr][3]);
      }
    }
  }
}

// ---------------------------------------------------------------------------------------------
// The kernel. Grid: num_seqs * Hv * kTilesPerHead CTAs, CTA index = (seq * Hv + head) * tiles + tile.

__global__ void __launch_bounds__(kThreads, 2) gdn_baseline_prefill_kernel(const di_gdn_prefill_args args) {
  extern __shared__ __align__(16) unsigned char smem[];
  bf16* const k_tile = reinterpret_cast<bf16*>(smem + kOffK);      // [64][kQkStride]
  bf16* const q_tile = reinterpret_cast<bf16*>(smem + kOffQ);      // [64][kQkStride]
  float* const state_s = reinterpret_cast<float*>(smem + kOffState);  // [128][32]  S0 of the chunk
  float* const tmat = reinterpret_cast<float*>(smem + kOffT);      // [64][kMatStride]  L, then Tinv
  float* const pmat = reinterpret_cast<float*>(smem + kOffP);      // [64][kMatStride]  Gamma ⊙ QKᵀ ⊙ causal
  float* const work = reinterpret_cast<float*>(smem + kOffWork);   // [64][32]
  float* const G_s = reinterpret_cast<float*>(smem + kOffG);        // [64]  cumulative log decay
  float* const beta_s = reinterpret_cast<float*>(smem + kOffBeta);  // [64]
  float* const expG_s = reinterpret_cast<float*>(smem + kOffExpG);  // [64]  exp(G_r)
  float* const tail_s = reinterpret_cast<float*>(smem + kOffTail);  // [64]  exp(G_last - G_r)
  float* const q_inv_s = reinterpret_cast<float*>(smem + kOffQInv); // [64]  1 / |q_r| (1 without the flag)
  float* const k_inv_s = reinterpret_cast<float*>(smem + kOffKInv); // [64]  1 / |k_r|
  const bool normalize_qk = (args.flags & DI_GDN_QK_L2NORM) != 0;

  const int tid = threadIdx.x, lane = tid % 32, warp = tid / 32;
  const int Hk = args.geometry.num_k_heads, Hv = args.geometry.num_v_heads;
  const int tile = int(blockIdx.x % kTilesPerHead);
  const int head = int((blockIdx.x / kTilesPerHead) % Hv);
  const int seq = int(blockIdx.x / (uint32_t(kTilesPerHead) * uint32_t(Hv)));
  const int key_head = head / (Hv / Hk);
  const int v0 = tile * kTileV;  // first value column of this CTA

  const bf16* const q = static_cast<const bf16*>(args.q);
  const bf16* const k = static_cast<const bf16*>(args.k);
  const bf16* const v = static_cast<const bf16*>(args.v);
  bf16* const out = static_cast<bf16*>(args.out);

  const int64_t seq_begin = args.cu_seqlens[seq];
  const int64_t seq_len = args.cu_seqlens[seq + 1] - seq_begin;
  const int num_chunks = int((seq_len + kChunk - 1) / kChunk);
  const int64_t slot = args.state_indices ? args.state_indices[seq] : seq;
  const int64_t state_base = (slot * Hv + head) * int64_t(kHeadDim) * kHeadDim;

  // Thread mappings. col0: first of this thread's 4 value columns (within the tile).
  //   chunk rows:  row_group and row_group + 32           (K S, Q S, B, Vnew, output)
  //   key rows:    2 row_group + {0, 1} + {0, 64}          (the state)
  const int col0 = (tid % 8) * 4;
  const int row_group = tid / 8;
  const int rows[2] = {row_group, row_group + 32};
  const int key_rows[4] = {2 * row_group, 2 * row_group + 1, 2 * row_group + 64, 2 * row_group + 65};
  // The lower-triangular sums of this warp's rows (<= 4 warp + 35) stop here.
  const int tri_end = 4 * warp + 36;

  // S0: this thread's 4 key rows x 4 columns, kept in registers for the whole sequence.
  float state[4][4];
  if (args.initial_state != nullptr && slot >= 0) {
    const float* src = args.initial_state + state_base;
    if (args.state_layout == DI_GDN_STATE_KV) {
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        const float4 x = load_f4(src + state_offset(DI_GDN_STATE_KV, key_rows[j], v0 + col0));
        state[j][0] = x.x, state[j][1] = x.y, state[j][2] = x.z, state[j][3] = x.w;
      }
    } else {
#pragma unroll
      for (int c = 0; c < 4; ++c) {
        const int64_t column = state_offset(DI_GDN_STATE_VK, 0, v0 + col0 + c);
        const float2 lo = *reinterpret_cast<const float2*>(src + column + key_rows[0]);  // key rows 2 rg, 2 rg + 1
        const float2 hi = *reinterpret_cast<const float2*>(src + column + key_rows[2]);  // key rows 2 rg + 64, + 65
        state[0][c] = lo.x, state[1][c] = lo.y, state[2][c] = hi.x, state[3][c] = hi.y;
      }
    }
  } else {
#pragma unroll
    for (int j = 0; j < 4; ++j)
#pragma unroll
      for (int c = 0; c < 4; ++c) state[j][c] = 0.f;
  }
#pragma unroll
  for (int j = 0; j < 4; ++j)
    store_f4(state_s + key_rows[j] * kTileV + col0, state[j][0], state[j][1], state[j][2], state[j][3]);

  // L/Tinv and P are zero above the 16x16 block diagonal; no stage writes there, so zero it once.
  for (int idx = tid; idx < kChunk * kChunk; idx += kThreads) {
    const int i = idx / kChunk, j = idx % kChunk;
    if (j >= (i / 16 + 1) * 16) tmat[i * kMatStride + j] = 0.f, pmat[i * kMatStride + j] = 0.f;
  }

  if (num_chunks > 0) load_chunk_rows_async(q_tile, q, seq_begin, int(seq_len < kChunk ? seq_len : kChunk), Hk,
                                            key_head, tid);

  for (int chunk = 0; chunk < num_chunks; ++chunk) {
    const int64_t t0 = seq_begin + int64_t(chunk) * kChunk;
    const int64_t remaining = seq_len - int64_t(chunk) * kChunk;
    const int len = int(remaining < kChunk ? remaining : kChunk);  // valid rows of this chunk

    // ---- load: K rows (Q was prefetched), V rows of the tile, g and beta; G = cumsum(g).
    load_chunk_rows_async(k_tile, k, t0, len, Hk, key_head, tid);
    cp_async_commit();
    uint2 v_raw[2];  // 4 bf16 of rows[rr]; converted when B is formed (fewer live registers meanwhile)
#pragma unroll
    for (int rr = 0; rr < 2; ++rr)
      v_raw[rr] = rows[rr] < len
                      ? *reinterpret_cast<const uint2*>(v + ((t0 + rows[rr]) * Hv + head) * kHeadDim + v0 + col0)
                      : make_uint2(0u, 0u);
    if (warp == 0) load_chunk_gates(args.g, args.beta, t0, len, Hv, head, lane, G_s, beta_s, expG_s, tail_s);
    cp_async_wait_all();
    __syncthreads();

    // ---- norms (DI_GDN_QK_L2NORM): 1 / sqrt(sum x^2 + 1e-6) of each raw q and k row, in float32. The
    // rows stay raw in shared memory (bf16 products are exact in the mma); the inverse norms scale
    // the results instead, which is the float32 normalisation of the references up to reordering:
    //   (Q Kᵀ)_ij -> qi_i ki_j (Q Kᵀ)_ij,  (K Kᵀ)_ij -> ki_i ki_j (K Kᵀ)_ij,  K S -> diag(ki) K S,
    //   Q S -> diag(qi) Q S,  and Kᵀ W -> Kᵀ diag(ki) W in the state update.
    // Warp w takes rows 16 w .. 16 w + 15 of [Q; K]; each lane 4 of a row's 128 values.
    for (int row = warp * 16; row < warp * 16 + 16; ++row) {
      const bool is_q = row < kChunk;
      const int r = is_q ? row : row - kChunk;
      float inv = 1.0f;
      if (normalize_qk) {
        float x[4];
        load_bf16x4((is_q ? q_tile : k_tile) + r * kQkStride + 4 * lane, x);
        float sum = x[0] * x[0] + x[1] * x[1] + x[2] * x[2] + x[3] * x[3];
#pragma unroll
        for (int d = 16; d > 0; d >>= 1) sum += __shfl_xor_sync(0xffffffffu, sum, d);
        inv = 1.0f / sqrtf(sum + 1e-6f);  // rows past the sequence are zeros: 1000, times zero
      }
      if (lane == 0) (is_q ? q_inv_s : k_inv_s)[r] = inv;
    }
    __syncthreads();

    // ---- gram: P = Gamma ⊙ Q Kᵀ (j <= i), L = diag(beta) Gamma ⊙ K Kᵀ (j < i), on the 20 tiles of
    // 16 rows x 8 columns that touch or lie below the 16x16 block diagonal.
    {
      const int gid = lane / 4, tig = lane % 4;  // mma fragment coordinates
      for (int item = warp; item < kGramTiles; item += kWarps) {
        const int mb = item < 2 ? 0 : item < 6 ? 1 : item < 12 ? 2 : 3;  // row block: 2 (mb + 1) tiles
        const int nt = item - mb * (mb + 1);                             // 8-column tile
        const bf16* a_k = k_tile + (mb * 16 + gid) * kQkStride + 2 * tig;
        const bf16* a_q = q_tile + (mb * 16 + gid) * kQkStride + 2 * tig;
        const bf16* b_k = k_tile + (nt * 8 + gid) * kQkStride + 2 * tig;
        float kk[4] = {0.f, 0.f, 0.f, 0.f}, qk[4] = {0.f, 0.f, 0.f, 0.f};
#pragma unroll
        for (int k0 = 0; k0 < kHeadDim; k0 += 16) {
          const uint32_t b_frag[2] = {load_u32(b_k + k0), load_u32(b_k + k0 + 8)};
          const uint32_t ak_frag[4] = {load_u32(a_k + k0), load_u32(a_k + 8 * kQkStride + k0), load_u32(a_k + k0 + 8),
                                       load_u32(a_k + 8 * kQkStride + k0 + 8)};
          const uint32_t aq_frag[4] = {load_u32(a_q + k0), load_u32(a_q + 8 * kQkStride + k0), load_u32(a_q + k0 + 8),
                                       load_u32(a_q + 8 * kQkStride + k0 + 8)};
          mma_bf16_16x8x16(kk, ak_frag, b_frag);
          mma_bf16_16x8x16(qk, aq_frag, b_frag);
        }
        // Accumulator element 2 h + e sits at row mb 16 + gid + 8 h, column nt 8 + 2 tig + e.
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          const int i = mb * 16 + gid + 8 * h;
          const int j = nt * 8 + 2 * tig;
          float l_val[2], p_val[2];
#pragma unroll
          for (int e = 0; e < 2; ++e) {
            const int jj = j + e;
            const float pair_decay = jj <= i ? expf(fminf(G_s[i] - G_s[jj], 0.f)) : 0.f;  // mask, then exp
            p_val[e] = pair_decay * (q_inv_s[i] * k_inv_s[jj]) * qk[2 * h + e];
            l_val[e] = jj < i ? beta_s[i] * pair_decay * (k_inv_s[i] * k_inv_s[jj]) * kk[2 * h + e] : 0.f;
          }
          *reinterpret_cast<float2*>(tmat + i * kMatStride + j) = make_float2(l_val[0], l_val[1]);
          *reinterpret_cast<float2*>(pmat + i * kMatStride + j) = make_float2(p_val[0], p_val[1]);
        }
      }
    }
    __syncthreads();

    // ---- inverse: the diagonal 16x16 blocks by forward substitution, then the merges 16 -> 32 -> 64
    // (work is free as scratch until B is written).
    invert_unit_lower<kThreads, kMatStride>(tmat, work, tid);

    // ---- K S and Q S over the stacked rows; B = diag(beta) (V - D K S) -> work.
    float qs[2][4];
    {
      float ks[2][4];
#pragma unroll
      for (int rr = 0; rr < 2; ++rr)
#pragma unroll
        for (int c = 0; c < 4; ++c) ks[rr][c] = 0.f, qs[rr][c] = 0.f;
#pragma unroll 1
      for (int kk = 0; kk < kHeadDim; kk += 4) {
        float4 s[4];
#pragma unroll
        for (int j = 0; j < 4; ++j) s[j] = load_f4(state_s + (kk + j) * kTileV + col0);
#pragma unroll
        for (int rr = 0; rr < 2; ++rr) {
          float kr[4], qr[4];
          load_bf16x4(k_tile + rows[rr] * kQkStride + kk, kr);
          load_bf16x4(q_tile + rows[rr] * kQkStride + kk, qr);
#pragma unroll
          for (int j = 0; j < 4; ++j) {
            ks[rr][0] = fmaf(kr[j], s[j].x, ks[rr][0]), ks[rr][1] = fmaf(kr[j], s[j].y, ks[rr][1]);
            ks[rr][2] = fmaf(kr[j], s[j].z, ks[rr][2]), ks[rr][3] = fmaf(kr[j], s[j].w, ks[rr][3]);
            qs[rr][0] = fmaf(qr[j], s[j].x, qs[rr][0]), qs[rr][1] = fmaf(qr[j], s[j].y, qs[rr][1]);
            qs[rr][2] = fmaf(qr[j], s[j].z, qs[rr][2]), qs[rr][3] = fmaf(qr[j], s[j].w, qs[rr][3]);
          }
        }
      }
#pragma unroll
      for (int rr = 0; rr < 2; ++rr) {
        const int r = rows[rr];
        const float b = beta_s[r], e = expG_s[r] * k_inv_s[r];  // D diag(ki) K S
#pragma unroll
        for (int c = 0; c < 4; ++c) qs[rr][c] *= q_inv_s[r];       // diag(qi) Q S
        const float vr[4] = {bf16_lo(v_raw[rr].x), bf16_hi(v_raw[rr].x), bf16_lo(v_raw[rr].y), bf16_hi(v_raw[rr].y)};
        store_f4(work + r * kTileV + col0, b * (vr[0] - e * ks[rr][0]), b * (vr[1] - e * ks[rr][1]),
                 b * (vr[2] - e * ks[rr][2]), b * (vr[3] - e * ks[rr][3]));
      }
    }
    __syncthreads();

    // Q is no longer read in this chunk: prefetch the next chunk's Q rows.
    if (chunk + 1 < num_chunks) {
      const int64_t next_remaining = remaining - kChunk;
      load_chunk_rows_async(q_tile, q, t0 + kChunk, int(next_remaining < kChunk ? next_remaining : kChunk), Hk,
                            key_head, tid);
      cp_async_commit();
    }

    // ---- Vnew = Tinv · B (row r sums s <= r; entries above the diagonal are stored zeros).
    float vnew[2][4];
    {
#pragma unroll
      for (int rr = 0; rr < 2; ++rr)
#pragma unroll
        for (int c = 0; c < 4; ++c) vnew[rr][c] = 0.f;
      accumulate_lower_rows(tmat, work, rows, col0, tri_end, vnew);  // work holds B here
    }
    __syncthreads();  // every read of B is done
#pragma unroll
    for (int rr = 0; rr < 2; ++rr)
      store_f4(work + rows[rr] * kTileV + col0, vnew[rr][0], vnew[rr][1], vnew[rr][2], vnew[rr][3]);
    __syncthreads();

    // ---- O = scale · (D Q S + P · Vnew), rounded once to bf16.
    {
      float o[2][4];
#pragma unroll
      for (int rr = 0; rr < 2; ++rr) {
        const float e = expG_s[rows[rr]];
#pragma unroll
        for (int c = 0; c < 4; ++c) o[rr][c] = e * qs[rr][c];
      }
      accumulate_lower_rows(pmat, work, rows, col0, tri_end, o);  // work holds Vnew here
      const float scale = args.scale;
#pragma unroll
      for (int rr = 0; rr < 2; ++rr) {
        if (rows[rr] >= len) continue;
        uint2 packed;
        packed.x = pack_bf16x2(scale * o[rr][0], scale * o[rr][1]);
        packed.y = pack_bf16x2(scale * o[rr][2], scale * o[rr][3]);
        *reinterpret_cast<uint2*>(out + ((t0 + rows[rr]) * Hv + head) * kHeadDim + v0 + col0) = packed;
      }
    }
    __syncthreads();  // every read of Vnew is done
    // work <- diag(exp(G_last - G) ki) Vnew, the decayed values the state update adds (ki: the key
    // rows' inverse norms, folded here so that Kᵀ reads the raw rows).
#pragma unroll
    for (int rr = 0; rr < 2; ++rr) {
      const float d = tail_s[rows[rr]] * k_inv_s[rows[rr]];
      store_f4(work + rows[rr] * kTileV + col0, d * vnew[rr][0], d * vnew[rr][1], d * vnew[rr][2], d * vnew[rr][3]);
    }
    __syncthreads();

    // ---- S = exp(G_last) S0 + Kᵀ · work (rows past the sequence are zero in both K and work).
    {
      const float chunk_decay = expG_s[len - 1];
#pragma unroll
      for (int j = 0; j < 4; ++j)
#pragma unroll
        for (int c = 0; c < 4; ++c) state[j][c] *= chunk_decay;
#pragma unroll 4
      for (int r = 0; r < len; ++r) {
        const uint32_t k_lo = load_u32(k_tile + r * kQkStride + key_rows[0]);  // key rows 2 rg, 2 rg + 1
        const uint32_t k_hi = load_u32(k_tile + r * kQkStride + key_rows[2]);  // key rows 2 rg + 64, + 65
        const float kr[4] = {bf16_lo(k_lo), bf16_hi(k_lo), bf16_lo(k_hi), bf16_hi(k_hi)};
        const float4 w = load_f4(work + r * kTileV + col0);
#pragma unroll
        for (int j = 0; j < 4; ++j) {
          state[j][0] = fmaf(kr[j], w.x, state[j][0]), state[j][1] = fmaf(kr[j], w.y, state[j][1]);
          state[j][2] = fmaf(kr[j], w.z, state[j][2]), state[j][3] = fmaf(kr[j], w.w, state[j][3]);
        }
      }
#pragma unroll
      for (int j = 0; j < 4; ++j)
        store_f4(state_s + key_rows[j] * kTileV + col0, state[j][0], state[j][1], state[j][2], state[j][3]);
    }
    __syncthreads();  // K, work, the gate vectors and the state copy are reused by the next chunk
  }

  // The final state: this thread's 4 key rows x 4 columns, in the caller's layout.
  if (args.final_state != nullptr && slot >= 0) {
    float* dst = args.final_state + state_base;
    if (args.state_layout == DI_GDN_STATE_KV) {
#pragma unroll
      for (int j = 0; j < 4; ++j)
        store_f4(dst + state_offset(DI_GDN_STATE_KV, key_rows[j], v0 + col0), state[j][0], state[j][1], state[j][2],
                 state[j][3]);
    } else {
#pragma unroll
      for (int c = 0; c < 4; ++c) {
        *reinterpret_cast<float2*>(dst + state_offset(DI_GDN_STATE_VK, key_rows[0], v0 + col0 + c)) =
            make_float2(state[0][c], state[1][c]);
        *reinterpret_cast<float2*>(dst + state_offset(DI_GDN_STATE_VK, key_rows[2], v0 + col0 + c)) =
            make_float2(state[2][c], state[3][c]);
      }
    }
  }
}

// ---------------------------------------------------------------------------------------------
// The ABI entry points.

int baseline_supports(const di_gdn_geometry* geometry, const di_gdn_device* device, di_gdn_state_layout layout,
                      char* reason, size_t reason_capacity) {
  if (geometry == nullptr || device == nullptr)
    return refuse(reason, reason_capacity, "geometry or device is NULL");
  if (const int status = check_geometry("baseline", *geometry, layout, reason, reason_capacity); status != DI_GDN_OK)
    return status;
  if (device->sm_major < 8)
    return refuse(reason, reason_capacity,
                  "sm_%d%d unsupported: baseline needs sm_80 or newer (mma.sync bf16, cp.async)", device->sm_major,
                  device->sm_minor);
  if (device->shared_memory_per_block_optin < kSmemBytes)
    return refuse(reason, reason_capacity,
                  "baseline needs %zu bytes of shared memory per block, the device (sm_%d%d) allows %zu", kSmemBytes,
                  device->sm_major, device->sm_minor, device->shared_memory_per_block_optin);
  return accept(reason, reason_capacity);
}

// No scratch: the state slice, the chunk and its matrices live in shared memory and registers.
size_t baseline_scratch_bytes(const di_gdn_prefill_shape*) { return 0; }

int baseline_run(const di_gdn_prefill_args* args, void* /*scratch*/, size_t /*scratch_size*/, di_gdn_stream stream) {
  if (const int status = check_run_args(args); status != DI_GDN_OK) return status;
  const di_gdn_prefill_args& a = *args;
  const di_gdn_geometry& g = a.geometry;
  // Vector accesses: q, k by 16 bytes (cp.async), v and out by 8, the state pools by 16.
  if (!aligned(a.q, 16) || !aligned(a.k, 16) || !aligned(a.v, 8) || !aligned(a.out, 8) ||
      !aligned(a.initial_state, 16) || !aligned(a.final_state, 16))
    return DI_GDN_INVALID_ARGUMENT;
  if (check_geometry("baseline", g, a.state_layout, nullptr, 0) != DI_GDN_OK) return DI_GDN_UNSUPPORTED;
  if (a.num_seqs == 0) return DI_GDN_OK;
  const int64_t ctas = int64_t(a.num_seqs) * g.num_v_heads * kTilesPerHead;
  if (ctas > int64_t(INT32_MAX)) return DI_GDN_UNSUPPORTED;

  di_gdn_device info{};
  if (!current_device(info)) return DI_GDN_LAUNCH_FAILED;
  if (baseline_supports(&g, &info, a.state_layout, nullptr, 0) != DI_GDN_OK) return DI_GDN_UNSUPPORTED;

  if (cudaFuncSetAttribute(gdn_baseline_prefill_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                           int(kSmemBytes)) != cudaSuccess)
    return DI_GDN_LAUNCH_FAILED;
  gdn_baseline_prefill_kernel<<<unsigned(ctas), kThreads, kSmemBytes, reinterpret_cast<cudaStream_t>(stream)>>>(a);
  return cudaGetLastError() == cudaSuccess ? DI_GDN_OK : DI_GDN_LAUNCH_FAILED;
}

}  // namespace

const di_gdn_prefill_backend& gdn_baseline_backend() {
  static const di_gdn_prefill_backend backend{"baseline", &baseline_supports, &baseline_scratch_bytes, &baseline_run};
  return backend;
}

size_t baseline_prefill_smem_bytes() { return kSmemBytes; }

}  // namespace di::gdn
