#pragma once
// Token sampling on the host: greedy, temperature, top-k, top-p, min-p, seeded.
#include <cstdint>
#include <random>

namespace di {

struct SamplingParams {
  float temperature = 0.0f;  // 0: greedy (argmax, lowest id on ties)
  int64_t top_k = 0;         // 0: off
  float top_p = 1.0f;        // 1: off
  float min_p = 0.0f;        // 0: off; keeps tokens with p >= min_p * p_max
  uint64_t seed = 0;
};

// Validates the parameters; the error names the bad field and value.
void validate(const SamplingParams& params);

// The same seed and logits give the same token on every machine (the generator is std::mt19937_64
// and the uniform draw is built from its 53 high bits, both fully specified by the standard).
int64_t sample_token(const float* logits, int64_t vocab, const SamplingParams& params, std::mt19937_64& rng);

int64_t argmax(const float* logits, int64_t vocab);

}  // namespace di
