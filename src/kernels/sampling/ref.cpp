#include "kernels/sampling/ref.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <vector>

#include "core/error.h"

namespace di {

void validate(const SamplingParams& s) {
  if (!(s.temperature >= 0.0f) || !std::isfinite(s.temperature))
    fail("sampling: temperature must be >= 0, found {}", s.temperature);
  if (s.top_k < 0) fail("sampling: top_k must be >= 0 (0 turns it off), found {}", s.top_k);
  if (!(s.top_p > 0.0f && s.top_p <= 1.0f)) fail("sampling: top_p must be in (0, 1], found {}", s.top_p);
  if (!(s.min_p >= 0.0f && s.min_p <= 1.0f)) fail("sampling: min_p must be in [0, 1], found {}", s.min_p);
  if (s.logprobs < -1 || s.logprobs > 20) fail("sampling: logprobs must be -1 (none) or 0 to 20, found {}", s.logprobs);
}

TokenLogprobs token_logprobs(const float* logits, int64_t vocab, int32_t token, int32_t top_n) {
  DI_CHECK(token >= 0 && token < vocab, "token_logprobs: token {} outside the vocabulary of {}", token, vocab);
  // log_softmax in double: x - max - log(sum exp(x - max)).
  double max = logits[0];
  for (int64_t i = 1; i < vocab; ++i) max = std::max(max, double(logits[i]));
  double sum = 0;
  for (int64_t i = 0; i < vocab; ++i) sum += std::exp(double(logits[i]) - max);
  const double lse = max + std::log(sum);
  TokenLogprobs out;
  out.logprob = float(double(logits[token]) - lse);
  const int64_t n = std::min<int64_t>(std::max(top_n, 0), vocab);
  std::vector<int64_t> ids(static_cast<size_t>(vocab));
  std::iota(ids.begin(), ids.end(), 0);
  std::partial_sort(ids.begin(), ids.begin() + n, ids.end(),
                    [&](int64_t a, int64_t b) { return logits[a] > logits[b] || (logits[a] == logits[b] && a < b); });
  for (int64_t i = 0; i < n; ++i) out.top.emplace_back(int32_t(ids[size_t(i)]), float(double(logits[ids[size_t(i)]]) - lse));
  return out;
}

int64_t argmax(const float* logits, int64_t vocab) {
  int64_t best = 0;
  for (int64_t i = 1; i < vocab; ++i)
    if (logits[i] > logits[best]) best = i;
  return best;
}

int64_t sample_token(const float* logits, int64_t vocab, const SamplingParams& s, std::mt19937_64& rng) {
  if (s.temperature == 0.0f) return argmax(logits, vocab);
  // Candidates sorted by logit, highest first (ties by id, so the order is deterministic).
  std::vector<int64_t> ids(static_cast<size_t>(vocab));
  std::iota(ids.begin(), ids.end(), 0);
  const int64_t k = s.top_k > 0 ? std::min(s.top_k, vocab) : vocab;
  auto by_logit = [&](int64_t a, int64_t b) { return logits[a] > logits[b] || (logits[a] == logits[b] && a < b); };
  std::partial_sort(ids.begin(), ids.begin() + k, ids.end(), by_logit);
  ids.resize(size_t(k));

  std::vector<double> prob(ids.size());
  const double top = double(logits[ids[0]]) / s.temperature;
  double sum = 0;
  for (size_t i = 0; i < ids.size(); ++i) sum += (prob[i] = std::exp(double(logits[ids[i]]) / s.temperature - top));
  for (auto& q : prob) q /= sum;

  size_t keep = prob.size();
  if (s.min_p > 0.0f) {  // prob is sorted, so the kept set is a prefix
    const double floor = double(s.min_p) * prob[0];
    keep = size_t(std::find_if(prob.begin(), prob.end(), [&](double q) { return q < floor; }) - prob.begin());
  }
  if (s.top_p < 1.0f) {  // the smallest prefix whose mass reaches top_p
    double mass = 0;
    for (size_t i = 0; i < keep; ++i) {
      mass += prob[i];
      if (mass >= double(s.top_p)) {
        keep = i + 1;
        break;
      }
    }
  }
  keep = std::max<size_t>(keep, 1);
  const double total = std::accumulate(prob.begin(), prob.begin() + keep, 0.0);
  const double u = double(rng() >> 11) * (1.0 / 9007199254740992.0) * total;  // uniform in [0, total)
  double acc = 0;
  for (size_t i = 0; i < keep; ++i) {
    acc += prob[i];
    if (u < acc) return ids[i];
  }
  return ids[keep - 1];
}

}  // namespace di
