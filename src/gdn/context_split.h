#pragma once
// Context parallelism for the sm90 GDN prefill: when a batch has too few (sequence, value head) pairs
// to fill the GPU, each sequence is cut into segments of L tokens (L a multiple of the chunk; a
// sequence's last segment holds the rest) that run side by side, exactly (no truncated gates):
//   1. every carried segment (each but a sequence's last), per value head: the state it leaves when it
//      starts from zero, N, and its transfer matrix M [K, K], the product of the per-token maps
//      exp(g_t) (I - beta_t k_t k_tᵀ), so that the state it leaves from any entry state S is M S + N.
//      The prefill kernel makes both: N from a zero state, M from the identity with v = 0 (as a state
//      [K, K'] whose K' columns are value columns; the recurrence is linear in (S, v)).
//   2. per (sequence, head), in segment order: S_{j+1} = M_j S_j + N_j, every segment's entry state.
//   3. every segment from its entry state: the output, and from a sequence's last segment its state.
// Step 1 doubles the state work of the carried segments: a split pays only when it turns idle SMs
// into busy ones. This header is the arithmetic of the split (whether to split, L, the bounds the
// launches are sized by, the scratch): plain C++, so the CPU tests check it. The host never reads
// cu_seqlens (device memory, no synchronisation): a plan kernel cuts the sequences on the device into
// the table below, and every launch is sized by what any batch of this size could need.
#include <cstddef>
#include <cstdint>

#include <deltainfer/gdn.h>

#if defined(__CUDACC__)
#define DI_GDN_HOST_DEVICE __host__ __device__
#else
#define DI_GDN_HOST_DEVICE
#endif

namespace di::gdn {

// One segment of the plan, as the plan kernel writes it.
struct ContextSegment {
  int32_t begin;    // first token (row of the batch)
  int32_t length;   // tokens: L for a carried segment, 0 .. L for a sequence's last
  int32_t seq;      // the sequence it belongs to
  int32_t carried;  // its index among the carried segments, or -1 for a sequence's last
};

// A split of one batch; segment_tokens == 0 means none.
struct ContextSplit {
  int32_t segment_tokens = 0;   // L
  int32_t max_segments = 0;     // any batch of this size has at most total / L + num_seqs segments
  int32_t max_carried = 0;      // and at most total / L carried ones
  // Whether step 1 and step 3 may need whole-head CTAs: their pairs, as many as the bounds allow,
  // would not all run at once in half-head ones. The plan then chooses the shape from the pairs the
  // batch has (both shapes are launched, the other one's CTAs return at once); otherwise half-head.
  bool carried_may_be_whole_head = false;
  bool segments_may_be_whole_head = false;
  double estimated_us = 0;           // the model's time for the split (see choose_context_split)
  double estimated_plain_us = 0;     // and for the batch unsplit
};

// Scratch of a split (byte offsets into the caller's scratch, each 256-aligned; total 0 without one).
struct ContextSplitScratch {
  size_t segments = 0;         // ContextSegment [max_segments]
  size_t carried_segment = 0;  // int32 [max_carried]: the segment of each carried index
  size_t seq_first = 0;        // int32 [num_seqs + 1]: the first segment of each sequence
  size_t counts = 0;           // int32 [4]: segments, carried segments, and the state warpgroups of a
                               // CTA of step 1 and of step 3 (2 whole head, 1 half head)
  size_t transfer = 0;         // f32 [max_carried, Hv, K, K]: M, [K, K'] with K' contiguous
  size_t local_state = 0;      // f32 [max_carried, Hv, K, V]: N, V contiguous
  size_t entry_state = 0;      // f32 [max_segments, Hv, K, V]: each segment's entry state
  size_t total = 0;
};

inline constexpr int kContextSplitChunk = 64;  // the prefill kernel's chunk: L is a multiple of it

// Whether the prefill kernel runs `pairs` (segment or sequence, value head) pairs in whole-head CTAs:
// unless half-head ones (twice as many) all run at once, one an SM.
DI_GDN_HOST_DEVICE inline bool whole_head_ctas(int64_t pairs, int num_sms) { return 2 * pairs > int64_t(num_sms); }

// The split of a batch of `num_seqs` sequences and `total_tokens` tokens over `num_v_heads` heads
// into segments of `segment_tokens` (a positive multiple of 64): its bounds and launch shapes.
ContextSplit context_split_of(int num_seqs, int64_t total_tokens, int num_v_heads, int num_sms,
                              int32_t segment_tokens);

// The split the sm90 backend makes (segment_tokens 0: none). A model of the kernel's measured times
// (docs/benchmarks/gdn-sm90.md) estimates the plain launch and the split for each candidate L,
// taking the sequences as equally long (the host knows only their number and total); it splits when
// the best split is estimated at most 0.9 of the plain launch.
ContextSplit choose_context_split(int num_seqs, int64_t total_tokens, int num_v_heads, int num_sms);

ContextSplitScratch context_split_scratch(const ContextSplit& split, int num_seqs, int num_v_heads);

// The segments of one sequence of `length` tokens: at least one (a zero-length sequence keeps one,
// which copies its state through), each of `segment_tokens` but the last.
DI_GDN_HOST_DEVICE inline int32_t segments_of(int64_t length, int32_t segment_tokens) {
  return length <= 0 ? 1 : int32_t((length + segment_tokens - 1) / segment_tokens);
}

// The device steps of a split (context_split.cu, CUDA builds), enqueued on `stream` into the scratch
// laid out by context_split_scratch(); each returns a di_gdn_status.
// The plan: the segments of every sequence of cu_seqlens (device memory) and the counts. A batch
// whose sequences end past the bounds of `split` (cu_seqlens past total_tokens, against the ABI) gets
// no segments past them: memory stays safe, its results are undefined.
int launch_context_plan(const ContextSplit& split, const ContextSplitScratch& layout, void* scratch,
                        const int32_t* cu_seqlens, int num_seqs, int num_v_heads, int num_sms, di_gdn_stream stream);
// Step 2: each segment's entry state, from the sequence's initial state (the args' pool, layout and
// indices; zero without one) through the carried segments' M and N.
int launch_context_carry(const ContextSplitScratch& layout, void* scratch, const di_gdn_prefill_args& args,
                         di_gdn_stream stream);

}  // namespace di::gdn
