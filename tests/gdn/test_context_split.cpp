// The arithmetic of sm90's context split (gdn/context_split.h): which batches it splits, the bounds
// every launch is sized by, and the scratch. The split itself runs on a GPU
// (tests/gpu/test_gdn_prefill.cpp, Sm90ContextSplit*).
#include "gdn/context_split.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "support/seed.h"

namespace di::gdn {
namespace {

constexpr int kH200Sms = 132;

struct Heads {
  int k, v;
};
// The head counts of the peer comparison (docs/benchmarks/gdn-peers.md).
constexpr Heads kHeadMatrix[] = {{16, 32}, {16, 48}, {16, 64}, {4, 16}, {2, 8}};

TEST(ContextSplit, SegmentsOfASequence) {
  EXPECT_EQ(segments_of(0, 512), 1);  // an empty sequence keeps one segment: its state is copied through
  EXPECT_EQ(segments_of(1, 512), 1);
  EXPECT_EQ(segments_of(512, 512), 1);
  EXPECT_EQ(segments_of(513, 512), 2);
  EXPECT_EQ(segments_of(32768, 1024), 32);
}

// 32 value heads or more (the Qwen3.5 models' geometries) split only one sequence of 16K tokens or
// more over 32 heads (two segments: 16/32 1 x 16384 measured 8.4% faster, 1 x 32768 10.6%); the
// engine's prefill steps at the default budget (up to 8K tokens) and every batch that fills the GPU
// stay whole, with zero scratch.
TEST(ContextSplit, BatchesThatFillTheGpuAreNotSplit) {
  for (int seqs : {1, 2, 3, 4, 8, 32})
    for (int64_t tokens : {int64_t(seqs), int64_t(2048), int64_t(8192), int64_t(16384), int64_t(32768), int64_t(65536)})
      for (const Heads& h : kHeadMatrix) {
        if (h.v < 32) continue;
        const ContextSplit s = choose_context_split(seqs, tokens, 0, h.v, kH200Sms);
        const bool long_single_sequence = seqs == 1 && tokens >= 16384 && h.v == 32;
        SCOPED_TRACE(std::to_string(h.k) + "/" + std::to_string(h.v) + " " + std::to_string(seqs) + " seqs, " +
                     std::to_string(tokens) + " tokens");
        if (long_single_sequence) {
          EXPECT_EQ(s.segment_tokens, tokens / 2);
          EXPECT_LE(s.estimated_us, kContextSplitGain * s.estimated_plain_us);
        } else {
          EXPECT_EQ(s.segment_tokens, 0);
          EXPECT_EQ(context_split_scratch(s, seqs, h.v).total, 0u);
        }
      }
  for (int seqs : {17, 64, 300})
    EXPECT_EQ(choose_context_split(seqs, int64_t(seqs) * 4096, 0, 8, kH200Sms).segment_tokens, 0) << seqs;
}

// One long sequence over few heads leaves most SMs idle unsplit: the split must be chosen, with
// segments of whole chunks, at least 512 tokens, estimated well under the plain launch.
TEST(ContextSplit, LongSequencesOfFewHeadsAreSplit) {
  for (const Heads& h : {Heads{2, 8}, Heads{4, 16}})
    for (int64_t tokens : {int64_t(8192), int64_t(32768), int64_t(131072)}) {
      SCOPED_TRACE(std::to_string(h.v) + " heads, " + std::to_string(tokens) + " tokens");
      const ContextSplit s = choose_context_split(1, tokens, 0, h.v, kH200Sms);
      ASSERT_GT(s.segment_tokens, 0);
      EXPECT_EQ(s.segment_tokens % kContextSplitChunk, 0);
      EXPECT_GE(s.segment_tokens, 512);
      EXPECT_LT(s.segment_tokens, tokens);
      EXPECT_LE(s.estimated_us, 0.9 * s.estimated_plain_us);
      EXPECT_EQ(s.max_carried, tokens / s.segment_tokens);
      EXPECT_EQ(s.max_segments, s.max_carried + 1);
    }
  // Short sequences are not: a segment must be at least 512 tokens and shorter than the sequence.
  EXPECT_EQ(choose_context_split(1, 512, 0, 8, kH200Sms).segment_tokens, 0);
  EXPECT_EQ(choose_context_split(1, 100, 0, 2, kH200Sms).segment_tokens, 0);
}

// The host knows the batch's size, not its lengths, and takes them as equal. Batches of several
// sequences over few heads that measured slower split (2/8 at 4 x 8192 and 8 x 2048, 4/16 at
// 4 x 8192) stay whole; 4/16 at 2 x 16384 splits in halves (measured 4.4% faster with the carry
// before its tensor-core form), which also splits 4096 + 28672 there (1.375 -> 1.064 ms measured), if
// less well than its own lengths would (segments of 4096: 0.799 ms). On the real lengths the cost model
// agrees that 2 x 16384 would not gain from 4096's segments and 4096 + 28672 would.
TEST(ContextSplit, SeveralSequencesAreTakenAsEquallyLong) {
  EXPECT_EQ(choose_context_split(4, 32768, 0, 8, kH200Sms).segment_tokens, 0);
  EXPECT_EQ(choose_context_split(8, 16384, 0, 8, kH200Sms).segment_tokens, 0);
  EXPECT_EQ(choose_context_split(4, 32768, 0, 16, kH200Sms).segment_tokens, 0);
  EXPECT_EQ(choose_context_split(2, 32768, 0, 16, kH200Sms).segment_tokens, 8192);
  EXPECT_GT(choose_context_split(2, 32768, 0, 8, kH200Sms).segment_tokens, 0);  // 2 x 16384 over 2/8 splits
  const ContextSplit one = choose_context_split(1, 32768, 0, 16, kH200Sms);
  ASSERT_GT(one.segment_tokens, 0);
  const ContextSplit two = context_split_of(2, 32768, 16, kH200Sms, one.segment_tokens);
  auto splits = [&](std::initializer_list<int64_t> lengths) {
    SplitWorkload w;
    w.segment_tokens = two.segment_tokens, w.num_v_heads = 16;
    for (int64_t n : lengths) w.add(n);
    return w.worth_splitting(kH200Sms, split_launches(two));
  };
  EXPECT_FALSE(splits({16384, 16384}));
  EXPECT_TRUE(splits({4096, 28672}));
}

// With the caller's hint of the longest sequence (max_seq_tokens), one long sequence among short ones
// is planned as it is: 4/16 at 4096 + 28672 in segments of 4096 tokens (0.799 ms measured, against
// 1.064 at 8192, what equal lengths choose, and 1.372 unsplit), 2/8 in segments of 2048 (0.448 ms,
// 0.473 at 4096). A hint that equal lengths would give changes nothing, and one no batch of the size
// can have (shorter than the batch's share, longer than the batch) counts as none.
TEST(ContextSplit, TheLongestSequenceHintPlansOneLongAmongShort) {
  EXPECT_EQ(choose_context_split(2, 32768, 28672, 16, kH200Sms).segment_tokens, 4096);
  EXPECT_EQ(choose_context_split(2, 32768, 28672, 8, kH200Sms).segment_tokens, 2048);
  EXPECT_EQ(choose_context_split(2, 32768, 0, 16, kH200Sms).segment_tokens, 8192);
  for (const Heads& h : kHeadMatrix)
    for (int seqs : {1, 2, 4, 8, 32})
      for (int64_t share : {int64_t(1024), int64_t(2048), int64_t(8192)}) {
        SCOPED_TRACE(std::to_string(h.v) + " heads, " + std::to_string(seqs) + " x " + std::to_string(share));
        const int64_t total = seqs * share;
        const ContextSplit none = choose_context_split(seqs, total, 0, h.v, kH200Sms);
        EXPECT_EQ(choose_context_split(seqs, total, share, h.v, kH200Sms).segment_tokens, none.segment_tokens);
        EXPECT_EQ(choose_context_split(seqs, total, total + 1, h.v, kH200Sms).segment_tokens, none.segment_tokens);
        if (seqs > 1) {
          EXPECT_EQ(choose_context_split(seqs, total, share - 1, h.v, kH200Sms).segment_tokens, none.segment_tokens);
        }
      }
  // Batches that fill the GPU stay whole whatever the hint says.
  EXPECT_EQ(choose_context_split(2, 32768, 28672, 64, kH200Sms).segment_tokens, 0);
  EXPECT_EQ(choose_context_split(32, 32768, 28672, 8, kH200Sms).segment_tokens, 0);
}

// The bounds hold for any batch of that size: the segments the plan cuts (segments_of per
// sequence) never exceed max_segments, the carried ones (all but each sequence's last) never
// max_carried. Random lengths, empty sequences included, and the extremes (one long sequence; all
// sequences one segment long plus one token).
TEST(ContextSplit, BoundsHoldForEveryBatchOfTheSize) {
  const uint32_t seed = di::testing::fresh_seed();
  SCOPED_TRACE(di::testing::seed_trace(seed));
  std::mt19937 rng(seed);
  for (int trial = 0; trial < 2000; ++trial) {
    const int seqs = 1 + int(rng() % 12);
    const int32_t L = kContextSplitChunk * int32_t(1 + rng() % 16);
    std::vector<int64_t> lengths(static_cast<size_t>(seqs));
    switch (trial % 3) {
      case 0:
        for (int64_t& n : lengths) n = rng() % 5 == 0 ? 0 : int64_t(rng() % 5000);
        break;
      case 1:
        lengths.assign(size_t(seqs), 0);
        lengths[rng() % size_t(seqs)] = int64_t(rng() % 20000);
        break;
      default:
        lengths.assign(size_t(seqs), int64_t(L) + 1);
    }
    const int64_t total = std::accumulate(lengths.begin(), lengths.end(), int64_t(0));
    const ContextSplit s = context_split_of(seqs, total, 8, kH200Sms, L);
    int64_t segments = 0, carried = 0;
    for (int64_t n : lengths) segments += segments_of(n, L), carried += segments_of(n, L) - 1;
    ASSERT_LE(segments, s.max_segments) << "trial " << trial;
    ASSERT_LE(carried, s.max_carried) << "trial " << trial;
  }
}

// The scratch: every region 256-byte aligned, in order, none overlapping the next, sized for the
// bounds (one f32 [128, 128] matrix per carried segment and head for M and N, per segment and head
// for the entry states).
TEST(ContextSplit, ScratchRegionsAreAlignedAndDisjoint) {
  const ContextSplit s = context_split_of(3, 20000, 8, kH200Sms, 1024);
  ASSERT_EQ(s.max_carried, 19);
  ASSERT_EQ(s.max_segments, 22);
  const ContextSplitScratch l = context_split_scratch(s, 3, 8);
  const size_t matrix = 128 * 128 * 4 * 8;
  const std::vector<std::pair<size_t, size_t>> regions = {
      {l.segments, sizeof(ContextSegment) * 22}, {l.carried_segment, 4 * 19}, {l.seq_first, 4 * 4},
      {l.counts, 16}, {l.transfer, matrix * 19}, {l.local_state, matrix * 19}, {l.entry_state, matrix * 22}};
  for (size_t i = 0; i < regions.size(); ++i) {
    EXPECT_EQ(regions[i].first % 256, 0u) << "region " << i;
    const size_t end = regions[i].first + regions[i].second;
    EXPECT_LE(end, i + 1 < regions.size() ? regions[i + 1].first : l.total) << "region " << i;
  }
  EXPECT_EQ(context_split_scratch(ContextSplit{}, 3, 8).total, 0u);
}

TEST(ContextSplit, MalformedRequestsGiveNoSplit) {
  EXPECT_EQ(context_split_of(1, 4096, 8, kH200Sms, 100).segment_tokens, 0);  // not a multiple of 64
  EXPECT_EQ(context_split_of(1, 4096, 8, kH200Sms, 0).segment_tokens, 0);
  EXPECT_EQ(context_split_of(0, 4096, 8, kH200Sms, 512).segment_tokens, 0);
  EXPECT_EQ(context_split_of(1, -1, 8, kH200Sms, 512).segment_tokens, 0);
  EXPECT_EQ(choose_context_split(1, 32768, 0, 8, 0).segment_tokens, 0);
  EXPECT_EQ(choose_context_split(0, 32768, 0, 8, kH200Sms).segment_tokens, 0);
  EXPECT_EQ(choose_context_split(1, 32768, 0, 0, kH200Sms).segment_tokens, 0);
}

}  // namespace
}  // namespace di::gdn
