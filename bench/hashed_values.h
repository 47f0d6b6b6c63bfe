#pragma once
// Inputs for the benchmarks whose values do not change the time: bf16 bits uniform in
// [-scale, scale) from a linear congruential hash, cheap enough to fill the 1.27 GB lm_head quickly.
#include <cstdint>
#include <vector>

#include "core/bf16.h"

namespace di::bench {

inline std::vector<uint16_t> hashed_bf16(int64_t n, float scale, uint32_t seed) {
  std::vector<uint16_t> bits(static_cast<size_t>(n));
  uint32_t h = seed;
  for (auto& b : bits) {
    h = h * 1664525u + 1013904223u;
    b = f32_to_bf16(scale * (float(h >> 8) / float(1 << 24) * 2.0f - 1.0f));
  }
  return bits;
}

}  // namespace di::bench
