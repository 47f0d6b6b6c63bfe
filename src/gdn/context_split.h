#pragma once
// Context parallelism for the sm90 GDN prefill: when a batch has too few (sequence, value head) pairs
// to fill the GPU, each sequence is cut into segments of L tokens (L a multiple of the chunk; a
// sequence's last segment holds the rest) that run side by side, exactly (no truncated gates):
//   1. every carried segment (each but a sequence's last), per value head: the state it leaves when it
//      starts from zero, N, and its transfer matrix M [K, K], the product of the per-token maps
//      exp(g_t) (I - beta_t k_t k_tᵀ), so that the state it leaves from any entry state S is M S + N.
//      The prefill kernel makes both: N from a zero state, M from the identity with v = 0 (as a state
//      [K, K'] whose K' columns are value columns; the recurrence is linear in (S, v)).
//   2. per (sequence, head), in segment order: S_{j+1} = M_j S_j + N_j, every segment's entry state
//      (the carry kernel, its products on tensor cores in split tf32: about float32's accuracy).
//   3. every segment from its entry state: the output, and from a sequence's last segment its state.
// The plan and the three steps follow each other early (programmatic dependent launch): each launch's
// CTAs are placed while the one ahead runs and wait only where they read its results, so step 3's
// CTAs load and prepare their first chunks on the SMs the carry leaves free.
// Step 1 doubles the state work of the carried segments: a split pays only when it turns idle SMs
// into busy ones. This header is the arithmetic of the split (whether to split, L, the bounds the
// launches are sized by, the cost model, the scratch): plain C++, so the CPU tests check it. The host
// never reads cu_seqlens (device memory, no synchronisation): it picks L from the batch's size and
// the caller's hint of its longest sequence (max_seq_tokens of the ABI; without it, the sequences
// taken as equally long), a plan kernel cuts the sequences on the device into the table below, and
// every launch is sized by what any batch of this size could need, so a wrong hint costs time, never
// memory safety or a result. (Letting the plan decide on the real lengths instead was measured and
// not kept: the launches a kept-whole batch still makes cost it ~30 us, docs/benchmarks/gdn-sm90.md.)
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
  int32_t entry;    // its entry state's index in the scratch, or -1: the sequence's initial state (a
                    // sequence of one segment reads and writes its slot as an unsplit run does)
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

// The cost model (microseconds): a chunk of a half-head CTA alone on its SM and of whole-head CTAs
// one an SM, for launches with output (unsplit, step 3) and for step 1's state-only ones; how much
// longer a chunk takes when every SM runs one (the CTAs share the memory system), in proportion to
// the SMs busy; a CTA's start and end (its first loads, the state read and written, the pipeline's
// fill and drain: once a wave); one step of the carry; each launch the split adds.
struct SplitCosts {
  double half_head_chunk_us, whole_head_chunk_us;
  double state_only_half_head_chunk_us, state_only_whole_head_chunk_us;
  double full_wave_slowdown;
  double cta_start_end_us, carry_step_us, launch_us;
};
// Fitted on the H200 by bench/split_cost_fit.cpp (the carry step and the launch held) to 85 timings
// of 16 batches unsplit and split into segments of 512 .. 16384 tokens, q and k normalised by the
// kernel as the engine calls it (docs/benchmarks/data/gdn-split-timings-2026-12-01-carry.txt;
// docs/benchmarks/gdn-sm90.md, first section). The CTA start and end is what step 3's early launch
// and the carry leave of it: most of step 3's start now overlaps the carry.
inline constexpr SplitCosts kH200SplitCosts{3.03, 4.50, 1.77, 2.96, 0.128, 12.9, 1.5, 2.0};
// A split must be estimated at most this fraction of the unsplit run: the model's error is less than
// the margin.
inline constexpr double kContextSplitGain = 0.9;

// One launch of the prefill kernel over `pairs` pairs of at most `chunks` chunks, in the shape
// whole_head_ctas() gives them; state_only: step 1's.
inline double prefill_launch_us(int64_t pairs, int64_t chunks, int num_sms, bool state_only, const SplitCosts& c) {
  if (pairs <= 0 || chunks <= 0) return 0;
  const bool whole_head = whole_head_ctas(pairs, num_sms);
  const int64_t ctas = whole_head ? pairs : 2 * pairs, waves = (ctas + num_sms - 1) / num_sms;
  const double busy = double(ctas) / double(waves * num_sms);  // the SMs busy, on average over the waves
  const double chunk_us = whole_head ? (state_only ? c.state_only_whole_head_chunk_us : c.whole_head_chunk_us)
                                     : (state_only ? c.state_only_half_head_chunk_us : c.half_head_chunk_us);
  return double(waves) * (double(chunks) * chunk_us * (1.0 + c.full_wave_slowdown * busy) + c.cta_start_end_us);
}

// The segments of one sequence of `length` tokens: at least one (a zero-length sequence keeps one,
// which copies its state through), each of `segment_tokens` but the last.
DI_GDN_HOST_DEVICE inline int32_t segments_of(int64_t length, int32_t segment_tokens) {
  return length <= 0 ? 1 : int32_t((length + segment_tokens - 1) / segment_tokens);
}

// What the cost model needs of a batch, unsplit and cut into segments of segment_tokens, the
// sequences added one by one.
struct SplitWorkload {
  int32_t segment_tokens = 0;
  int num_v_heads = 0;
  int64_t sequences = 0, longest = 0;   // unsplit: the pairs are sequences x heads
  int64_t carried = 0, segments = 0;    // carried segments (each an N and an M pair per head), segments
  int64_t most_carried = 0;             // the carry's steps: the most carried segments of one sequence
  void add(int64_t length) {
    const int64_t n = segments_of(length, segment_tokens);
    ++sequences, segments += n, carried += n - 1;
    longest = length > longest ? length : longest;
    most_carried = n - 1 > most_carried ? n - 1 : most_carried;
  }
  double unsplit_us(int num_sms, const SplitCosts& c = kH200SplitCosts) const {
    return prefill_launch_us(sequences * num_v_heads, (longest + kContextSplitChunk - 1) / kContextSplitChunk, num_sms,
                             false, c);
  }
  // `launches`: the split's launches (plan, step 1 in one or two shapes, carry, step 3 in one or two).
  double split_us(int num_sms, int launches, const SplitCosts& c = kH200SplitCosts) const {
    const int64_t longest_segment = longest < segment_tokens ? longest : segment_tokens;
    const int64_t chunks = (longest_segment + kContextSplitChunk - 1) / kContextSplitChunk;
    return launches * c.launch_us +
           prefill_launch_us(2 * carried * num_v_heads, chunks, num_sms, true, c) +
           double(most_carried) * c.carry_step_us +
           prefill_launch_us(segments * num_v_heads, chunks, num_sms, false, c);
  }
  // Whether the split is worth its launches and its doubled state work on these sequences.
  bool worth_splitting(int num_sms, int launches, const SplitCosts& c = kH200SplitCosts) const {
    return carried > 0 && split_us(num_sms, launches, c) <= kContextSplitGain * unsplit_us(num_sms, c);
  }
};

// The split of a batch of `num_seqs` sequences and `total_tokens` tokens over `num_v_heads` heads
// into segments of `segment_tokens` (a positive multiple of 64): its bounds and launch shapes.
ContextSplit context_split_of(int num_seqs, int64_t total_tokens, int num_v_heads, int num_sms,
                              int32_t segment_tokens);

// The number of launches of a split (see SplitWorkload::split_us).
inline int split_launches(const ContextSplit& s) {
  return 3 + int(s.carried_may_be_whole_head) + int(s.segments_may_be_whole_head);
}

// Whether a batch of num_seqs sequences and total_tokens tokens can have a longest sequence of
// max_seq_tokens: at most the batch's tokens and at least its even share of them.
inline bool possible_longest_sequence(int num_seqs, int64_t total_tokens, int64_t max_seq_tokens) {
  return max_seq_tokens > 0 && max_seq_tokens <= total_tokens && max_seq_tokens * num_seqs >= total_tokens;
}

// The split the sm90 backend makes (segment_tokens 0: none): the candidate L the cost model
// estimates fastest, when that is at most kContextSplitGain of the unsplit run. The model takes the
// longest sequence as max_seq_tokens long and the others as sharing the rest equally; without the
// hint (0), every sequence as equally long.
ContextSplit choose_context_split(int num_seqs, int64_t total_tokens, int64_t max_seq_tokens, int num_v_heads,
                                  int num_sms);

ContextSplitScratch context_split_scratch(const ContextSplit& split, int num_seqs, int num_v_heads);


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
