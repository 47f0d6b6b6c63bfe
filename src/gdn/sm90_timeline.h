#pragma once
// A timeline of the sm90 GDN prefill kernel's stages (src/gdn/sm90_prefill.cu), for finding which
// warpgroup bounds a chunk: the leader thread of each warpgroup reads the SM's clock at the end of
// each stage of each chunk and stores it. Recorded only in builds configured with
// -DDI_SM90_TIMELINE=ON (one clock read and one store per stage and warpgroup); every other build
// compiles the stamps out and sm90_timeline_built() says so. bench/gdn_kernels.cpp --timeline prints
// the stages' medians. Plain C++ header (no CUDA syntax).
#include <cstdint>
#include <string>

namespace di::gdn {

// Warpgroups of a CTA: the state warpgroups 0 and 1 (a half-head CTA has only 0), the auxiliary one.
constexpr int kTimelineGroups = 3;
constexpr int kTimelineAuxGroup = 2;
constexpr int kTimelineEvents = 8;

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
// Auxiliary: 0 start, 1 the stage is empty, 2 the inputs landed, 3 the norms and gates, 4 the Gram
// products and decays, 5 the inverse, 6 Tinv converted.
std::string sm90_timeline_event(int group, int event);

// Whether this build records the timeline.
bool sm90_timeline_built();

// Records the next launches of the sm90 kernel into `timeline` (stamps == nullptr: stops recording).
// Fails with a message where this build does not record.
std::string sm90_timeline_attach(const Sm90Timeline& timeline);

}  // namespace di::gdn
