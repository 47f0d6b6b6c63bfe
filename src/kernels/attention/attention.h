#pragma once
// Full (softmax) attention of the Qwen3.5 attention layers on the GPU, over a paged KV cache
// (QWEN35.md section 3.4): causal, GQA (query head j reads KV head j / (Hq / Hkv)), head dim 256,
// bf16 q/k/v, float32 scores, softmax and accumulation, bf16 output rounded once.
//
//   launch_kv_append          writes the new tokens' k and v rows into the cache
//   launch_prefill_attention  token-packed queries of variable-length sequences (chunked prefill:
//                             a sequence may already hold n_past earlier tokens in the cache)
//   launch_decode_attention   one query per sequence, split over the keys ("flash decoding"),
//                             partial results combined by a second kernel
//   plan_prefill / plan_decode_splits   host-side planning, once per engine step
//
// Every launcher takes a params struct and a stream, allocates nothing, synchronises nothing, reads
// only device memory (so it can be captured in a CUDA graph) and returns cudaErrorInvalidValue for an
// unsupported case; the *_params_error functions say why. bf16 tensors are passed as their bit
// patterns (uint16_t, as in core/bf16.h) so that host C++ code can include this header.
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace di::attention {

// The one head dim the kernels are built for (Qwen3.5: 256 for every size).
inline constexpr int kHeadDim = 256;
// Queries per prefill tile: the planner cuts each sequence's queries into tiles of this many.
inline constexpr int kPrefillTileQueries = 64;
// The most query heads one decode CTA serves (it loads each K/V row once for all of them).
inline constexpr int kMaxDecodeHeadsPerCta = 8;

// One attention layer's paged KV cache as the kernels see it; the caller owns the memory. Position
// p of sequence s lives in physical block block_table[s * max_blocks_per_seq + p / block_size], row
// p % block_size of that block.
struct PagedKvCache {
  uint16_t* k = nullptr;                 // bf16 [num_blocks, block_size, num_kv_heads, head_dim]
  uint16_t* v = nullptr;                 // bf16 [num_blocks, block_size, num_kv_heads, head_dim]
  const int32_t* block_table = nullptr;  // [num_seqs, max_blocks_per_seq]: physical blocks in order
  int block_size = 0;                    // tokens per block: 16, 32 or 64
  int max_blocks_per_seq = 0;            // row stride of block_table
  int num_kv_heads = 0;
  int head_dim = 0;
};

// --- KV append ----------------------------------------------------------------------------------

// Token t goes to sequence token_seq[t] at absolute position token_pos[t]. A token whose sequence
// is negative is skipped (the padding slots of a captured decode batch), and so is one whose
// position lies outside its block-table row.
struct KvAppendParams {
  PagedKvCache cache;
  const uint16_t* k = nullptr;         // bf16 [num_tokens, num_kv_heads, head_dim], token-packed
  const uint16_t* v = nullptr;         // bf16 [num_tokens, num_kv_heads, head_dim], token-packed
  const int32_t* token_seq = nullptr;  // [num_tokens]: block-table row of each token
  const int32_t* token_pos = nullptr;  // [num_tokens]: absolute position in its sequence
  int num_tokens = 0;
};

// --- Prefill ------------------------------------------------------------------------------------

// Sequence s has n_q = cu_seqlens_q[s+1] - cu_seqlens_q[s] queries at positions
// kv_lens[s] - n_q .. kv_lens[s] - 1; their keys (and the n_past = kv_lens[s] - n_q earlier ones) are
// already in the cache. Query i of sequence s sees keys 0 .. kv_lens[s] - n_q + i.
// Work list (from plan_prefill): tile i covers queries tile_q_start[i] .. + kPrefillTileQueries - 1
// (clipped to n_q) of sequence tile_seq[i].
struct PrefillParams {
  PagedKvCache cache;                     // read only
  const uint16_t* q = nullptr;            // bf16 [num_tokens, num_q_heads, head_dim], token-packed
  uint16_t* out = nullptr;                // bf16 [num_tokens, num_q_heads, head_dim]
  const int32_t* cu_seqlens_q = nullptr;  // [num_seqs + 1]: first token of each sequence in q and out
  const int32_t* kv_lens = nullptr;       // [num_seqs]: keys visible to the sequence's last query
  const int32_t* tile_seq = nullptr;      // [num_tiles]
  const int32_t* tile_q_start = nullptr;  // [num_tiles]: first query of the tile, within its sequence
  int num_tiles = 0;
  int num_q_heads = 0;
  float scale = 0.0f;  // softmax scale, 1/sqrt(head_dim) for Qwen3.5
};

// --- Decode -------------------------------------------------------------------------------------

// One query per sequence (its token already appended), attending to keys 0 .. kv_lens[s] - 1. The
// keys of each sequence are cut into num_splits equal ranges, each handled by its own CTAs; with
// num_splits > 1 the partial results go to `workspace` and a second kernel combines them. A sequence
// with kv_lens[s] == 0 (a padding slot) gets a zero output.
struct DecodeParams {
  PagedKvCache cache;                // read only
  const uint16_t* q = nullptr;       // bf16 [num_seqs, num_q_heads, head_dim]
  uint16_t* out = nullptr;           // bf16 [num_seqs, num_q_heads, head_dim]
  const int32_t* kv_lens = nullptr;  // [num_seqs]
  int num_seqs = 0;
  int num_q_heads = 0;
  int num_splits = 1;         // from plan_decode_splits
  float scale = 0.0f;         // softmax scale, 1/sqrt(head_dim) for Qwen3.5
  void* workspace = nullptr;  // f32 partials, decode_workspace_bytes(...) bytes, 16-byte aligned;
                              // unused (may be null) when num_splits == 1
  size_t workspace_bytes = 0;
};

// Bytes of decode workspace for up to max_splits splits: per (sequence, query head, split) the
// partial accumulator (f32 [head_dim]) and its running max and sum (f32 [2]).
size_t decode_workspace_bytes(int num_seqs, int num_q_heads, int head_dim, int max_splits);

// Query heads one decode CTA serves for this GQA geometry, or 0 when it is not supported
// (group sizes 1, 2, 4, 6, 8 and multiples of 8 or 6 are).
int decode_heads_per_cta(int num_q_heads, int num_kv_heads);

// --- Validation and launch ----------------------------------------------------------------------

// Empty when the launcher supports the params, otherwise what is wrong (names the field and value).
std::string kv_append_params_error(const KvAppendParams& p);
std::string prefill_params_error(const PrefillParams& p);
std::string decode_params_error(const DecodeParams& p);

cudaError_t launch_kv_append(const KvAppendParams& p, cudaStream_t stream);
cudaError_t launch_prefill_attention(const PrefillParams& p, cudaStream_t stream);
cudaError_t launch_decode_attention(const DecodeParams& p, cudaStream_t stream);

// --- Host-side planning (once per engine step; the engine uploads the arrays) ----------------------

struct SequenceShape {
  int32_t n_q = 0;     // new tokens (queries) of the sequence in this step
  int32_t n_past = 0;  // tokens already in the cache before this step
};

struct PrefillPlan {
  std::vector<int32_t> cu_seqlens_q;  // [num_seqs + 1]
  std::vector<int32_t> kv_lens;       // [num_seqs]: n_past + n_q
  std::vector<int32_t> tile_seq;      // [num_tiles]
  std::vector<int32_t> tile_q_start;  // [num_tiles]
  int num_tiles() const { return int(tile_seq.size()); }
};

// Cuts every sequence's queries into tiles of kPrefillTileQueries, ordered by decreasing work (the
// number of keys the tile's last query sees) so that the longest CTAs start first. Throws di::Error
// on a negative count or a total that does not fit in int32.
PrefillPlan plan_prefill(std::span<const SequenceShape> seqs);

// Splits per sequence for decode: enough CTAs (num_seqs x query-head blocks x splits) for about two
// per SM, but no split shorter than kMinDecodeKeysPerSplit keys of the longest sequence, and at
// most max_splits (the workspace's capacity). Always >= 1.
inline constexpr int kMinDecodeKeysPerSplit = 64;
int plan_decode_splits(int num_seqs, int num_q_heads, int num_kv_heads, int max_kv_len, int num_sms, int max_splits);

}  // namespace di::attention
