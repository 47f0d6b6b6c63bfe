#pragma once
// The chunk-parallel pass of a context split from stored chunk factors (docs/benchmarks/gdn-sm90.md,
// first section, item 4): for every chunk of 64 tokens of every sequence and every value head,
//   Tinv' = (I + L')^-1,  L' = strict_lower(diag(beta / |k|^2) (Gamma ⊙ K Kᵀ)),
// the matrix the sm90 kernel's auxiliary warpgroup inverts (sm90_prefill.cu, prepare_chunk: the same
// Gram product in f32, the same decays and row factors, the same inverse with tf32 merges), written
// as a bf16 hi + lo pair (tools/numerics/gdn_chunk_model.py --split-tokens: the pair keeps the
// unsplit kernel's state error, single bf16 raises it 6-10x), and 1 / |k| of every row. Nothing
// here depends on the state, so every chunk runs at once, on every SM; the split's steps then read
// the pairs instead of making them on their serial path.
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

namespace di::gdn {

// Rows of the batch as in the prefill ABI: sequence s owns tokens cu_seqlens[s] .. cu_seqlens[s+1]-1
// and chunks chunk_offsets[s] .. chunk_offsets[s+1]-1 (ceil(length / 64) of them; a chunk's rows
// past its sequence's end are taken as zeros, with g = beta = 0).
struct ChunkFactorsParams {
  const void* k;                 // bf16 [T, Hk, 128], rows 16-byte aligned
  const float* g;                // f32 [T, Hv] log decays
  const float* beta;             // f32 [T, Hv]
  const int32_t* cu_seqlens;     // int32 [num_seqs + 1] (device)
  const int32_t* chunk_offsets;  // int32 [num_seqs + 1] (device)
  void* t_hi;                    // bf16 [chunks, Hv, 64, 64] row-major: Tinv' = t_hi + t_lo, zeros above
  void* t_lo;                    // the diagonal
  float* k_inv;                  // f32 [chunks, Hk, 64]: 1 / |k| of each row (rsqrt(1e-6) past the end)
  int32_t num_seqs = 0, num_k_heads = 0, num_v_heads = 0;
  int32_t max_chunks = 0;  // at least chunk_offsets[num_seqs]: the grid's size (the host never reads it)
  // DI_GDN_QK_L2NORM's meaning for k: 1 / |k| from K Kᵀ's diagonal (rsqrt(|k|^2 + 1e-6)); off, the
  // rows are taken as unit (1 / |k| = 1), as the sm90 kernel takes them.
  bool normalize_k = true;
};

// Bytes of one chunk's factors for all heads (the scratch a split would give them).
constexpr size_t chunk_factors_bytes_per_chunk(int num_k_heads, int num_v_heads) {
  return size_t(num_v_heads) * 2 * 64 * 64 * 2 + size_t(num_k_heads) * 64 * 4;
}

// Grid max_chunks x Hv CTAs of one warpgroup; CTAs past the real chunk count return at once.
cudaError_t launch_chunk_factors(const ChunkFactorsParams& p, cudaStream_t stream);

}  // namespace di::gdn
