#pragma once
// Fresh random inputs in every run, reproducible on demand: each test draws its seed here and
// prints it in its trace; DI_TEST_SEED=N replays a failure.
#include <cstdint>
#include <cstdlib>
#include <random>
#include <string>

namespace di::testing {

inline uint32_t fresh_seed() {
  if (const char* s = std::getenv("DI_TEST_SEED")) return uint32_t(std::stoul(s));
  return std::random_device{}();
}

inline std::string seed_trace(uint32_t seed) {
  return "seed " + std::to_string(seed) + " (replay with DI_TEST_SEED=" + std::to_string(seed) + ")";
}

}  // namespace di::testing
