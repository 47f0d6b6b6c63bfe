// The sm90 kernel's stage timeline on the host: the stages' names and the summary of a recording
// (the recording itself is in sm90_prefill.cu).
#include "gdn/sm90_timeline.h"

#include <algorithm>

namespace di::gdn {

std::string sm90_timeline_event(int group, int event) {
  static const char* const kState[kTimelineEvents] = {"start", "stage full", "K S, Q S", "X", "Vnew",
                                                      "state, output", "barrier", "output stored", "", ""};
  static const char* const kAux[kTimelineEvents] = {"start",      "stage empty",   "inputs landed", "gates",
                                                    "Gram, norms", "P, L",         "inverse diagonal",
                                                    "merge 16",   "merge 32",      "Tinv"};
  if (group < 0 || group >= kTimelineGroups || event < 0 || event >= kTimelineEvents) return "";
  return (group == kTimelineAuxGroup ? kAux : kState)[event];
}

Sm90TimelineSummary summarise_sm90_timeline(std::span<const uint64_t> stamps, int64_t ctas, int chunks) {
  const auto at = [&](int64_t c, int i, int g, int e) {
    return stamps[size_t(((c * chunks + i) * kTimelineGroups + g) * kTimelineEvents + e)];
  };
  const auto median = [](std::vector<double> v) {
    std::nth_element(v.begin(), v.begin() + std::ptrdiff_t(v.size() / 2), v.end());
    return v[v.size() / 2];
  };
  Sm90TimelineSummary summary;
  if (ctas <= 0 || chunks <= 0 || stamps.size() < size_t(ctas) * size_t(chunks) * kTimelineGroups * kTimelineEvents)
    return summary;
  for (int g = 0; g < kTimelineGroups; ++g) {
    std::vector<std::vector<double>> stage(kTimelineEvents);
    std::vector<double> period;
    for (int64_t c = 0; c < ctas; ++c)
      for (int i = 2; i + 2 < chunks; ++i) {
        if (at(c, i, g, 0) == 0) continue;  // no such warpgroup in this CTA, or no such chunk
        bool ordered = true;
        for (int e = 1; e < kTimelineEvents && at(c, i, g, e) != 0; ++e) ordered = ordered && at(c, i, g, e) >= at(c, i, g, e - 1);
        if (!ordered) {
          ++summary.out_of_order;
          continue;
        }
        for (int e = 1; e < kTimelineEvents && at(c, i, g, e) != 0; ++e)
          stage[size_t(e)].push_back(double(at(c, i, g, e) - at(c, i, g, e - 1)));
        if (at(c, i + 1, g, 0) >= at(c, i, g, 0) && at(c, i + 1, g, 0) != 0)
          period.push_back(double(at(c, i + 1, g, 0) - at(c, i, g, 0)));
      }
    if (period.empty()) continue;
    Sm90TimelineGroup group{g, median(period), int64_t(period.size()), {}};
    for (int e = 1; e < kTimelineEvents; ++e)
      if (!stage[size_t(e)].empty()) group.stages.push_back({sm90_timeline_event(g, e), median(stage[size_t(e)])});
    summary.groups.push_back(std::move(group));
  }
  return summary;
}

}  // namespace di::gdn
