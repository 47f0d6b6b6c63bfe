// Full attention over a paged KV cache on the GPU: KV append, prefill on tensor cores, split-KV
// decode. The API, the cache layout and the numerics are described in attention.h; the planning
// and the parameter checks live in cuda_attention_plan.cpp.
//
// Prefill (FlashAttention-2 style). One CTA per (query head, tile of 64 queries of one sequence),
// 4 warps, each warp owning 16 query rows. Per iteration of 64 keys:
//   S = Q K^T    mma.sync m16n8k16 bf16 -> f32, Q and K fragments by ldmatrix from shared memory
//   causal mask, online softmax in f32 in the log2 domain (exp2 of scores pre-scaled by scale*log2e)
//   O += P V     P rounded to bf16 for the tensor cores (the one rounding beyond the reference's),
//                V fragments by ldmatrix.trans
// Shared memory: Q, K and V tiles of [64][256] bf16 (32 KiB each, 96 KiB), rows XOR-swizzled in
// 16-byte chunks so that ldmatrix is free of bank conflicts. K and V are loaded by cp.async and
// overlap each other's compute: V(j) streams in while S = Q K(j)^T runs, K(j+1) while O += P V(j).
// 96 KiB lets two CTAs share an SM. GQA: one CTA per query head (the query heads of a group read
// the same K/V tiles, which then come from L2); with 64 query rows per CTA either way, packing the
// group's heads into one CTA would not lower the traffic per FLOP for long prompts, and this keeps
// one query position per row. The output is staged through the warp's own Q rows in shared memory
// for 16-byte stores.
//
// Decode ("flash decoding"). One CTA per (split of the keys, block of query heads sharing a KV
// head, sequence), 4 warps taking 4 keys at a time in turn (2 for blocks of 6 or 8 heads); each
// lane holds 8 of the 256 dims, so a K/V row is one 16-byte load per lane, read once for all query
// heads of the block. Scores, softmax
// and accumulation stay in f32 (no tensor cores: decode is bound by the K/V bytes). The 4 warps'
// partial states are merged in shared memory; with one split the CTA writes the output, otherwise
// (max, sum, unnormalised accumulator) go to the workspace and a combine kernel merges the splits.
//
// No fmt or spdlog here: they fail to compile under nvcc.
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstring>

#include "kernels/attention/attention.h"
#include "kernels/cuda_common.cuh"

namespace di::attention {
namespace {

using kernels::fast_exp2;
using kernels::kLog2e;

// ---- Device helpers -------------------------------------------------------------------------------

// Two floats rounded to bf16 (round to nearest even), `lo` in the low half as mma fragments want.
__device__ __forceinline__ uint32_t pack_bf16x2(float lo, float hi) {
  const __nv_bfloat162 h = __floats2bfloat162_rn(lo, hi);
  uint32_t u;
  memcpy(&u, &h, sizeof(u));
  return u;
}
__device__ __forceinline__ float bf16_low(uint32_t w) { return __uint_as_float(w << 16); }
__device__ __forceinline__ float bf16_high(uint32_t w) { return __uint_as_float(w & 0xffff0000u); }

// The 8 bf16 of a 16-byte word as floats, in memory order.
__device__ __forceinline__ void unpack_bf16x8(const uint4& w, float (&f)[8]) {
  f[0] = bf16_low(w.x), f[1] = bf16_high(w.x), f[2] = bf16_low(w.y), f[3] = bf16_high(w.y);
  f[4] = bf16_low(w.z), f[5] = bf16_high(w.z), f[6] = bf16_low(w.w), f[7] = bf16_high(w.w);
}

__device__ __forceinline__ float warp_sum(float x) {  // butterfly: every lane gets the same bits
#pragma unroll
  for (int offset = 16; offset > 0; offset >>= 1) x += __shfl_xor_sync(0xffffffffu, x, offset);
  return x;
}

__device__ __forceinline__ uint32_t shared_address(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

// 16-byte global -> shared copy; when !valid the destination is zero-filled and nothing is read.
__device__ __forceinline__ void cp_async_16(uint32_t dst, const void* src, bool valid) {
  const int src_bytes = valid ? 16 : 0;
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src), "r"(src_bytes) : "memory");
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }
__device__ __forceinline__ void cp_async_wait_all() { asm volatile("cp.async.wait_group 0;\n" ::: "memory"); }

__device__ __forceinline__ void ldmatrix_x4(uint32_t (&r)[4], uint32_t addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr));
}
__device__ __forceinline__ void ldmatrix_x4_trans(uint32_t (&r)[4], uint32_t addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr));
}

// d += a b: a 16x16 bf16 (row), b 16x8 bf16 (col), d 16x8 f32.
__device__ __forceinline__ void mma_bf16_16816(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
      "{%0, %1, %2, %3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// Element offset of the row of (sequence table row, position, kv head) in a paged cache tensor.
__device__ __forceinline__ int64_t cache_offset(const int32_t* table_row, int pos, int block_size, int block_shift,
                                                int num_kv_heads, int kv_head, int head_dim) {
  const int64_t block = table_row[pos >> block_shift];
  return ((block * block_size + (pos & (block_size - 1))) * num_kv_heads + kv_head) * int64_t(head_dim);
}

// ---- KV append ------------------------------------------------------------------------------------

constexpr int kAppendThreads = 256;
constexpr int kAppendMaxBlocks = 4096;  // grid-stride beyond this

__global__ void __launch_bounds__(kAppendThreads) kv_append_kernel(const KvAppendParams p) {
  kernels::wait_for_prior_grid();
  kernels::allow_dependent_grid();
  const PagedKvCache& c = p.cache;
  const int chunks_per_token = c.num_kv_heads * c.head_dim / 8;  // 16-byte chunks of a token's [Hkv, D] row
  const int64_t total = int64_t(p.num_tokens) * chunks_per_token;
  const int block_shift = __ffs(c.block_size) - 1;
  const uint4* k_src = reinterpret_cast<const uint4*>(p.k);
  const uint4* v_src = reinterpret_cast<const uint4*>(p.v);
  uint4* k_dst = reinterpret_cast<uint4*>(c.k);
  uint4* v_dst = reinterpret_cast<uint4*>(c.v);
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < total; i += int64_t(gridDim.x) * blockDim.x) {
    const int token = int(i / chunks_per_token);
    const int chunk = int(i - int64_t(token) * chunks_per_token);
    const int seq = p.token_seq[token];
    const int pos = p.token_pos[token];
    if (seq < 0 || pos < 0 || (pos >> block_shift) >= c.max_blocks_per_seq) continue;
    const int64_t block = c.block_table[int64_t(seq) * c.max_blocks_per_seq + (pos >> block_shift)];
    const int64_t cache_row = block * c.block_size + (pos & (c.block_size - 1));
    const int64_t dst = cache_row * chunks_per_token + chunk;
    const int64_t src = int64_t(token) * chunks_per_token + chunk;
    k_dst[dst] = k_src[src];
    v_dst[dst] = v_src[src];
  }
}

// ---- Prefill --------------------------------------------------------------------------------------

constexpr int kPrefillKeys = 64;  // keys per iteration
constexpr int kPrefillWarps = 4;  // each owns 16 of the 64 query rows
constexpr int kPrefillThreads = kPrefillWarps * 32;
static_assert(kPrefillTileQueries == kPrefillWarps * 16, "one m16 row block per warp");

template <int D>
constexpr int prefill_smem_bytes() {
  return 3 * kPrefillTileQueries * D * 2;  // Q, K, V tiles of bf16 [64][D]
}

// Tiles in shared memory are bf16 [64 rows][256] (512-byte rows) whose 16-byte chunks are
// XOR-swizzled by the row's low three bits: chunk c of row r sits at chunk c ^ (r & 7). The eight rows
// one ldmatrix phase reads (same chunk, eight consecutive rows) then fall in eight different bank
// groups, and so do the eight rows one cp.async wavefront writes.
constexpr int kRowBytes = 512;
constexpr int kChunkBytes = 16;

// Byte offset of chunk `chunk` of row `row`.
__device__ __forceinline__ uint32_t swizzled_offset(int row, int chunk) {
  return uint32_t(row * kRowBytes + ((chunk ^ (row & 7)) * kChunkBytes));
}

// The chunk index 2*kk + hi, with kk = 4*m + j, swizzles to 8*m + ((2*j + hi) ^ (row & 7)): the
// part that varies with m is a constant offset. So a lane keeps four base offsets (j = 0..3) and
// reaches every column step as base[kk % 4] + (kk / 4) * 128 bytes, an immediate in the ldmatrix.
struct LaneColumnBases {
  uint32_t base[4];
  __device__ __forceinline__ LaneColumnBases(uint32_t tile, int row, int hi) {
#pragma unroll
    for (int j = 0; j < 4; ++j) base[j] = tile + swizzled_offset(row, 2 * j + hi);
  }
  // Address of 16-column step `kk` (chunks 2kk + hi), `row_step` rows of 16 further down.
  __device__ __forceinline__ uint32_t at(int kk, int row_step = 0) const {
    return base[kk % 4] + uint32_t((kk / 4) * 8 * kChunkBytes + row_step * 16 * kRowBytes);
  }
};

// Copies rows 0..63 of a tile with cp.async: warp w copies rows w, w+4, ..., lane l chunk l of each
// (a 512-byte coalesced read per warp and row). source(r) gives row r's global address, or null to
// zero-fill the row (then nothing is read; `readable` is any valid address, given to cp.async all the
// same). Row r = 4*i + w has r & 7 = w + 4*(i % 2), so two lane offsets serve all rows.
template <typename RowSource>
__device__ __forceinline__ void load_tile(uint32_t tile, int warp, int lane, const uint16_t* readable,
                                          RowSource source) {
  const uint32_t even = tile + swizzled_offset(warp, lane);
  const uint32_t odd = tile + swizzled_offset(warp + 4, lane);
#pragma unroll
  for (int i = 0; i < kPrefillTileQueries / kPrefillWarps; ++i) {
    const int r = i * kPrefillWarps + warp;
    const uint16_t* src = source(r);
    const uint32_t dst = (i % 2 ? odd : even) + uint32_t((i / 2) * 8 * kRowBytes);
    cp_async_16(dst, src ? src + lane * 8 : readable, src != nullptr);
  }
}

template <int D>
__global__ void __launch_bounds__(kPrefillThreads, 2) prefill_kernel(const PrefillParams p) {
  static_assert(D == 32 * 8, "the tile loaders give each lane one 16-byte chunk of a row");
  constexpr int kTileBytes = kPrefillTileQueries * kRowBytes;
  extern __shared__ __align__(128) unsigned char smem[];
  const uint32_t s_q = shared_address(smem);  // bf16 [64 queries][D], swizzled; later the output tile
  const uint32_t s_k = s_q + kTileBytes;      // bf16 [64 keys][D], swizzled
  const uint32_t s_v = s_k + kTileBytes;      // bf16 [64 keys][D], swizzled

  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int seq = p.tile_seq[blockIdx.y];
  const int q_start = p.tile_q_start[blockIdx.y];
  const int q_head = blockIdx.x;
  const int num_q_heads = p.num_q_heads;
  const int kv_head = q_head / (num_q_heads / p.cache.num_kv_heads);
  const int first_token = p.cu_seqlens_q[seq];
  const int n_q = p.cu_seqlens_q[seq + 1] - first_token;
  const int kv_len = p.kv_lens[seq];
  const int rows = min(kPrefillTileQueries, n_q - q_start);  // queries of this tile
  if (rows <= 0) return;
  const int first_pos = kv_len - n_q + q_start;  // absolute position of the tile's first query
  const int num_key_tiles = (first_pos + rows - 1) / kPrefillKeys + 1;
  const int32_t* table_row = p.cache.block_table + int64_t(seq) * p.cache.max_blocks_per_seq;
  const int block_shift = __ffs(p.cache.block_size) - 1;
  const float scale_log2 = p.scale * kLog2e;
  const int64_t tile_token = int64_t(first_token) + q_start;

  // Row sources of the tiles: queries of the tile (zero rows past `rows`); keys through the block
  // table (zero rows at and past kv_len, so that neither unwritten cache rows nor unused block-table
  // entries are ever read).
  const auto query_row = [&](int r) -> const uint16_t* {
    return r < rows ? p.q + ((tile_token + r) * num_q_heads + q_head) * D : nullptr;
  };
  const auto cache_rows = [&](const uint16_t* cache, int key0) {
    return [=, &p](int r) -> const uint16_t* {
      const int pos = key0 + r;
      if (pos >= kv_len) return nullptr;
      return cache + cache_offset(table_row, pos, p.cache.block_size, block_shift, p.cache.num_kv_heads, kv_head, D);
    };
  };
  load_tile(s_q, warp, lane, p.q, query_row);
  load_tile(s_k, warp, lane, p.cache.k, cache_rows(p.cache.k, 0));
  cp_async_commit();

  // ldmatrix addresses. A (Q, 16x16): lanes 0-15 rows 0-15 at chunk 2kk, lanes 16-31 at chunk 2kk+1.
  // B of Q K^T (K rows are the n index): matrices (keys 0-7, chunk 2kk), (keys 0-7, 2kk+1),
  // (keys 8-15, 2kk), (keys 8-15, 2kk+1) for two 8-key blocks. B of P V (V rows are the k index,
  // transposed on load): (keys 0-7, dims chunk 2db), (keys 8-15, 2db), (keys 0-7, 2db+1),
  // (keys 8-15, 2db+1) for two 8-dim blocks.
  const LaneColumnBases q_cols(s_q, warp * 16 + (lane & 15), lane >> 4);
  const LaneColumnBases k_cols(s_k, (lane & 7) + ((lane >> 4) << 3), (lane >> 3) & 1);
  const LaneColumnBases v_cols(s_v, (lane & 7) + ((lane >> 3) & 1) * 8, lane >> 4);

  // mma C layout: lane holds rows g and g+8 of the warp's 16, columns 2*t4 and 2*t4+1 of each 8-block.
  const int g = lane >> 2, t4 = lane & 3;
  const int row0 = warp * 16 + g;  // tile row of c[0], c[1]; c[2], c[3] are row0 + 8
  const int pos0 = first_pos + row0, pos1 = pos0 + 8;

  float o[D / 8][4] = {};                     // the warp's O[16][D] in C fragments (f32)
  float row_max[2] = {-INFINITY, -INFINITY};  // running max of the raw scores, rows g and g+8
  float row_sum[2] = {0.0f, 0.0f};            // this lane's part of the running softmax sums

  for (int kt = 0; kt < num_key_tiles; ++kt) {
    const int key0 = kt * kPrefillKeys;
    cp_async_wait_all();
    __syncthreads();  // K(kt) (and Q) resident; every warp is done with V(kt-1)
    load_tile(s_v, warp, lane, p.cache.v, cache_rows(p.cache.v, key0));
    cp_async_commit();

    // S[16][64] = Q K^T for this warp's rows (raw scores, f32).
    float s[kPrefillKeys / 8][4] = {};
#pragma unroll
    for (int kk = 0; kk < D / 16; ++kk) {
      uint32_t a[4];
      ldmatrix_x4(a, q_cols.at(kk));
#pragma unroll
      for (int nb = 0; nb < kPrefillKeys / 16; ++nb) {
        uint32_t b[4];  // b[0], b[1]: keys nb*16 + 0..7; b[2], b[3]: keys nb*16 + 8..15
        ldmatrix_x4(b, k_cols.at(kk, nb));
        mma_bf16_16816(s[2 * nb], a, b[0], b[1]);
        mma_bf16_16816(s[2 * nb + 1], a, b[2], b[3]);
      }
    }

    // Causal mask where the key tile reaches past the tile's first query (keys at and past kv_len
    // lie past every valid query's position, so this masks them too).
    if (key0 + kPrefillKeys - 1 > first_pos) {
#pragma unroll
      for (int j = 0; j < kPrefillKeys / 8; ++j) {
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          const int key = key0 + j * 8 + 2 * t4 + e;
          if (key > pos0) s[j][e] = -INFINITY;
          if (key > pos1) s[j][2 + e] = -INFINITY;
        }
      }
    }

    // Online softmax. Key 0 is in the first tile and visible to every row, so the running max is
    // finite from the first tile on; the -inf guard only keeps exp2 away from inf - inf.
    float tile_max[2] = {row_max[0], row_max[1]};
#pragma unroll
    for (int j = 0; j < kPrefillKeys / 8; ++j) {
      tile_max[0] = fmaxf(tile_max[0], fmaxf(s[j][0], s[j][1]));
      tile_max[1] = fmaxf(tile_max[1], fmaxf(s[j][2], s[j][3]));
    }
    float shift[2], alpha[2];
#pragma unroll
    for (int i = 0; i < 2; ++i) {
      tile_max[i] = fmaxf(tile_max[i], __shfl_xor_sync(0xffffffffu, tile_max[i], 1));
      tile_max[i] = fmaxf(tile_max[i], __shfl_xor_sync(0xffffffffu, tile_max[i], 2));
      shift[i] = tile_max[i] == -INFINITY ? 0.0f : tile_max[i] * scale_log2;
      alpha[i] = fast_exp2(row_max[i] * scale_log2 - shift[i]);  // 0 on the first tile
      row_max[i] = tile_max[i];
    }
    // P = exp2(S * scale * log2e - max), summed in f32 and rounded to bf16 as the A operand of P V:
    // pa[kk] covers keys kk*16 .. kk*16+15.
    uint32_t pa[kPrefillKeys / 16][4];
    float tile_sum[2] = {0.0f, 0.0f};
#pragma unroll
    for (int j = 0; j < kPrefillKeys / 8; ++j) {
      const float p0 = fast_exp2(fmaf(s[j][0], scale_log2, -shift[0]));
      const float p1 = fast_exp2(fmaf(s[j][1], scale_log2, -shift[0]));
      const float p2 = fast_exp2(fmaf(s[j][2], scale_log2, -shift[1]));
      const float p3 = fast_exp2(fmaf(s[j][3], scale_log2, -shift[1]));
      tile_sum[0] += p0 + p1;
      tile_sum[1] += p2 + p3;
      pa[j / 2][(j % 2) * 2 + 0] = pack_bf16x2(p0, p1);  // row g
      pa[j / 2][(j % 2) * 2 + 1] = pack_bf16x2(p2, p3);  // row g + 8
    }
#pragma unroll
    for (int i = 0; i < 2; ++i) row_sum[i] = row_sum[i] * alpha[i] + tile_sum[i];
#pragma unroll
    for (int d = 0; d < D / 8; ++d) {
      o[d][0] *= alpha[0], o[d][1] *= alpha[0];
      o[d][2] *= alpha[1], o[d][3] *= alpha[1];
    }

    cp_async_wait_all();
    __syncthreads();  // V(kt) resident; every warp is done with K(kt)
    if (kt + 1 < num_key_tiles) {
      load_tile(s_k, warp, lane, p.cache.k, cache_rows(p.cache.k, key0 + kPrefillKeys));
      cp_async_commit();
    }

    // O[16][D] += P[16][64] V[64][D].
#pragma unroll
    for (int kk = 0; kk < kPrefillKeys / 16; ++kk) {
#pragma unroll
      for (int db = 0; db < D / 16; ++db) {
        uint32_t b[4];  // b[0], b[1]: dims db*16 + 0..7; b[2], b[3]: dims db*16 + 8..15
        ldmatrix_x4_trans(b, v_cols.at(db, kk));
        mma_bf16_16816(o[2 * db], pa[kk], b[0], b[1]);
        mma_bf16_16816(o[2 * db + 1], pa[kk], b[2], b[3]);
      }
    }
  }

  // Normalise, round once to bf16 and stage in the warp's own 16 Q rows (no other warp reads them),
  // then store whole 512-byte rows.
  float inv_sum[2];
#pragma unroll
  for (int i = 0; i < 2; ++i) {
    row_sum[i] += __shfl_xor_sync(0xffffffffu, row_sum[i], 1);
    row_sum[i] += __shfl_xor_sync(0xffffffffu, row_sum[i], 2);
    inv_sum[i] = row_sum[i] > 0.0f ? 1.0f / row_sum[i] : 0.0f;
  }
#pragma unroll
  for (int d = 0; d < D / 8; ++d) {  // chunk d holds dims 8d..8d+7; this lane's pair starts at 2*t4
    *reinterpret_cast<uint32_t*>(smem + swizzled_offset(row0, d) + 4 * t4) =
        pack_bf16x2(o[d][0] * inv_sum[0], o[d][1] * inv_sum[0]);
    *reinterpret_cast<uint32_t*>(smem + swizzled_offset(row0 + 8, d) + 4 * t4) =
        pack_bf16x2(o[d][2] * inv_sum[1], o[d][3] * inv_sum[1]);
  }
  __syncwarp();
#pragma unroll
  for (int i = 0; i < 16; ++i) {
    const int r = warp * 16 + i;
    if (r < rows) {
      const uint4 row_chunk = *reinterpret_cast<const uint4*>(smem + swizzled_offset(r, lane));
      *reinterpret_cast<uint4*>(p.out + ((tile_token + r) * num_q_heads + q_head) * D + lane * 8) = row_chunk;
    }
  }
}

template <int D>
cudaError_t launch_prefill(const PrefillParams& p, cudaStream_t stream) {
  constexpr int smem = prefill_smem_bytes<D>();
  const auto kernel = prefill_kernel<D>;
  cudaError_t status = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
  if (status != cudaSuccess) return status;
  status = cudaFuncSetAttribute(kernel, cudaFuncAttributePreferredSharedMemoryCarveout, cudaSharedmemCarveoutMaxShared);
  if (status != cudaSuccess) return status;
  // Heads vary fastest: CTAs start in the planner's order of decreasing work, and the query heads
  // of a GQA group run side by side, sharing their K/V tiles in L2.
  kernel<<<dim3(p.num_q_heads, p.num_tiles), kPrefillThreads, smem, stream>>>(p);
  return cudaGetLastError();
}

// ---- Decode ---------------------------------------------------------------------------------------

constexpr int kDecodeWarps = 4;
constexpr int kDecodeThreads = kDecodeWarps * 32;
constexpr int kDecodeSplitGrain = 16;  // split lengths are multiples of this many keys

// Workspace: f32 [num_seqs, num_q_heads, num_splits, D] accumulators, then float2
// [num_seqs, num_q_heads, num_splits] (max in the log2 domain, sum).
__device__ __forceinline__ float2* decode_stats(const DecodeParams& p, int head_dim) {
  float* acc = static_cast<float*>(p.workspace);
  return reinterpret_cast<float2*>(acc + int64_t(p.num_seqs) * p.num_q_heads * p.num_splits * head_dim);
}

template <int D, int kHeads>
__global__ void __launch_bounds__(kDecodeThreads) decode_split_kernel(const DecodeParams p) {
  static_assert(D == 32 * 8, "each lane holds 8 dims: one 16-byte load per K/V row");
  kernels::wait_for_prior_grid();
  kernels::allow_dependent_grid();
  __shared__ __align__(16) float s_acc[kDecodeWarps][kHeads][D];  // each warp's unnormalised accumulators
  __shared__ float s_max[kDecodeWarps][kHeads];                   // and their running max (log2 domain) and sum
  __shared__ float s_sum[kDecodeWarps][kHeads];

  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int split = blockIdx.x, seq = blockIdx.z;
  const int q_head0 = blockIdx.y * kHeads;
  const int num_q_heads = p.num_q_heads;
  const PagedKvCache& c = p.cache;
  const int kv_head = q_head0 / (num_q_heads / c.num_kv_heads);
  const int kv_len = p.kv_lens[seq];
  const int num_splits = p.num_splits;
  const int64_t even_split = (int64_t(kv_len) + num_splits - 1) / num_splits;
  const int64_t split_len = (even_split + kDecodeSplitGrain - 1) / kDecodeSplitGrain * kDecodeSplitGrain;
  const int key_begin = int(min(int64_t(kv_len), split * split_len));
  const int key_end = int(min(int64_t(kv_len), key_begin + split_len));
  const int32_t* table_row = c.block_table + int64_t(seq) * c.max_blocks_per_seq;
  const int block_shift = __ffs(c.block_size) - 1;
  const float scale_log2 = p.scale * kLog2e;

  // q pre-scaled by scale * log2e (in f32), so that scores come out in the log2 domain.
  float q[kHeads][8];
#pragma unroll
  for (int h = 0; h < kHeads; ++h) {
    const uint4 raw = *reinterpret_cast<const uint4*>(p.q + (int64_t(seq) * num_q_heads + q_head0 + h) * D + lane * 8);
    unpack_bf16x8(raw, q[h]);
#pragma unroll
    for (int i = 0; i < 8; ++i) q[h][i] *= scale_log2;
  }
  float acc[kHeads][8] = {};  // unnormalised output, this lane's 8 dims
  float run_max[kHeads], run_sum[kHeads];
#pragma unroll
  for (int h = 0; h < kHeads; ++h) run_max[h] = -INFINITY, run_sum[h] = 0.0f;

  // Keys a warp loads at once (K and V rows in flight per lane): fewer when many heads already hold
  // registers (q and acc take 16 per head).
  constexpr int kDecodeKeysPerStep = kHeads <= 4 ? 4 : 2;
  for (int key = key_begin + warp * kDecodeKeysPerStep; key < key_end; key += kDecodeWarps * kDecodeKeysPerStep) {
    uint4 k_raw[kDecodeKeysPerStep], v_raw[kDecodeKeysPerStep];
#pragma unroll
    for (int u = 0; u < kDecodeKeysPerStep; ++u) {
      if (key + u < key_end) {
        const int64_t off =
            cache_offset(table_row, key + u, c.block_size, block_shift, c.num_kv_heads, kv_head, D) + lane * 8;
        k_raw[u] = __ldg(reinterpret_cast<const uint4*>(c.k + off));
        v_raw[u] = __ldg(reinterpret_cast<const uint4*>(c.v + off));
      } else {
        k_raw[u] = v_raw[u] = make_uint4(0u, 0u, 0u, 0u);
      }
    }
    float s[kHeads][kDecodeKeysPerStep];  // scores, then probabilities
#pragma unroll
    for (int u = 0; u < kDecodeKeysPerStep; ++u) {
      float k[8];
      unpack_bf16x8(k_raw[u], k);
#pragma unroll
      for (int h = 0; h < kHeads; ++h) {
        float dot = 0.0f;
#pragma unroll
        for (int i = 0; i < 8; ++i) dot = fmaf(q[h][i], k[i], dot);
        s[h][u] = warp_sum(dot);
        if (key + u >= key_end) s[h][u] = -INFINITY;
      }
    }
    // Online softmax; key + 0 < key_end, so the new max is finite.
#pragma unroll
    for (int h = 0; h < kHeads; ++h) {
      float new_max = run_max[h];
#pragma unroll
      for (int u = 0; u < kDecodeKeysPerStep; ++u) new_max = fmaxf(new_max, s[h][u]);
      const float alpha = fast_exp2(run_max[h] - new_max);  // 0 on the first step
      run_max[h] = new_max;
      run_sum[h] *= alpha;
#pragma unroll
      for (int i = 0; i < 8; ++i) acc[h][i] *= alpha;
#pragma unroll
      for (int u = 0; u < kDecodeKeysPerStep; ++u) {
        s[h][u] = fast_exp2(s[h][u] - new_max);
        run_sum[h] += s[h][u];
      }
    }
#pragma unroll
    for (int u = 0; u < kDecodeKeysPerStep; ++u) {
      float v[8];
      unpack_bf16x8(v_raw[u], v);
#pragma unroll
      for (int h = 0; h < kHeads; ++h) {
#pragma unroll
        for (int i = 0; i < 8; ++i) acc[h][i] = fmaf(s[h][u], v[i], acc[h][i]);
      }
    }
  }

  // Merge the warps' states (a warp without keys has max -inf, sum 0, acc 0).
#pragma unroll
  for (int h = 0; h < kHeads; ++h) {
    float4* dst = reinterpret_cast<float4*>(&s_acc[warp][h][lane * 8]);
    dst[0] = make_float4(acc[h][0], acc[h][1], acc[h][2], acc[h][3]);
    dst[1] = make_float4(acc[h][4], acc[h][5], acc[h][6], acc[h][7]);
    if (lane == 0) s_max[warp][h] = run_max[h], s_sum[warp][h] = run_sum[h];
  }
  __syncthreads();
  for (int i = threadIdx.x; i < kHeads * D; i += kDecodeThreads) {
    const int h = i / D, d = i % D;
    float max_all = -INFINITY;
#pragma unroll
    for (int w = 0; w < kDecodeWarps; ++w) max_all = fmaxf(max_all, s_max[w][h]);
    float a = 0.0f, sum = 0.0f;
    if (max_all != -INFINITY) {  // -inf: no keys in this split
#pragma unroll
      for (int w = 0; w < kDecodeWarps; ++w) {
        const float f = fast_exp2(s_max[w][h] - max_all);
        a = fmaf(f, s_acc[w][h][d], a);
        sum = fmaf(f, s_sum[w][h], sum);
      }
    }
    const int64_t out_row = int64_t(seq) * num_q_heads + q_head0 + h;  // row of out [num_seqs * Hq, D]
    if (num_splits == 1) {
      p.out[out_row * D + d] = __bfloat16_as_ushort(__float2bfloat16_rn(sum > 0.0f ? a / sum : 0.0f));
    } else {
      const int64_t partial = out_row * num_splits + split;
      static_cast<float*>(p.workspace)[partial * D + d] = a;
      if (d == 0) decode_stats(p, D)[partial] = make_float2(max_all, sum);
    }
  }
}

// Merges the splits of one (sequence, query head): thread i owns dims 4i .. 4i+3.
template <int D>
__global__ void __launch_bounds__(D / 4) decode_combine_kernel(const DecodeParams p) {
  kernels::wait_for_prior_grid();
  kernels::allow_dependent_grid();
  const int q_head = blockIdx.x, seq = blockIdx.y;
  const int num_splits = p.num_splits;
  const int64_t out_row = int64_t(seq) * p.num_q_heads + q_head;
  const float2* stats = decode_stats(p, D) + out_row * num_splits;  // [num_splits]
  const float4* acc =
      reinterpret_cast<const float4*>(p.workspace) + out_row * num_splits * (D / 4);  // [num_splits][D/4]
  float max_all = -INFINITY;
  for (int i = 0; i < num_splits; ++i) max_all = fmaxf(max_all, stats[i].x);
  float4 a = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
  float sum = 0.0f;
  if (max_all != -INFINITY) {  // -inf: no keys at all (kv_len 0)
    for (int i = 0; i < num_splits; ++i) {
      const float2 st = stats[i];
      const float f = fast_exp2(st.x - max_all);
      const float4 x = acc[i * (D / 4) + threadIdx.x];
      sum = fmaf(f, st.y, sum);
      a.x = fmaf(f, x.x, a.x), a.y = fmaf(f, x.y, a.y), a.z = fmaf(f, x.z, a.z), a.w = fmaf(f, x.w, a.w);
    }
  }
  const float inv = sum > 0.0f ? 1.0f / sum : 0.0f;
  const uint2 packed = make_uint2(pack_bf16x2(a.x * inv, a.y * inv), pack_bf16x2(a.z * inv, a.w * inv));
  *reinterpret_cast<uint2*>(p.out + out_row * D + threadIdx.x * 4) = packed;
}

template <int D, int kHeads>
cudaError_t launch_decode(const DecodeParams& p, cudaStream_t stream) {
  const cudaError_t status = kernels::launch_early(decode_split_kernel<D, kHeads>,
                                          dim3(p.num_splits, p.num_q_heads / kHeads, p.num_seqs), dim3(kDecodeThreads),
                                          0, stream, p);
  if (status != cudaSuccess || p.num_splits == 1) return status;
  return kernels::launch_early(decode_combine_kernel<D>, dim3(p.num_q_heads, p.num_seqs), dim3(D / 4), 0, stream, p);
}

}  // namespace

// ---- Launchers: validation, then the one dispatch from run-time sizes to template instances -------

cudaError_t launch_kv_append(const KvAppendParams& p, cudaStream_t stream) {
  if (!kv_append_params_error(p).empty()) return cudaErrorInvalidValue;
  if (p.num_tokens == 0) return cudaSuccess;
  const int64_t chunks = int64_t(p.num_tokens) * p.cache.num_kv_heads * p.cache.head_dim / 8;
  const int64_t blocks = std::min<int64_t>((chunks + kAppendThreads - 1) / kAppendThreads, kAppendMaxBlocks);
  return kernels::launch_early(kv_append_kernel, dim3(unsigned(blocks)), dim3(kAppendThreads), 0, stream, p);
}

cudaError_t launch_prefill_attention(const PrefillParams& p, cudaStream_t stream) {
  if (!prefill_params_error(p).empty()) return cudaErrorInvalidValue;
  if (p.num_tiles == 0) return cudaSuccess;
  switch (p.cache.head_dim) {
    case 256: return launch_prefill<256>(p, stream);
    default: return cudaErrorInvalidValue;  // prefill_params_error names the unsupported head_dim
  }
}

cudaError_t launch_decode_attention(const DecodeParams& p, cudaStream_t stream) {
  if (!decode_params_error(p).empty()) return cudaErrorInvalidValue;
  if (p.num_seqs == 0) return cudaSuccess;
  const int heads_per_cta = decode_heads_per_cta(p.num_q_heads, p.cache.num_kv_heads);
  if (p.cache.head_dim == 256) {
    switch (heads_per_cta) {
      case 1: return launch_decode<256, 1>(p, stream);
      case 2: return launch_decode<256, 2>(p, stream);
      case 4: return launch_decode<256, 4>(p, stream);
      case 6: return launch_decode<256, 6>(p, stream);
      case 8: return launch_decode<256, 8>(p, stream);
      default: break;
    }
  }
  return cudaErrorInvalidValue;  // decode_params_error names the unsupported size
}

}  // namespace di::attention
