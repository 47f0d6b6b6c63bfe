// Tests of host token sampling (kernels/sampling/ref.h): greedy and its tie rule, seeding, the
// truncations (top-k, top-p, min-p) and their degenerate settings, the sampled frequencies against
// softmax(logits / T), and parameter validation.
// Draws use fresh seeds each run (except the frequency tests, see frequency_seed); the seed is
// printed with every failure, and the environment variable DI_TEST_SEED replays it.
#include "kernels/sampling/ref.h"

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <map>
#include <numeric>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "core/error.h"
#include "support/expect_error.h"
#include "support/seed.h"

namespace di {
namespace {

using di::testing::fresh_seed;
using di::testing::seed_trace;

SamplingParams with_temperature(float t) {
  SamplingParams s;
  s.temperature = t;
  return s;
}

// n draws from one generator; returns how often each token came up.
std::vector<int64_t> histogram(const std::vector<float>& logits, const SamplingParams& s, std::mt19937_64& rng,
                               int n) {
  std::vector<int64_t> count(logits.size(), 0);
  for (int i = 0; i < n; ++i) {
    const int64_t tok = sample_token(logits.data(), int64_t(logits.size()), s, rng);
    EXPECT_GE(tok, 0);
    EXPECT_LT(tok, int64_t(logits.size()));
    if (tok < 0 || tok >= int64_t(logits.size())) return count;
    ++count[size_t(tok)];
  }
  return count;
}

// Distinct random logits (no ties), N(0, 2^2).
std::vector<float> random_logits(int64_t vocab, std::mt19937& rng) {
  std::normal_distribution<float> normal(0.0f, 2.0f);
  std::vector<float> l(static_cast<size_t>(vocab));
  std::set<float> seen;
  for (auto& x : l) {
    do x = normal(rng);
    while (!seen.insert(x).second);
  }
  return l;
}

// Logits log(p) for the given probabilities, placed at shuffled token ids so that the kept set is
// not simply a prefix of the vocabulary. Returns the logits and, in `order`, token ids by
// decreasing probability.
std::vector<float> logits_for(const std::vector<double>& probs, std::mt19937& rng, std::vector<int64_t>& order) {
  order.resize(probs.size());
  std::iota(order.begin(), order.end(), 0);
  std::shuffle(order.begin(), order.end(), rng);
  std::vector<float> l(probs.size());
  for (size_t r = 0; r < probs.size(); ++r) l[size_t(order[r])] = float(std::log(probs[r]));
  return l;
}

// softmax(logits / T) in double.
std::vector<double> softmax(const std::vector<float>& logits, double T) {
  double top = -INFINITY;
  for (float x : logits) top = std::max(top, double(x) / T);
  std::vector<double> p(logits.size());
  double sum = 0;
  for (size_t i = 0; i < p.size(); ++i) sum += (p[i] = std::exp(double(logits[i]) / T - top));
  for (auto& x : p) x /= sum;
  return p;
}

TEST(Sampling, GreedyIsArgmaxWithLowestIdOnTies) {
  const SamplingParams greedy;  // temperature 0
  std::mt19937_64 rng(1);
  const std::vector<float> a{1.0f, 5.0f, 3.0f, 5.0f, 2.0f};
  EXPECT_EQ(argmax(a.data(), 5), 1);
  EXPECT_EQ(sample_token(a.data(), 5, greedy, rng), 1);
  const std::vector<float> flat(9, -2.5f);
  EXPECT_EQ(argmax(flat.data(), 9), 0);
  EXPECT_EQ(sample_token(flat.data(), 9, greedy, rng), 0);
  const std::vector<float> neg{-7.0f, -3.0f, -3.0f, -1e30f, -3.0f};
  EXPECT_EQ(sample_token(neg.data(), 5, greedy, rng), 1);
  const std::vector<float> last{0.0f, 0.0f, 0.0f, 0.5f};
  EXPECT_EQ(sample_token(last.data(), 4, greedy, rng), 3);
  const std::vector<float> one{42.0f};
  EXPECT_EQ(sample_token(one.data(), 1, greedy, rng), 0);
  // Greedy ignores the truncation settings and does not consume the generator.
  SamplingParams g2 = greedy;
  g2.top_k = 2;
  g2.top_p = 0.3f;
  g2.min_p = 0.5f;
  std::mt19937_64 fresh(1), used(1);
  EXPECT_EQ(sample_token(a.data(), 5, g2, used), 1);
  EXPECT_EQ(used(), fresh());

  const uint32_t seed = fresh_seed();
  SCOPED_TRACE(seed_trace(seed));
  std::mt19937 gen(seed);
  for (int trial = 0; trial < 50; ++trial) {
    auto l = random_logits(1 + trial * 7, gen);
    const int64_t want = std::max_element(l.begin(), l.end()) - l.begin();  // the first maximum
    EXPECT_EQ(sample_token(l.data(), int64_t(l.size()), greedy, rng), want);
  }
}

TEST(Sampling, SameSeedSameSequenceDifferentSeedsDiffer) {
  const uint32_t seed = fresh_seed();
  SCOPED_TRACE(seed_trace(seed));
  std::mt19937 gen(seed);
  const auto logits = random_logits(50, gen);
  SamplingParams s = with_temperature(1.5f);  // flattened: many tokens are likely
  auto draw = [&](uint64_t rng_seed) {
    std::mt19937_64 rng(rng_seed);
    std::vector<int64_t> seq;
    for (int i = 0; i < 500; ++i) seq.push_back(sample_token(logits.data(), 50, s, rng));
    return seq;
  };
  const uint64_t a = gen(), b = a + 1 + gen() % 1000;
  EXPECT_EQ(draw(a), draw(a));
  EXPECT_NE(draw(a), draw(b));
  const auto sa = draw(a), sb = draw(b);
  int differ = 0;
  for (size_t i = 0; i < sa.size(); ++i) differ += sa[i] != sb[i];
  EXPECT_GT(differ, 100) << "two seeds should give mostly independent draws";
  // With top-k and top-p too.
  s.top_k = 10;
  s.top_p = 0.9f;
  EXPECT_EQ(draw(a), draw(a));
}

TEST(Sampling, DegenerateTruncationsEqualGreedy) {
  const uint32_t seed = fresh_seed();
  SCOPED_TRACE(seed_trace(seed));
  std::mt19937 gen(seed);
  std::mt19937_64 rng(gen());
  SamplingParams top_k1 = with_temperature(1.0f), min_p1 = with_temperature(1.0f), tiny_p = with_temperature(1.0f);
  top_k1.top_k = 1;
  min_p1.min_p = 1.0f;
  tiny_p.top_p = 1e-6f;
  for (int trial = 0; trial < 40; ++trial) {
    const auto l = random_logits(1 + trial * 13, gen);
    const int64_t want = argmax(l.data(), int64_t(l.size()));
    for (int d = 0; d < 20; ++d) {
      ASSERT_EQ(sample_token(l.data(), int64_t(l.size()), top_k1, rng), want) << "top_k 1";
      ASSERT_EQ(sample_token(l.data(), int64_t(l.size()), min_p1, rng), want) << "min_p 1";
      ASSERT_EQ(sample_token(l.data(), int64_t(l.size()), tiny_p, rng), want) << "top_p 1e-6";
    }
  }
  // Tied maxima: top-k 1 and a tiny top-p keep only the lowest id, as greedy does. (min_p 1 keeps
  // every token tied with the maximum, as transformers' MinPLogitsWarper does, so it is not greedy
  // there.)
  const std::vector<float> tied{0.0f, 3.0f, 1.0f, 3.0f, 3.0f};
  for (int d = 0; d < 200; ++d) {
    ASSERT_EQ(sample_token(tied.data(), 5, top_k1, rng), 1);
    ASSERT_EQ(sample_token(tied.data(), 5, tiny_p, rng), 1);
  }
  std::set<int64_t> seen;
  for (int d = 0; d < 200; ++d) seen.insert(sample_token(tied.data(), 5, min_p1, rng));
  EXPECT_EQ(seen, (std::set<int64_t>{1, 3, 4}));
}

TEST(Sampling, TopKNeverLeavesTheTopK) {
  const uint32_t seed = fresh_seed();
  SCOPED_TRACE(seed_trace(seed));
  std::mt19937 gen(seed);
  for (int trial = 0; trial < 5; ++trial) {
    // Logits in a narrow range, so the top 3 do not take all the mass by themselves.
    std::vector<float> l(37);
    std::uniform_real_distribution<float> u(0.0f, 0.5f);
    for (auto& x : l) x = u(gen);
    std::vector<int64_t> ids(l.size());
    std::iota(ids.begin(), ids.end(), 0);
    std::sort(ids.begin(), ids.end(), [&](int64_t a, int64_t b) { return l[a] > l[b] || (l[a] == l[b] && a < b); });
    const std::set<int64_t> top3(ids.begin(), ids.begin() + 3);
    SamplingParams s = with_temperature(1.0f);
    s.top_k = 3;
    std::mt19937_64 rng(gen());
    const auto count = histogram(l, s, rng, 3000);
    for (size_t t = 0; t < count.size(); ++t) {
      if (top3.count(int64_t(t)))
        EXPECT_GT(count[t], 0) << "token " << t << " is in the top 3 but never drawn";
      else
        EXPECT_EQ(count[t], 0) << "token " << t << " is outside the top 3";
    }
  }
  // top_k larger than the vocabulary keeps everything.
  const std::vector<float> flat(4, 0.0f);
  SamplingParams s = with_temperature(1.0f);
  s.top_k = 100;
  std::mt19937_64 rng(gen());
  for (int64_t c : histogram(flat, s, rng, 400)) EXPECT_GT(c, 0);
}

TEST(Sampling, TopPKeepsTheSmallestPrefixReachingP) {
  const uint32_t seed = fresh_seed();
  SCOPED_TRACE(seed_trace(seed));
  std::mt19937 gen(seed);
  const std::vector<double> probs{0.4, 0.25, 0.15, 0.1, 0.06, 0.04};
  // (top_p, size of the smallest prefix whose mass reaches it): cumulative 0.4 0.65 0.8 0.9 0.96 1.
  const std::vector<std::pair<float, size_t>> cases{{0.3f, 1}, {0.5f, 2}, {0.7f, 3}, {0.85f, 4}, {0.93f, 5}, {0.99f, 6}};
  for (const auto& [top_p, prefix] : cases) {
    SCOPED_TRACE(fmt::format("top_p {}", top_p));
    std::vector<int64_t> order;
    const auto l = logits_for(probs, gen, order);
    SamplingParams s = with_temperature(1.0f);
    s.top_p = top_p;
    std::mt19937_64 rng(gen());
    const auto count = histogram(l, s, rng, 4000);
    for (size_t r = 0; r < probs.size(); ++r) {
      if (r < prefix)
        EXPECT_GT(count[size_t(order[r])], 0) << "rank " << r << " is in the prefix but never drawn";
      else
        EXPECT_EQ(count[size_t(order[r])], 0) << "rank " << r << " is outside the prefix";
    }
  }
}

TEST(Sampling, MinPExcludesTokensBelowMinPTimesPMax) {
  const uint32_t seed = fresh_seed();
  SCOPED_TRACE(seed_trace(seed));
  std::mt19937 gen(seed);
  const std::vector<double> probs{0.4, 0.25, 0.15, 0.1, 0.06, 0.04};
  // (min_p, tokens kept): the floor min_p * 0.4 against 0.25 0.15 0.1 0.06 0.04.
  const std::vector<std::pair<float, size_t>> cases{{0.05f, 6}, {0.14f, 5}, {0.2f, 4}, {0.3f, 3}, {0.5f, 2}, {0.7f, 1}};
  for (const auto& [min_p, kept] : cases) {
    SCOPED_TRACE(fmt::format("min_p {}", min_p));
    std::vector<int64_t> order;
    const auto l = logits_for(probs, gen, order);
    SamplingParams s = with_temperature(1.0f);
    s.min_p = min_p;
    std::mt19937_64 rng(gen());
    const auto count = histogram(l, s, rng, 4000);
    for (size_t r = 0; r < probs.size(); ++r) {
      const bool keep = probs[r] >= double(min_p) * probs[0];
      ASSERT_EQ(keep, r < kept);  // the table above
      if (keep)
        EXPECT_GT(count[size_t(order[r])], 0) << "rank " << r << " passes min_p but is never drawn";
      else
        EXPECT_EQ(count[size_t(order[r])], 0) << "rank " << r << " has p < min_p * p_max";
    }
  }
}

// The generator seed of the frequency tests: fixed unless DI_TEST_SEED is set. With fresh seeds,
// the twelve four-standard-error bounds below would fail together about once in a thousand runs
// by chance alone (measured: 1 in 1000); mt19937_64 is fully specified, so a fixed seed gives the
// same draws everywhere.
uint32_t frequency_seed() {
  if (const char* s = std::getenv("DI_TEST_SEED")) return uint32_t(std::stoul(s));
  return 20240607u;
}

// Checks frequencies of n draws against probabilities: each within 4 standard errors.
void expect_frequencies(const std::vector<int64_t>& count, const std::vector<double>& p, int n) {
  for (size_t i = 0; i < p.size(); ++i) {
    const double freq = double(count[i]) / n;
    const double se = std::sqrt(p[i] * (1 - p[i]) / n);
    EXPECT_LE(std::fabs(freq - p[i]), 4 * se)
        << fmt::format("token {}: frequency {:.4f}, softmax {:.4f}, standard error {:.4f}", i, freq, p[i], se);
  }
}

TEST(Sampling, FrequenciesMatchSoftmax) {
  const uint32_t seed = frequency_seed();
  SCOPED_TRACE(seed_trace(seed));
  std::mt19937_64 rng(seed);
  const std::vector<float> logits{0.5f, -0.3f, 1.2f, 0.0f};
  const int n = 20000;
  const auto count = histogram(logits, with_temperature(1.0f), rng, n);
  expect_frequencies(count, softmax(logits, 1.0), n);
}

TEST(Sampling, LowerTemperatureSharpens) {
  const uint32_t seed = frequency_seed();
  SCOPED_TRACE(seed_trace(seed));
  std::mt19937_64 rng(seed);
  const std::vector<float> logits{0.5f, -0.3f, 1.2f, 0.0f};
  const int n = 20000;
  const auto at1 = histogram(logits, with_temperature(1.0f), rng, n);
  const auto at05 = histogram(logits, with_temperature(0.5f), rng, n);
  const auto at2 = histogram(logits, with_temperature(2.0f), rng, n);
  // softmax at T = 1, 0.5 and 2 gives the top token (id 2) 0.49, 0.72 and 0.37: far apart in units
  // of the standard error (about 0.0035).
  EXPECT_GT(at05[2], at1[2]);
  EXPECT_LT(at2[2], at1[2]);
  expect_frequencies(at05, softmax(logits, 0.5), n);
  expect_frequencies(at2, softmax(logits, 2.0), n);
}

// validate() throws di::Error whose message names the field.
void expect_rejected(const SamplingParams& s, const std::string& field) {
  EXPECT_TRUE(di::testing::throws_error_with([&] { validate(s); }, {field})) << "a bad " << field;
}

TEST(Sampling, ValidateRejectsBadParameters) {
  auto p = [](auto edit) {
    SamplingParams s;
    edit(s);
    return s;
  };
  expect_rejected(p([](SamplingParams& s) { s.temperature = -0.5f; }), "temperature");
  expect_rejected(p([](SamplingParams& s) { s.temperature = NAN; }), "temperature");
  expect_rejected(p([](SamplingParams& s) { s.temperature = INFINITY; }), "temperature");
  expect_rejected(p([](SamplingParams& s) { s.top_p = 0.0f; }), "top_p");
  expect_rejected(p([](SamplingParams& s) { s.top_p = 1.5f; }), "top_p");
  expect_rejected(p([](SamplingParams& s) { s.top_p = NAN; }), "top_p");
  expect_rejected(p([](SamplingParams& s) { s.min_p = -0.1f; }), "min_p");
  expect_rejected(p([](SamplingParams& s) { s.min_p = 1.5f; }), "min_p");
  expect_rejected(p([](SamplingParams& s) { s.min_p = NAN; }), "min_p");
  expect_rejected(p([](SamplingParams& s) { s.top_k = -1; }), "top_k");

  // The edges of the valid ranges pass.
  EXPECT_NO_THROW(validate(SamplingParams{}));
  EXPECT_NO_THROW(validate(p([](SamplingParams& s) {
    s.temperature = 0.7f;
    s.top_k = 1;
    s.top_p = 1.0f;
    s.min_p = 1.0f;
  })));
  EXPECT_NO_THROW(validate(p([](SamplingParams& s) {
    s.top_p = 1e-6f;
    s.min_p = 0.0f;
  })));
}

}  // namespace
}  // namespace di
