// The chunk-parallel factor pass (gdn/chunk_factors.h). One CTA, one warpgroup, per (chunk, value
// head): K's chunk into shared memory (cp.async, rows past the sequence zero-filled), the gates by
// warp 0, K Kᵀ on tensor cores (mma.sync m16n8k16 bf16 -> f32; warp w takes rows 16 w .. 16 w + 15,
// all 64 columns), 1 / |k| from its diagonal, L' in f32, its inverse in place (chunk_math.cuh, tf32
// merges as the sm90 kernel makes them), then the hi + lo pair to global memory. About 36 KB of
// shared memory a CTA, so several CTAs share an SM and their chains overlap.
#include "gdn/chunk_factors.h"

#include <cuda_bf16.h>

#include "gdn/chunk_math.cuh"
#include "kernels/cuda_common.cuh"

namespace di::gdn {
namespace {

constexpr int kChunk = kGdnChunk;
constexpr int kKeyDim = 128;
constexpr int kThreads = 128;
constexpr int kKStride = kKeyDim + 8;   // bf16 per row of the K tile: rows 16 bytes apart mod 128
constexpr int kInvStride = kChunk + 4;  // floats per row of (I + L') / Tinv', as the sm90 kernel's

struct Shared {
  __nv_bfloat16 k[kChunk * kKStride];
  float inv[kChunk * kInvStride];
  float G[kChunk], beta[kChunk], exp_G[kChunk], tail[kChunk], k_inv[kChunk];
};

__device__ __forceinline__ uint32_t load_u32(const __nv_bfloat16* p) { return *reinterpret_cast<const uint32_t*>(p); }

__device__ __forceinline__ void mma_bf16(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
      "{%0,%1,%2,%3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// The sequence that owns `chunk`: the last s with chunk_offsets[s] <= chunk (an empty sequence
// shares its offset with the next one, which is then the owner).
__device__ __forceinline__ int owner_of(const int32_t* chunk_offsets, int num_seqs, int chunk) {
  int lo = 0, hi = num_seqs - 1;
  while (lo < hi) {
    const int mid = (lo + hi + 1) / 2;
    if (chunk_offsets[mid] <= chunk) lo = mid; else hi = mid - 1;
  }
  return lo;
}

__global__ void __launch_bounds__(kThreads) chunk_factors_kernel(const ChunkFactorsParams p) {
  extern __shared__ __align__(16) unsigned char smem_raw[];
  Shared& sh = *reinterpret_cast<Shared*>(smem_raw);
  const int chunk = int(blockIdx.x), head = int(blockIdx.y), tid = int(threadIdx.x);
  if (chunk >= p.chunk_offsets[p.num_seqs]) return;
  const int seq = owner_of(p.chunk_offsets, p.num_seqs, chunk);
  const int64_t t0 = int64_t(p.cu_seqlens[seq]) + int64_t(chunk - p.chunk_offsets[seq]) * kChunk;
  const int len = int(min(int64_t(kChunk), int64_t(p.cu_seqlens[seq + 1]) - t0));
  const int key_head = head / (p.num_v_heads / p.num_k_heads);
  const auto* k = static_cast<const __nv_bfloat16*>(p.k);

  // K's rows, 16 pieces of 16 bytes each; rows past the sequence are zero-filled.
#pragma unroll
  for (int e = 0; e < kChunk * 16 / kThreads; ++e) {
    const int piece = tid + e * kThreads, row = piece / 16, part = piece % 16;
    const bool valid = row < len;
    const __nv_bfloat16* from = valid ? k + ((t0 + row) * p.num_k_heads + key_head) * kKeyDim + part * 8 : k;
    kernels::cp_async_16(sh.k + row * kKStride + part * 8, from, valid ? 16 : 0);
  }
  kernels::cp_async_commit();
  if (tid < 32)
    load_chunk_gates(p.g, p.beta, t0, len, p.num_v_heads, head, tid, sh.G, sh.beta, sh.exp_G, sh.tail);
  kernels::cp_async_wait_all();
  __syncthreads();

  // K Kᵀ: warp w's rows 16 w + gid (+ 8), columns 8 nt + 2 tig (+ 1) in acc[nt][2 h + e].
  const int warp = tid / 32, lane = tid % 32, gid = lane / 4, tig = lane % 4;
  float acc[kChunk / 8][4];
#pragma unroll
  for (int nt = 0; nt < kChunk / 8; ++nt) acc[nt][0] = acc[nt][1] = acc[nt][2] = acc[nt][3] = 0.f;
  {
    const __nv_bfloat16* a_row = sh.k + (16 * warp + gid) * kKStride + 2 * tig;
#pragma unroll
    for (int k0 = 0; k0 < kKeyDim; k0 += 16) {
      const uint32_t a[4] = {load_u32(a_row + k0), load_u32(a_row + 8 * kKStride + k0), load_u32(a_row + k0 + 8),
                             load_u32(a_row + 8 * kKStride + k0 + 8)};
#pragma unroll
      for (int nt = 0; nt < kChunk / 8; ++nt) {
        const __nv_bfloat16* b_row = sh.k + (8 * nt + gid) * kKStride + 2 * tig + k0;
        mma_bf16(acc[nt], a, load_u32(b_row), load_u32(b_row + 8));
      }
    }
  }
  // 1 / |k| from the diagonal: row r = 16 w + gid + 8 h sits in tile 2 w + h, element gid % 2 of the
  // lane 4 gid + gid / 2. Every lane picks that element of its own tiles by masks (a select over nt
  // would index acc at run time: local memory), and the quad takes the holder's.
  const bool odd = gid % 2 != 0;
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    uint32_t bits = 0;
#pragma unroll
    for (int nt = 0; nt < kChunk / 8; ++nt)
      bits |= __float_as_uint(odd ? acc[nt][2 * h + 1] : acc[nt][2 * h]) & (nt == 2 * warp + h ? ~0u : 0u);
    const float diagonal = __uint_as_float(__shfl_sync(0xffffffffu, bits, 4 * gid + gid / 2));
    if (tig == 0) sh.k_inv[16 * warp + gid + 8 * h] = p.normalize_k ? rsqrtf(diagonal + 1e-6f) : 1.0f;
  }
  __syncthreads();

  // L'[r][c] = beta_r / |k_r|^2 exp(G_r - G_c) (K Kᵀ)[r][c] for c < r, zeros elsewhere (the merges
  // read the stored zeros above the diagonal), with the sm90 kernel's operations in its order.
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const int r = 16 * warp + gid + 8 * h;
    const float G_row = sh.G[r], l_row = sh.beta[r] * (sh.k_inv[r] * sh.k_inv[r]);
#pragma unroll
    for (int nt = 0; nt < kChunk / 8; ++nt) {
      const int c = 8 * nt + 2 * tig;
      float l[2];
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        const float decay = kernels::fast_exp2(fminf(G_row - sh.G[c + e], 0.f) * kernels::kLog2e);
        l[e] = c + e < r ? l_row * decay * acc[nt][2 * h + e] : 0.f;
      }
      *reinterpret_cast<float2*>(sh.inv + r * kInvStride + c) = make_float2(l[0], l[1]);
    }
  }
  __syncthreads();
  invert_unit_lower_mma<kInvStride, BlockSync, MergeProducts::tf32>(sh.inv, tid);

  // The pair: thread t converts row t / 2, columns 32 (t % 2) .. + 31.
  const int row = tid / 2, col0 = 32 * (tid % 2);
  const size_t at = ((size_t(chunk) * p.num_v_heads + head) * kChunk + row) * kChunk + col0;
#pragma unroll
  for (int q = 0; q < 4; ++q) {
    const float4 x0 = *reinterpret_cast<const float4*>(sh.inv + row * kInvStride + col0 + 8 * q);
    const float4 x1 = *reinterpret_cast<const float4*>(sh.inv + row * kInvStride + col0 + 8 * q + 4);
    uint32_t hi[4], lo[4];
    kernels::split_bf16x2(x0.x, x0.y, hi[0], lo[0]), kernels::split_bf16x2(x0.z, x0.w, hi[1], lo[1]);
    kernels::split_bf16x2(x1.x, x1.y, hi[2], lo[2]), kernels::split_bf16x2(x1.z, x1.w, hi[3], lo[3]);
    *reinterpret_cast<uint4*>(static_cast<__nv_bfloat16*>(p.t_hi) + at + 8 * q) = make_uint4(hi[0], hi[1], hi[2], hi[3]);
    *reinterpret_cast<uint4*>(static_cast<__nv_bfloat16*>(p.t_lo) + at + 8 * q) = make_uint4(lo[0], lo[1], lo[2], lo[3]);
  }
  if (head % (p.num_v_heads / p.num_k_heads) == 0 && tid < kChunk)
    p.k_inv[(size_t(chunk) * p.num_k_heads + key_head) * kChunk + tid] = sh.k_inv[tid];
}

}  // namespace

cudaError_t launch_chunk_factors(const ChunkFactorsParams& p, cudaStream_t stream) {
  if (p.num_seqs <= 0 || p.max_chunks <= 0) return cudaSuccess;
  if (p.num_k_heads <= 0 || p.num_v_heads % p.num_k_heads != 0) return cudaErrorInvalidValue;
  constexpr size_t kSmem = sizeof(Shared);
  static_assert(kSmem <= 48 * 1024, "within the default dynamic shared memory: no attribute to set");
  chunk_factors_kernel<<<dim3(unsigned(p.max_chunks), unsigned(p.num_v_heads)), kThreads, kSmem, stream>>>(p);
  return cudaGetLastError();
}

}  // namespace di::gdn
