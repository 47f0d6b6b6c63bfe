#pragma once
// Device pieces both GDN chunked-prefill kernels share (chunk length 64): the chunk's gate vectors
// and the float32 inverse of the unit lower-triangular (I + L). See baseline_prefill.cu for the math.
#include <cuda_runtime.h>

#include <cstdint>

namespace di::gdn {

constexpr int kGdnChunk = 64;

// How the threads taking part in a shared step wait for each other: the whole block, or one named
// barrier of `count` threads (a warpgroup of a warp-specialised kernel).
struct BlockSync {
  __device__ static void sync() { __syncthreads(); }
};
template <int id, int count>
struct NamedSync {
  __device__ static void sync() { asm volatile("bar.sync %0, %1;\n" ::"n"(id), "n"(count) : "memory"); }
};

// One warp turns the chunk's log decays g and betas (rows past the chunk: g = 0, beta = 0) into, for
// each of the 64 rows r:
//   G[r] = cumsum(g)[r],  beta[r],  exp_G[r] = exp(G[r]),  tail[r] = exp(min(G[len - 1] - G[r], 0)).
// Lane l takes rows 2 l and 2 l + 1 (g0, g1, b0, b1 are its rows' values).
__device__ __forceinline__ void chunk_gates(float g0, float g1, float b0, float b1, int len, int lane, float* G_s,
                                            float* beta_s, float* exp_G_s, float* tail_s) {
  const int r0 = 2 * lane, r1 = r0 + 1;
  // Inclusive scan of the pair sums over the lanes, then G_r0 = (sum before this lane) + g0.
  float scan = g0 + g1;
#pragma unroll
  for (int d = 1; d < 32; d *= 2) {
    const float up = __shfl_up_sync(0xffffffffu, scan, d);
    if (lane >= d) scan += up;
  }
  float before = __shfl_up_sync(0xffffffffu, scan, 1);
  if (lane == 0) before = 0.f;
  const float G0 = before + g0, G1 = G0 + g1;
  // G_last = G at the last valid row (the decay of a partial chunk stops there).
  const int last = len - 1;
  const float G_last = __shfl_sync(0xffffffffu, (last & 1) ? G1 : G0, last / 2);
  G_s[r0] = G0, G_s[r1] = G1;
  beta_s[r0] = b0, beta_s[r1] = b1;
  exp_G_s[r0] = expf(G0), exp_G_s[r1] = expf(G1);
  tail_s[r0] = expf(fminf(G_last - G0, 0.f)), tail_s[r1] = expf(fminf(G_last - G1, 0.f));
}

// The same, reading rows [t0, t0 + len) of value head `head` from g and beta ([T, heads] f32).
__device__ __forceinline__ void load_chunk_gates(const float* g, const float* beta, int64_t t0, int len, int heads,
                                                 int head, int lane, float* G_s, float* beta_s, float* exp_G_s,
                                                 float* tail_s) {
  const int r0 = 2 * lane, r1 = r0 + 1;
  const float g0 = r0 < len ? g[(t0 + r0) * heads + head] : 0.f;
  const float g1 = r1 < len ? g[(t0 + r1) * heads + head] : 0.f;
  const float b0 = r0 < len ? beta[(t0 + r0) * heads + head] : 0.f;
  const float b1 = r1 < len ? beta[(t0 + r1) * heads + head] : 0.f;
  chunk_gates(g0, g1, b0, b1, len, lane, G_s, beta_s, exp_G_s, tail_s);
}

// The four 16x16 diagonal blocks of (I + L)^-1, in place in `tmat` (64 x 64 floats, row stride
// `stride`, L strictly lower). Threads 0..63 take part (block tid / 16, column tid % 16): column c
// solves (I + L_bb) x = e_c by forward substitution, x_i = [i == c] - sum_{k < i} L_ik x_k, the terms
// added in order of k. Column-oriented: once x_k is final it goes into every x_i below it, so the
// chain of dependent steps is 16 long (each row's sum in turn would make it 120) and the sums are the
// same, term for term.
template <int stride>
__device__ __forceinline__ void invert_diagonal_blocks(float* tmat, int tid) {
  if (tid >= 64) return;
  const int base = (tid / 16) * 16, c = tid % 16;
  float x[16];
#pragma unroll
  for (int i = 0; i < 16; ++i) x[i] = i == c ? 1.f : 0.f;
#pragma unroll
  for (int k = 0; k < 15; ++k) {
#pragma unroll
    for (int i = k + 1; i < 16; ++i) x[i] = fmaf(-tmat[(base + i) * stride + base + k], x[k], x[i]);
  }
  __syncwarp();  // a block's 16 threads share one warp: all its L reads are done before the writes
#pragma unroll
  for (int i = 0; i < 16; ++i) tmat[(base + i) * stride + base + c] = x[i];
}

// The off-diagonal block of the inverse for each pair of adjacent n x n diagonal blocks (lo, hi):
//   T_hl = -T_hh · L_hl · T_ll, with T_ll, T_hh already inverted in `tmat` and L_hl still in place.
// X = L_hl T_ll goes through `scratch` ([pairs][n][n] floats); the result overwrites L_hl. All
// `threads` threads of the block take part (two __syncthreads inside).
template <int n, int threads, int stride>
__device__ __forceinline__ void merge_inverse_blocks(float* tmat, float* scratch, int tid) {
  constexpr int pairs = kGdnChunk / (2 * n);
  constexpr int per_thread = pairs * n * n / threads;
  static_assert(pairs * n * n % threads == 0, "whole elements per thread");
  // X = L_hl · T_ll (T_ll lower triangular: zeros above its diagonal are stored, so sum all k).
#pragma unroll
  for (int e = 0; e < per_thread; ++e) {
    const int idx = tid + e * threads;
    const int pair = idx / (n * n), r = (idx / n) % n, c = idx % n;
    const int lo = 2 * n * pair, hi = lo + n;
    const float* l_row = tmat + (hi + r) * stride + lo;
    float acc = 0.f;
#pragma unroll 8
    for (int k = 0; k < n; ++k) acc = fmaf(l_row[k], tmat[(lo + k) * stride + lo + c], acc);
    scratch[idx] = acc;
  }
  __syncthreads();
  // T_hl = -T_hh · X
#pragma unroll
  for (int e = 0; e < per_thread; ++e) {
    const int idx = tid + e * threads;
    const int pair = idx / (n * n), r = (idx / n) % n, c = idx % n;
    const int lo = 2 * n * pair, hi = lo + n;
    const float* t_row = tmat + (hi + r) * stride + hi;
    const float* x = scratch + pair * n * n + c;
    float acc = 0.f;
#pragma unroll 8
    for (int k = 0; k < n; ++k) acc = fmaf(t_row[k], x[k * n], acc);
    tmat[(hi + r) * stride + lo + c] = -acc;
  }
  __syncthreads();
}

// The same merges with register tiles, for blocks of `threads` <= pairs n n / 4: thread (pair, row
// group, column group) owns a rows x 4 tile and reads each matrix element it needs once per tile (a
// float4 of the right-hand matrix and `rows` scalars of the left one per k). The sums run over all n
// terms, the zeros stored above T's diagonal included, so that they unroll completely and the
// shared loads issue ahead of the FMAs (with few warps, a loop that stops at the triangle's edge
// waits on one load per step); the added terms are exact zeros.
template <int n, int threads, int stride, typename Sync = BlockSync>
__device__ __forceinline__ void merge_inverse_blocks_tiled(float* tmat, float* scratch, int tid) {
  constexpr int pairs = kGdnChunk / (2 * n);
  constexpr int col_groups = n / 4;
  constexpr int rows = pairs * n * col_groups / threads;  // rows per thread
  static_assert(rows >= 1 && pairs * (n / rows) * col_groups == threads, "whole tiles per thread");
  const int cg = tid % col_groups, rg = (tid / col_groups) % (n / rows), pair = tid / (col_groups * (n / rows));
  const int lo = 2 * n * pair, hi = lo + n, c0 = 4 * cg, r0 = rows * rg;
  float acc[rows][4];
#pragma unroll
  for (int i = 0; i < rows; ++i) acc[i][0] = acc[i][1] = acc[i][2] = acc[i][3] = 0.f;
#pragma unroll
  for (int k = 0; k < n; ++k) {  // X = L_hl · T_ll
    const float4 t = *reinterpret_cast<const float4*>(tmat + (lo + k) * stride + lo + c0);
#pragma unroll
    for (int i = 0; i < rows; ++i) {
      const float l = tmat[(hi + r0 + i) * stride + lo + k];
      acc[i][0] = fmaf(l, t.x, acc[i][0]), acc[i][1] = fmaf(l, t.y, acc[i][1]);
      acc[i][2] = fmaf(l, t.z, acc[i][2]), acc[i][3] = fmaf(l, t.w, acc[i][3]);
    }
  }
  float* x = scratch + pair * n * n;  // [n][n]
#pragma unroll
  for (int i = 0; i < rows; ++i)
    *reinterpret_cast<float4*>(x + (r0 + i) * n + c0) = make_float4(acc[i][0], acc[i][1], acc[i][2], acc[i][3]);
  Sync::sync();
#pragma unroll
  for (int i = 0; i < rows; ++i) acc[i][0] = acc[i][1] = acc[i][2] = acc[i][3] = 0.f;
#pragma unroll
  for (int k = 0; k < n; ++k) {  // T_hl = -T_hh · X
    const float4 xv = *reinterpret_cast<const float4*>(x + k * n + c0);
#pragma unroll
    for (int i = 0; i < rows; ++i) {
      const float t = tmat[(hi + r0 + i) * stride + hi + k];
      acc[i][0] = fmaf(t, xv.x, acc[i][0]), acc[i][1] = fmaf(t, xv.y, acc[i][1]);
      acc[i][2] = fmaf(t, xv.z, acc[i][2]), acc[i][3] = fmaf(t, xv.w, acc[i][3]);
    }
  }
#pragma unroll
  for (int i = 0; i < rows; ++i)
    *reinterpret_cast<float4*>(tmat + (hi + r0 + i) * stride + lo + c0) =
        make_float4(-acc[i][0], -acc[i][1], -acc[i][2], -acc[i][3]);
  Sync::sync();
}

// (I + L)^-1 in place: diagonal blocks, then the merges 16 -> 32 -> 64. `scratch` holds 1024 floats.
template <int threads, int stride>
__device__ __forceinline__ void invert_unit_lower(float* tmat, float* scratch, int tid) {
  invert_diagonal_blocks<stride>(tmat, tid);
  __syncthreads();
  merge_inverse_blocks<16, threads, stride>(tmat, scratch, tid);
  merge_inverse_blocks<32, threads, stride>(tmat, scratch, tid);
}

}  // namespace di::gdn

namespace di::gdn {
// x as tf32 big + small, each exact in tf32 (10-bit mantissa): x = big + small to ~21 bits. big is x
// rounded by adding half a tf32 ulp to its bits and clearing the 13 below the mantissa (so |small| <=
// 2^-11 |x|), small = x - big (exact in f32) with the same bits cleared (an error below 2^-21 |x|).
// Integer steps: cvt.rna.tf32.f32 is not an instruction on sm_90, and its emulation (a test for
// infinities and a select around each rounding) made the merges' splits twice as long. A NaN x keeps
// a NaN small, so it still reaches the products.
__device__ __forceinline__ void split_tf32(float x, uint32_t& big, uint32_t& small) {
  big = (__float_as_uint(x) + 0x1000u) & 0xffffe000u;
  small = __float_as_uint(x - __uint_as_float(big)) & 0xffffe000u;
}
// c += a b for one m16n8k8 tile on tensor cores (tf32 operands, f32 accumulators).
__device__ __forceinline__ void mma_tf32(float (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  asm("mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
      "{%0, %1, %2, %3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}
// How the merges' tf32 products keep their operands: split in three products (small x big, big x
// small, big x big: about float32's accuracy, the dropped small x small term and small's truncation
// each below 2^-21 of the product), or each operand rounded once to tf32 (one product: a third of the
// tensor-core work and none of the splits; an entry off the diagonal blocks then carries about 2^-11
// of its terms' size, under what sm90's bf16 hi + lo Tinv keeps of it to change the GDN state's
// error: tools/numerics/gdn_chunk_model.py).
enum class MergeProducts { split_3xtf32, tf32 };

__device__ __forceinline__ uint32_t round_tf32(float x) { return (__float_as_uint(x) + 0x1000u) & 0xffffe000u; }

// An A operand of the merges' products, as kProducts keeps it.
template <MergeProducts kProducts>
struct MergeOperand {
  uint32_t big[4], small[4];
  __device__ __forceinline__ explicit MergeOperand(const float (&x)[4]) {
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      if constexpr (kProducts == MergeProducts::split_3xtf32)
        split_tf32(x[i], big[i], small[i]);
      else
        big[i] = round_tf32(x[i]);
    }
  }
};
// c += a b, the b pair rounded or split as a is.
template <MergeProducts kProducts>
__device__ __forceinline__ void merge_mma(float (&c)[4], const MergeOperand<kProducts>& a, float b0, float b1) {
  if constexpr (kProducts == MergeProducts::split_3xtf32) {
    uint32_t b0_big, b0_small, b1_big, b1_small;
    split_tf32(b0, b0_big, b0_small), split_tf32(b1, b1_big, b1_small);
    mma_tf32(c, a.small, b0_big, b1_big);
    mma_tf32(c, a.big, b0_small, b1_small);
    mma_tf32(c, a.big, b0_big, b1_big);
  } else {
    mma_tf32(c, a.big, round_tf32(b0), round_tf32(b1));
  }
}

// merge_inverse_blocks on tensor cores (mma.sync m16n8k8, tf32 operands as kProducts says), for
// one warpgroup (128 threads): T_hl = -T_hh L_hl T_ll for each pair of adjacent n x n diagonal
// blocks (n = 16: two pairs; n = 32: one), computed transposed so that every operand is either read
// from `tmat` or already in registers:
//   Y = T_llᵀ L_hlᵀ (= (L_hl T_ll)ᵀ),  Z = Y T_hhᵀ (= -T_hlᵀ),  T_hl[r][c] = -Z[c][r].
// Warp w takes rows 16 (w % 2) of Y for n = 32 (pair w % 2 for n = 16), all its columns, and half of
// Z's columns (w / 2). Y's accumulators are Z's A operand as they lie: in every product the k slot
// t (t < 4) of a fragment holds contraction index 2 t and slot t + 4 index 2 t + 1 (a relabelling of
// the sum that A and B share), which is what an accumulator's column pair (2 t, 2 t + 1) gives. The
// upper triangles of T_ll and T_hh hold stored zeros (as the tiled FMA merge relies on), so the sums
// run over all n terms. One sync between the reads of L_hl and the writes of T_hl over it, one after.
template <int n, int stride, typename Sync, MergeProducts kProducts = MergeProducts::split_3xtf32>
__device__ __forceinline__ void merge_inverse_blocks_mma(float* tmat, int tid) {
  static_assert(n == 16 || n == 32, "two pairs of 16, or one of 32");
  constexpr int kSteps = n / 8;  // Y's 8-column tiles = the k steps of both products
  const int warp = tid / 32, lane = tid % 32, g = lane / 4, t = lane % 4;
  const int unit = warp % 2, half = warp / 2;
  const int pair = n == 16 ? unit : 0, m0 = n == 16 ? 0 : 16 * unit;  // Y's rows m0 .. m0 + 15
  const int lo = 2 * n * pair, hi = lo + n;
  float y[kSteps][4];
#pragma unroll
  for (int j = 0; j < kSteps; ++j) y[j][0] = y[j][1] = y[j][2] = y[j][3] = 0.f;
#pragma unroll
  for (int s = 0; s < kSteps; ++s) {
    // A = T_llᵀ: A[m][k] = T_ll[k][m], rows m0 + g (+ 8), k = 8 s + 2 t (slot t), 8 s + 2 t + 1 (slot t + 4).
    const float* ta = tmat + (lo + 8 * s + 2 * t) * stride + lo + m0 + g;
    const float a[4] = {ta[0], ta[8], ta[stride], ta[stride + 8]};
    const MergeOperand<kProducts> a_op(a);
#pragma unroll
    for (int j = 0; j < kSteps; ++j) {  // B = L_hlᵀ: B[k][r] = L_hl[r][k], r = 8 j + g
      const float2 b = *reinterpret_cast<const float2*>(tmat + (hi + 8 * j + g) * stride + lo + 8 * s + 2 * t);
      merge_mma(y[j], a_op, b.x, b.y);
    }
  }
  constexpr int kHalf = kSteps / 2;  // Z's 8-column tiles per warp
  float z[kHalf][4];
#pragma unroll
  for (int j = 0; j < kHalf; ++j) {
    z[j][0] = z[j][1] = z[j][2] = z[j][3] = 0.f;
    const int r = 8 * (half * kHalf + j);  // Z's columns r .. r + 7: rows of T_hh, of T_hl
#pragma unroll
    for (int s = 0; s < kSteps; ++s) {  // A = Y's tile s; B = T_hhᵀ: B[k][r'] = T_hh[r'][k]
      const float a[4] = {y[s][0], y[s][2], y[s][1], y[s][3]};
      const float2 b = *reinterpret_cast<const float2*>(tmat + (hi + r + g) * stride + hi + 8 * s + 2 * t);
      merge_mma(z[j], MergeOperand<kProducts>(a), b.x, b.y);
    }
  }
  Sync::sync();  // every warp's reads of L_hl are done
#pragma unroll
  for (int j = 0; j < kHalf; ++j) {
    // z[j] = Z[m0 + g (+ 8)][r + 2 t (+ 1)] = -T_hl[r + 2 t (+ 1)][m0 + g (+ 8)]
    float* d = tmat + (hi + 8 * (half * kHalf + j) + 2 * t) * stride + lo + m0 + g;
    d[0] = -z[j][0], d[stride] = -z[j][1], d[8] = -z[j][2], d[stride + 8] = -z[j][3];
  }
  Sync::sync();
}

// (I + L)^-1 in place for one warpgroup: the diagonal 16 x 16 blocks by forward substitution, the
// merges on tensor cores.
template <int stride, typename Sync, MergeProducts kProducts = MergeProducts::split_3xtf32>
__device__ __forceinline__ void invert_unit_lower_mma(float* tmat, int tid) {
  invert_diagonal_blocks<stride>(tmat, tid);
  Sync::sync();
  merge_inverse_blocks_mma<16, stride, Sync, kProducts>(tmat, tid);
  merge_inverse_blocks_mma<32, stride, Sync, kProducts>(tmat, tid);
}

// The register-tiled variant of invert_unit_lower, for blocks of at most 128 threads (rows of 16-byte
// aligned floats: stride % 4 == 0).
template <int threads, int stride, typename Sync = BlockSync>
__device__ __forceinline__ void invert_unit_lower_tiled(float* tmat, float* scratch, int tid) {
  static_assert(stride % 4 == 0, "float4 rows");
  invert_diagonal_blocks<stride>(tmat, tid);
  Sync::sync();
  merge_inverse_blocks_tiled<16, threads, stride, Sync>(tmat, scratch, tid);
  merge_inverse_blocks_tiled<32, threads, stride, Sync>(tmat, scratch, tid);
}
}  // namespace di::gdn
