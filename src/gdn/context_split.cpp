#include "gdn/context_split.h"

#include <algorithm>

namespace di::gdn {
namespace {

constexpr int kDim = 128;  // K == V

// The shortest segment: a CTA's start (its first loads, the state read) and end must stay small
// beside its chunks.
constexpr int32_t kMinSegmentTokens = 8 * kContextSplitChunk;

// The workload of a batch of num_seqs sequences, the first `first` tokens long and the others
// equally sharing the rest.
SplitWorkload workload(int num_seqs, int64_t first, int64_t rest, int num_v_heads, int32_t segment_tokens) {
  SplitWorkload w;
  w.segment_tokens = segment_tokens, w.num_v_heads = num_v_heads;
  w.add(first);
  for (int i = 1; i < num_seqs; ++i) w.add(rest / (num_seqs - 1) + (i <= rest % (num_seqs - 1) ? 1 : 0));
  return w;
}

// The best candidate L for a batch shaped as workload() takes it (segment_tokens 0: none pays).
ContextSplit best_split(int num_seqs, int64_t total_tokens, int64_t first, int num_v_heads, int num_sms) {
  ContextSplit best;
  // Candidates: 8, 12, 16, 24, 32, 48, ... chunks (powers of two and one and a half times them),
  // shorter than the longest sequence.
  for (int64_t chunks = kMinSegmentTokens / kContextSplitChunk; chunks * kContextSplitChunk < first;
       chunks = (chunks & (chunks - 1)) == 0 ? chunks + chunks / 2 : chunks / 3 * 4) {
    if (chunks * kContextSplitChunk > INT32_MAX) break;
    ContextSplit s = context_split_of(num_seqs, total_tokens, num_v_heads, num_sms, int32_t(chunks * kContextSplitChunk));
    const SplitWorkload w = workload(num_seqs, first, total_tokens - first, num_v_heads, s.segment_tokens);
    s.estimated_us = w.split_us(num_sms, split_launches(s));
    s.estimated_plain_us = w.unsplit_us(num_sms);
    if (w.worth_splitting(num_sms, split_launches(s)) && (best.segment_tokens == 0 || s.estimated_us < best.estimated_us))
      best = s;
  }
  return best;
}

}  // namespace

ContextSplit context_split_of(int num_seqs, int64_t total_tokens, int num_v_heads, int num_sms,
                              int32_t segment_tokens) {
  ContextSplit s;
  if (num_seqs <= 0 || total_tokens < 0 || num_v_heads <= 0 || segment_tokens <= 0 ||
      segment_tokens % kContextSplitChunk != 0)
    return s;
  s.segment_tokens = segment_tokens;
  s.max_carried = int32_t(total_tokens / segment_tokens);
  s.max_segments = s.max_carried + num_seqs;
  s.carried_may_be_whole_head = whole_head_ctas(2 * int64_t(s.max_carried) * num_v_heads, num_sms);
  s.segments_may_be_whole_head = whole_head_ctas(int64_t(s.max_segments) * num_v_heads, num_sms);

  // The estimate, for sequences of equal length (the first takes what the division leaves).
  const int64_t share = total_tokens / num_seqs;
  const SplitWorkload w =
      workload(num_seqs, total_tokens - share * (num_seqs - 1), share * (num_seqs - 1), num_v_heads, segment_tokens);
  s.estimated_plain_us = w.unsplit_us(num_sms);
  s.estimated_us = w.split_us(num_sms, split_launches(s));
  return s;
}

ContextSplit choose_context_split(int num_seqs, int64_t total_tokens, int64_t max_seq_tokens, int num_v_heads,
                                  int num_sms) {
  if (num_seqs <= 0 || total_tokens <= 0 || num_v_heads <= 0 || num_sms <= 0) return {};
  // Batches that fill the GPU already run whole-head CTAs: a split only adds work there.
  if (whole_head_ctas(int64_t(num_seqs) * num_v_heads, num_sms)) return {};
  // The longest sequence as the caller knows it, the others sharing the rest; without a hint (or with
  // one no batch can have), sequences of equal length (the first takes what the division leaves).
  const int64_t share = total_tokens / num_seqs;
  const int64_t first = possible_longest_sequence(num_seqs, total_tokens, max_seq_tokens) ? max_seq_tokens : total_tokens - share * (num_seqs - 1);
  return best_split(num_seqs, total_tokens, first, num_v_heads, num_sms);
}

ContextSplitScratch context_split_scratch(const ContextSplit& split, int num_seqs, int num_v_heads) {
  ContextSplitScratch s;
  if (split.segment_tokens == 0) return s;
  size_t at = 0;
  auto take = [&](size_t bytes) {
    const size_t offset = at;
    at += (bytes + 255) / 256 * 256;
    return offset;
  };
  const size_t matrix = size_t(kDim) * kDim * sizeof(float) * size_t(num_v_heads);
  s.segments = take(sizeof(ContextSegment) * size_t(split.max_segments));
  s.carried_segment = take(sizeof(int32_t) * size_t(std::max(split.max_carried, 1)));
  s.seq_first = take(sizeof(int32_t) * size_t(num_seqs + 1));
  s.counts = take(4 * sizeof(int32_t));
  s.transfer = take(matrix * size_t(split.max_carried));
  s.local_state = take(matrix * size_t(split.max_carried));
  s.entry_state = take(matrix * size_t(split.max_segments));
  s.total = at;
  return s;
}

}  // namespace di::gdn
