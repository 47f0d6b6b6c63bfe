#include "gdn/context_split.h"

#include <algorithm>

namespace di::gdn {
namespace {

constexpr int kDim = 128;  // K == V

// The model's constants (microseconds), fitted on the H200 to 60 timings of 10 batches unsplit and
// split into segments of 512 .. 8192 tokens (docs/benchmarks/gdn-sm90.md, "Context parallelism"),
// within 5% on all but one: a chunk of a half-head CTA alone on its SM, a chunk of whole-head CTAs
// one an SM, a CTA's start and end (its first loads, the state read and written, the pipeline's fill
// and drain: once a wave), one step of the carry, each launch the split adds.
constexpr double kHalfHeadChunkUs = 2.8;
constexpr double kWholeHeadChunkUs = 4.6;
constexpr double kCtaStartEndUs = 20.0;
constexpr double kCarryStepUs = 1.5;
constexpr double kLaunchUs = 2.0;
// A split must be estimated at least this much faster: the model's error (5% on the timings it was
// fitted to) is less than the margin.
constexpr double kSplitGain = 0.9;
// The shortest segment: a CTA's start (its first loads, the state read) and end must stay small
// beside its chunks.
constexpr int32_t kMinSegmentTokens = 8 * kContextSplitChunk;

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

// A step of the split over `pairs` (segment, head) pairs of `chunks` chunks each, in the shape the
// plan chooses for them.
double launch_us(int64_t pairs, int64_t chunks, int num_sms) {
  if (pairs <= 0 || chunks <= 0) return 0;
  if (!whole_head_ctas(pairs, num_sms)) return double(chunks) * kHalfHeadChunkUs + kCtaStartEndUs;
  return double(ceil_div(pairs, num_sms)) * (double(chunks) * kWholeHeadChunkUs + kCtaStartEndUs);
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

  // The estimate, for sequences of equal length.
  const int64_t length = ceil_div(total_tokens, num_seqs);
  const int64_t segments = segments_of(length, segment_tokens);
  const int64_t chunks = ceil_div(std::min<int64_t>(length, segment_tokens), kContextSplitChunk);
  const int64_t heads = num_v_heads;
  s.estimated_plain_us = launch_us(num_seqs * heads, ceil_div(length, kContextSplitChunk), num_sms);
  const int launches = 3 + int(s.carried_may_be_whole_head) + int(s.segments_may_be_whole_head);
  s.estimated_us = launches * kLaunchUs + launch_us(2 * num_seqs * (segments - 1) * heads, chunks, num_sms) +
                   double(segments - 1) * kCarryStepUs + launch_us(num_seqs * segments * heads, chunks, num_sms);
  return s;
}

ContextSplit choose_context_split(int num_seqs, int64_t total_tokens, int num_v_heads, int num_sms) {
  if (num_seqs <= 0 || total_tokens <= 0 || num_v_heads <= 0 || num_sms <= 0) return {};
  // Batches that fill the GPU already run whole-head CTAs: a split only adds work there.
  if (whole_head_ctas(int64_t(num_seqs) * num_v_heads, num_sms)) return {};
  const int64_t length = ceil_div(total_tokens, num_seqs);
  ContextSplit best;
  double plain_us = 0;
  // Candidates: 8, 12, 16, 24, 32, 48, ... chunks (powers of two and one and a half times them),
  // shorter than the sequences.
  for (int64_t chunks = kMinSegmentTokens / kContextSplitChunk; chunks * kContextSplitChunk < length;
       chunks = (chunks & (chunks - 1)) == 0 ? chunks + chunks / 2 : chunks / 3 * 4) {
    if (chunks * kContextSplitChunk > INT32_MAX) break;
    const ContextSplit s = context_split_of(num_seqs, total_tokens, num_v_heads, num_sms,
                                            int32_t(chunks * kContextSplitChunk));
    plain_us = s.estimated_plain_us;
    if (best.segment_tokens == 0 || s.estimated_us < best.estimated_us) best = s;
  }
  if (best.segment_tokens == 0 || best.estimated_us > kSplitGain * plain_us) return {};
  return best;
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
