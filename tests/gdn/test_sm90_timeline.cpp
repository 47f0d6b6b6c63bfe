// The summary of the sm90 kernel's stage timeline (gdn/sm90_timeline.h), on recordings made up here:
// the medians are the stages' gaps, the period the gap between chunk starts, the chunks near a
// sequence's ends are left out, and a broken recording is counted rather than summarised.
#include <gtest/gtest.h>

#include <vector>

#include "gdn/sm90_timeline.h"

namespace di::gdn {
namespace {

constexpr int kCtas = 3, kChunks = 9;

size_t index(int cta, int chunk, int group, int event) {
  return size_t(((cta * kChunks + chunk) * kTimelineGroups + group) * kTimelineEvents + event);
}

// CTA c's warpgroup g passes event e of chunk i at base + 1000 i + gaps[0] + ... + gaps[e]; CTA 2 has
// no second state warpgroup (a half-head CTA), and the state warpgroups have no events 8 and 9.
std::vector<uint64_t> recording(const std::vector<uint64_t>& state_gaps, const std::vector<uint64_t>& aux_gaps) {
  std::vector<uint64_t> stamps(size_t(kCtas) * kChunks * kTimelineGroups * kTimelineEvents, 0);
  for (int c = 0; c < kCtas; ++c)
    for (int i = 0; i < kChunks; ++i)
      for (int g = 0; g < kTimelineGroups; ++g) {
        if (c == 2 && g == 1) continue;
        const std::vector<uint64_t>& gaps = g == kTimelineAuxGroup ? aux_gaps : state_gaps;
        uint64_t t = 5000 + 100000 * uint64_t(c) + 1000 * uint64_t(i) + 7 * uint64_t(g);
        for (size_t e = 0; e < gaps.size(); ++e) stamps[index(c, i, g, int(e))] = t += gaps[e];
      }
  return stamps;
}

TEST(Sm90Timeline, MediansAreTheStagesGapsAwayFromTheEnds) {
  const std::vector<uint64_t> state_gaps = {0, 40, 110, 60, 130, 200, 30, 90};
  const std::vector<uint64_t> aux_gaps = {0, 300, 20, 80, 150, 60, 250, 90, 70, 120};
  std::vector<uint64_t> stamps = recording(state_gaps, aux_gaps);
  // An outlier in a chunk at the sequence's start (left out) and one in the middle (a median ignores it).
  stamps[index(0, 0, 0, 3)] += 50;
  stamps[index(1, 4, 0, 3)] += 50;
  const Sm90TimelineSummary s = summarise_sm90_timeline(stamps, kCtas, kChunks);
  EXPECT_EQ(s.out_of_order, 0);
  ASSERT_EQ(s.groups.size(), 3u);
  for (const Sm90TimelineGroup& g : s.groups) {
    SCOPED_TRACE("warpgroup " + std::to_string(g.group));
    const bool aux = g.group == kTimelineAuxGroup;
    const std::vector<uint64_t>& gaps = aux ? aux_gaps : state_gaps;
    EXPECT_EQ(g.chunk_period_cycles, 1000.0);
    EXPECT_EQ(g.chunks, int64_t(kChunks - 4) * (g.group == 1 ? 2 : 3));  // chunks 2 .. 6 of each CTA that has it
    ASSERT_EQ(g.stages.size(), gaps.size() - 1);
    for (size_t e = 1; e < gaps.size(); ++e) {
      EXPECT_EQ(g.stages[e - 1].median_cycles, double(gaps[e])) << g.stages[e - 1].name;
      EXPECT_EQ(g.stages[e - 1].name, sm90_timeline_event(g.group, int(e)));
    }
  }
  EXPECT_EQ(sm90_timeline_event(kTimelineAuxGroup, 6), "inverse diagonal");
  EXPECT_EQ(sm90_timeline_event(0, 7), "output stored");
  EXPECT_EQ(sm90_timeline_event(0, 8), "");
  EXPECT_EQ(sm90_timeline_event(3, 0), "");
}

TEST(Sm90Timeline, BrokenRecordingsAreCountedNotSummarised) {
  std::vector<uint64_t> stamps = recording({0, 10, 10, 10, 10, 10, 10, 10}, {0, 10, 10, 10, 10, 10, 10, 10, 10, 10});
  stamps[index(1, 3, 0, 5)] = stamps[index(1, 3, 0, 4)] - 1;  // a stamp before the one ahead of it
  const Sm90TimelineSummary s = summarise_sm90_timeline(stamps, kCtas, kChunks);
  EXPECT_EQ(s.out_of_order, 1);
  ASSERT_FALSE(s.groups.empty());
  EXPECT_EQ(s.groups[0].chunks, int64_t(kChunks - 4) * 3 - 1);
  // Too few stamps for the shape, or no shape: nothing.
  EXPECT_TRUE(summarise_sm90_timeline(std::span<const uint64_t>(stamps).first(10), kCtas, kChunks).groups.empty());
  EXPECT_TRUE(summarise_sm90_timeline(stamps, 0, kChunks).groups.empty());
  // Sequences of four chunks or fewer have no chunk away from both ends.
  EXPECT_TRUE(summarise_sm90_timeline(std::vector<uint64_t>(size_t(kCtas) * 4 * kTimelineGroups * kTimelineEvents, 1),
                                      kCtas, 4)
                  .groups.empty());
}

}  // namespace
}  // namespace di::gdn
