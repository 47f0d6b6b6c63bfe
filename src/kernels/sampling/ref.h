#pragma once
// Token sampling on the host: greedy, temperature, top-k, top-p, min-p, seeded.
#include <cstdint>
#include <random>
#include <utility>
#include <vector>

namespace di {

struct SamplingParams {
  float temperature = 0.0f;  // 0: greedy (argmax, lowest id on ties)
  int64_t top_k = 0;         // 0: off
  float top_p = 1.0f;        // 1: off
  float min_p = 0.0f;        // 0: off; keeps tokens with p >= min_p * p_max
  uint64_t seed = 0;
  int32_t logprobs = -1;     // report each drawn token's log-probability (0), and its top N (N <= 20)
                             // of the raw distribution; -1: none
};

// Log-probabilities of one drawn token under log_softmax(logits): its own and the top N.
struct TokenLogprobs {
  float logprob = 0;
  std::vector<std::pair<int32_t, float>> top;  // highest first (ties by id)
};
TokenLogprobs token_logprobs(const float* logits, int64_t vocab, int32_t token, int32_t top_n);

// Validates the parameters; the error names the bad field and value.
void validate(const SamplingParams& params);

// The same seed and logits give the same token on every machine (the generator is std::mt19937_64
// and the uniform draw is built from its 53 high bits, both fully specified by the standard).
int64_t sample_token(const float* logits, int64_t vocab, const SamplingParams& params, std::mt19937_64& rng);

int64_t argmax(const float* logits, int64_t vocab);

}  // namespace di
