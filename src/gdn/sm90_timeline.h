#pragma once
// A timeline of the sm90 GDN prefill kernel's stages (src/gdn/sm90_prefill.cu), for finding which
// warpgroup bounds a chunk: the leader thread of each warpgroup reads the SM's clock at the end of
// each stage of each chunk and stores it. Recorded only in builds configured with
// -DDI_SM90_TIMELINE=ON (one clock read and one store per stage and warpgroup); every other build
// compiles the stamps out and sm90_timeline_built() says so. bench/gdn_kernels.cpp --timeline prints
// the stages' medians (summarise_sm90_timeline, sm90_timeline.cpp). Plain C++ header (no CUDA
// syntax).
#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace di::gdn {

// Warpgroups of a CTA: the state warpgroups 0 and 1 (a half-head CTA has only 0), the auxiliary one.
constexpr int kTimelineGroups = 3;
constexpr int kTimelineAuxGroup = 2;
constexpr int kTimelineEvents = 10;

// The stamps of CTA c, chunk i, warpgroup g, event e:
// stamps[((c * chunks + i) * kTimelineGroups + g) * kTimelineEvents + e], SM clock cycles; chunks
// past `chunks` are not recorded, and an event a warpgroup does not have stays as the buffer was.
struct Sm90Timeline {
  uint64_t* stamps = nullptr;  // device memory, zero before the launch (0: not recorded)
  int chunks = 0;
};

// The events, in the order each warpgroup passes them within a chunk (empty: no such event).
// State warpgroups: 0 start, 1 the stage is full, 2 (K S), (Q S) done, 3 X made, 4 Vnew done, 5 the
// state and output products done, 6 the warpgroups past their barrier, 7 the output stored.
// Auxiliary: 0 start, 1 the stage is empty, 2 the inputs landed, 3 the gates (in a whole-head CTA
// the Gram products are issued before them), 4 the Gram products and the q and k norms, 5 P and L
// (the decays), 6 the inverse's diagonal blocks, 7 its 16 -> 32 merges, 8 its 32 -> 64 merge, 9 Tinv
// converted.
std::string sm90_timeline_event(int group, int event);

// A recorded timeline summarised over the chunks away from each sequence's ends (chunks 2 .. n - 3):
// per warpgroup and stage, the median cycles since the stage before, and the median cycles from one
// chunk's start to the next. A stamp earlier than the one before it in its chunk is counted, not
// summarised: the recording is broken then.
struct Sm90TimelineStage {
  std::string name;
  double median_cycles = 0;
};
struct Sm90TimelineGroup {
  int group = 0;  // 0, 1: state warpgroups; kTimelineAuxGroup: the auxiliary one
  double chunk_period_cycles = 0;
  int64_t chunks = 0;  // (CTA, chunk) pairs summarised
  std::vector<Sm90TimelineStage> stages;
};
struct Sm90TimelineSummary {
  std::vector<Sm90TimelineGroup> groups;  // the warpgroups with any stamps
  int64_t out_of_order = 0;
};
Sm90TimelineSummary summarise_sm90_timeline(std::span<const uint64_t> stamps, int64_t ctas, int chunks);

// Whether this build records the timeline.
bool sm90_timeline_built();

// Records the next launches of the sm90 kernel into `timeline` (stamps == nullptr: stops recording).
// Fails with a message where this build does not record.
std::string sm90_timeline_attach(const Sm90Timeline& timeline);

}  // namespace di::gdn
