// GPU token sampling (kernels/sampling/sampling.h) against the host reference (kernels/sampling/
// ref.h): greedy rows are ref::argmax exactly (lowest id on ties, f32 and bf16 logits, odd and full
// vocabulary sizes); a sampled token always lies in the reference's kept set, and its frequencies
// follow the reference's renormalised probabilities; a draw is a function of (seed, step) alone;
// bad shapes are refused and bad parameters are caught on the host before any launch.
#include "kernels/sampling/sampling.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <numeric>
#include <random>
#include <set>
#include <span>
#include <string>
#include <vector>

#include "core/bf16.h"
#include "gpu/gpu_test.h"
#include "kernels/sampling/ref.h"
#include "support/expect_error.h"
#include "support/seed.h"

namespace di::sampling {
namespace {

using di::testing::fresh_seed;
using di::testing::seed_trace;

constexpr int32_t kFullVocab = 248320;  // Qwen3.5

// Rows of logits as the host sees them: float32 values, bf16-representable when sent as bf16.
struct Batch {
  int32_t rows = 0;
  int32_t vocab = 0;
  bool bf16 = false;
  std::vector<float> logits;  // [rows, vocab]
  const float* row(int32_t r) const { return logits.data() + size_t(r) * size_t(vocab); }
  float* row(int32_t r) { return logits.data() + size_t(r) * size_t(vocab); }
};

std::string describe(const Batch& b) {
  return std::string(b.bf16 ? "bf16" : "f32") + " rows " + std::to_string(b.rows) + " vocab " + std::to_string(b.vocab);
}

std::string describe(const SamplingRow& r) {
  return "temperature " + std::to_string(r.temperature) + " top_k " + std::to_string(r.top_k) + " top_p " +
         std::to_string(r.top_p) + " min_p " + std::to_string(r.min_p) + " seed " + std::to_string(r.seed) + " step " +
         std::to_string(r.step);
}

// The values a row holds once sent in its dtype.
void round_to_dtype(Batch& b) {
  if (b.bf16)
    for (float& x : b.logits) x = round_bf16(x);
}

// Normal logits with planted ties: the maximum copied to a few other ids (the lowest must win), and
// in some rows every value snapped to a grid of 0.25 so that ties straddle every truncation boundary.
void fill_random(Batch& b, std::mt19937_64& gen) {
  b.logits.resize(size_t(b.rows) * size_t(b.vocab));
  std::uniform_real_distribution<float> scale_dist(0.5f, 6.0f);
  std::uniform_int_distribution<int32_t> any_id(0, b.vocab - 1);
  for (int32_t r = 0; r < b.rows; ++r) {
    std::normal_distribution<float> normal(0.0f, scale_dist(gen));
    float* l = b.row(r);
    for (int32_t i = 0; i < b.vocab; ++i) l[i] = normal(gen);
    if (gen() % 3 == 0)
      for (int32_t i = 0; i < b.vocab; ++i) l[i] = std::round(l[i] * 4.0f) / 4.0f;
    const float top = *std::max_element(l, l + b.vocab);
    const int copies = int(gen() % 4);
    for (int c = 0; c < copies; ++c) l[any_id(gen)] = top;
  }
  round_to_dtype(b);
}

// ---- the reference's kept set, step by step as ref.cpp's sample_token -----------------------

struct Candidates {
  std::vector<int32_t> ids;  // the top-k candidates, highest logit first, ties by id
  std::vector<double> prob;  // softmax(logits / T) over them, in double as the reference
};

Candidates top_k_candidates(const float* logits, int32_t vocab, const SamplingRow& r) {
  Candidates c;
  c.ids.resize(size_t(vocab));
  std::iota(c.ids.begin(), c.ids.end(), 0);
  const int32_t k = r.top_k > 0 ? std::min(r.top_k, vocab) : vocab;
  auto by_logit = [&](int32_t a, int32_t b) { return logits[a] > logits[b] || (logits[a] == logits[b] && a < b); };
  std::partial_sort(c.ids.begin(), c.ids.begin() + k, c.ids.end(), by_logit);
  c.ids.resize(size_t(k));
  c.prob.resize(c.ids.size());
  const double top = double(logits[c.ids[0]]) / r.temperature;
  double sum = 0;
  for (size_t i = 0; i < c.ids.size(); ++i)
    sum += (c.prob[i] = std::exp(double(logits[c.ids[i]]) / r.temperature - top));
  for (double& p : c.prob) p /= sum;
  return c;
}

// Length of the kept prefix of the candidates, with the min-p floor and the top-p mass scaled by the
// given factors (1, 1: the reference's rule).
size_t kept_length(const Candidates& c, const SamplingRow& r, double min_p_scale, double top_p_scale) {
  size_t keep = c.prob.size();
  if (r.min_p > 0.0f) {
    const double floor = double(r.min_p) * min_p_scale * c.prob[0];
    keep = size_t(std::find_if(c.prob.begin(), c.prob.end(), [&](double q) { return q < floor; }) - c.prob.begin());
  }
  if (r.top_p < 1.0f) {
    double mass = 0;
    for (size_t i = 0; i < keep; ++i) {
      mass += c.prob[i];
      if (mass >= double(r.top_p) * top_p_scale) {
        keep = i + 1;
        break;
      }
    }
  }
  return std::max<size_t>(keep, 1);
}

// The GPU computes probabilities in float32 (relative error near 1e-6 against the reference's
// double), so a probability within that of a min-p or top-p threshold may fall on either side.
// Rows whose kept set changes when both thresholds move by kBoundaryMargin are redrawn.
constexpr double kBoundaryMargin = 1e-4;

struct KeptSet {
  std::vector<int32_t> ids;  // in the reference's order
  std::vector<double> prob;  // renormalised over the kept set
  bool near_boundary = false;
};

KeptSet reference_kept_set(const float* logits, int32_t vocab, const SamplingRow& r) {
  const Candidates c = top_k_candidates(logits, vocab, r);
  const size_t keep = kept_length(c, r, 1.0, 1.0);
  KeptSet k;
  k.near_boundary = kept_length(c, r, 1.0 + kBoundaryMargin, 1.0 - kBoundaryMargin) !=
                    kept_length(c, r, 1.0 - kBoundaryMargin, 1.0 + kBoundaryMargin);
  k.ids.assign(c.ids.begin(), c.ids.begin() + ptrdiff_t(keep));
  const double total = std::accumulate(c.prob.begin(), c.prob.begin() + ptrdiff_t(keep), 0.0);
  for (size_t i = 0; i < keep; ++i) k.prob.push_back(c.prob[i] / total);
  return k;
}

// ---- rows of parameters --------------------------------------------------------------------

// The expected way to build rows: make_sampling_row validates on the host.
SamplingRow row_of(float temperature, int64_t top_k, float top_p, float min_p, uint64_t seed, uint64_t step) {
  SamplingParams s;
  s.temperature = temperature;
  s.top_k = top_k;
  s.top_p = top_p;
  s.min_p = min_p;
  s.seed = seed;
  return make_sampling_row(s, step);
}

// Random parameters from the ranges the engine uses.
SamplingRow random_row(std::mt19937_64& gen) {
  const int32_t top_ks[] = {0, 1, 5, 50};
  const float top_ps[] = {1.0f, 0.9f, 0.5f};
  const float min_ps[] = {0.0f, 0.05f};
  std::uniform_real_distribution<float> temperature(0.3f, 2.0f);
  return row_of(temperature(gen), top_ks[gen() % 4], top_ps[gen() % 3], min_ps[gen() % 2], gen(), 0);
}

// ---- running the kernel ---------------------------------------------------------------------

class SamplingGpuTest : public di::testing::GpuTest {
 protected:
  // Launches once per step: `params` holds [steps][rows] rows; returns the tokens, [steps][rows].
  std::vector<int32_t> run(const Batch& b, const std::vector<SamplingRow>& params) {
    const size_t steps = params.size() / size_t(b.rows);
    cuda::DeviceBuffer<float> logits_f32;
    cuda::DeviceBuffer<uint16_t> logits_bf16;
    const void* logits = nullptr;
    if (b.bf16) {
      std::vector<uint16_t> bits(b.logits.size());
      for (size_t i = 0; i < bits.size(); ++i) bits[i] = f32_to_bf16(b.logits[i]);
      logits_bf16 = cuda::DeviceBuffer<uint16_t>(std::span<const uint16_t>(bits));
      logits = logits_bf16.data();
    } else {
      logits_f32 = cuda::DeviceBuffer<float>(std::span<const float>(b.logits));
      logits = logits_f32.data();
    }
    cuda::DeviceBuffer<SamplingRow> rows{std::span<const SamplingRow>(params)};
    cuda::DeviceBuffer<int32_t> out(params.size());
    out.fill_bytes(0xFF);  // -1: a row the kernel never writes fails every check
    cuda::DeviceBuffer<std::byte> workspace(sample_workspace_bytes(b.rows, b.vocab));
    for (size_t s = 0; s < steps; ++s) {
      SampleParams p;
      p.logits = logits;
      p.logits_bf16 = b.bf16;
      p.rows = b.rows;
      p.vocab = b.vocab;
      p.row_params = rows.data() + s * size_t(b.rows);
      p.out_tokens = out.data() + s * size_t(b.rows);
      p.workspace = workspace.data();
      p.workspace_bytes = workspace.bytes();
      EXPECT_EQ(launch_sample(p, stream_), cudaSuccess);
    }
    sync();
    return out.download();
  }

  // Samples every row `steps` times (steps 0, 1, ...) and checks each token against the reference's
  // kept set; with `check_frequencies`, also the frequencies against the renormalised probabilities.
  //
  // The frequency check is Kolmogorov-Smirnov-like: D = max over prefixes of the kept set (in the
  // reference's order) of |empirical mass - expected mass|. By the Dvoretzky-Kiefer-Wolfowitz
  // inequality with Massart's constant, P(D > eps) <= 2 exp(-2 n eps^2) for n independent draws from
  // any distribution (for a discrete one the bound is conservative). eps is chosen so that this is at
  // most kFalseFailure / rows per row: a correct kernel fails one call with probability below
  // kFalseFailure = 1e-7, and the six calls of the test below 1e-6 together. The GPU's float32
  // probabilities move the expected masses by ~1e-6, far below eps (0.036 at 8000 draws of 64 rows).
  void check_kept_sets(Batch b, int steps, bool check_frequencies, std::mt19937_64& gen) {
    SCOPED_TRACE(describe(b) + " steps " + std::to_string(steps));
    fill_random(b, gen);
    std::vector<SamplingRow> base(size_t(b.rows));
    std::vector<KeptSet> kept(size_t(b.rows));
    for (int32_t r = 0; r < b.rows; ++r) {
      int tries = 0;
      for (;;) {
        base[size_t(r)] = random_row(gen);
        kept[size_t(r)] = reference_kept_set(b.row(r), b.vocab, base[size_t(r)]);
        if (!kept[size_t(r)].near_boundary) break;
        ASSERT_LT(++tries, 100) << "row " << r << " keeps landing on a threshold";
        // New logits for this row only.
        Batch one{1, b.vocab, b.bf16, {}};
        fill_random(one, gen);
        std::copy(one.logits.begin(), one.logits.end(), b.row(r));
      }
    }
    std::vector<SamplingRow> params;
    for (int s = 0; s < steps; ++s)
      for (SamplingRow row : base) {
        row.step = uint64_t(s);
        params.push_back(row);
      }
    const auto tokens = run(b, params);

    constexpr double kFalseFailure = 1e-7;
    const double eps = std::sqrt(std::log(2.0 * b.rows / kFalseFailure) / (2.0 * steps));
    for (int32_t r = 0; r < b.rows; ++r) {
      const KeptSet& k = kept[size_t(r)];
      SCOPED_TRACE("row " + std::to_string(r) + ": " + describe(base[size_t(r)]) + ", kept " +
                   std::to_string(k.ids.size()) + " tokens");
      std::vector<int32_t> rank_of(size_t(b.vocab), -1);
      for (size_t i = 0; i < k.ids.size(); ++i) rank_of[size_t(k.ids[i])] = int32_t(i);
      std::vector<int64_t> count(k.ids.size(), 0);
      for (int s = 0; s < steps; ++s) {
        const int32_t tok = tokens[size_t(s) * size_t(b.rows) + size_t(r)];
        ASSERT_TRUE(tok >= 0 && tok < b.vocab) << "step " << s << ": token " << tok << " is not a vocabulary id";
        ASSERT_GE(rank_of[size_t(tok)], 0)
            << "step " << s << ": token " << tok << " (logit " << b.row(r)[tok] << ") lies outside the kept set";
        ++count[size_t(rank_of[size_t(tok)])];
      }
      if (!check_frequencies) continue;
      double empirical = 0, expected = 0, worst = 0;
      size_t worst_rank = 0;
      for (size_t i = 0; i < k.ids.size(); ++i) {
        empirical += double(count[i]) / steps;
        expected += k.prob[i];
        if (std::fabs(empirical - expected) > worst) {
          worst = std::fabs(empirical - expected);
          worst_rank = i;
        }
      }
      EXPECT_LE(worst, eps) << "the sampled mass of the first " << worst_rank + 1 << " kept tokens is off by " << worst;
    }
  }
};

// ---- greedy -------------------------------------------------------------------------------

TEST_F(SamplingGpuTest, GreedyIsArgmaxWithLowestIdOnTies) {
  const uint32_t seed = fresh_seed();
  SCOPED_TRACE(seed_trace(seed));
  std::mt19937_64 gen(seed);
  for (bool bf16 : {false, true}) {
    for (int32_t vocab : {1, 2, 63, 1000, kFullVocab}) {
      for (int32_t rows : {1, 3, 64}) {
        Batch b{rows, vocab, bf16, {}};
        SCOPED_TRACE(describe(b));
        fill_random(b, gen);
        // Ties at the two ends of the row: the first id must win over the last.
        if (vocab > 1) b.row(0)[0] = b.row(0)[vocab - 1] = *std::max_element(b.row(0), b.row(0) + vocab);
        // Most rows greedy; a few with top_k = 1 or a tiny top_p, which keep only the first candidate.
        std::vector<SamplingRow> params;
        for (int32_t r = 0; r < rows; ++r) {
          const int kind = r % 4;
          params.push_back(kind == 1   ? row_of(0.8f, 1, 1.0f, 0.0f, gen(), gen())
                           : kind == 2 ? row_of(1.3f, 0, 1e-6f, 0.0f, gen(), gen())
                                       : row_of(0.0f, 0, 1.0f, 0.0f, gen(), gen()));
        }
        const auto tokens = run(b, params);
        for (int32_t r = 0; r < rows; ++r)
          ASSERT_EQ(tokens[size_t(r)], int32_t(argmax(b.row(r), vocab)))
              << "row " << r << ": " << describe(params[size_t(r)]);
      }
    }
  }
}

// The kernel takes a row's maximum in slices (one block each); a row whose single largest logit
// sits at the row's ends, around every eighth of the row (where slices meet) or anywhere at random
// must still give that id, and a copy of it in a later slice must lose to it.
TEST_F(SamplingGpuTest, GreedyFindsTheMaximumInAnySliceOfTheRow) {
  const uint32_t seed = fresh_seed();
  SCOPED_TRACE(seed_trace(seed));
  std::mt19937_64 gen(seed);
  for (bool bf16 : {false, true}) {
    for (int32_t vocab : {1001, kFullVocab}) {
      std::vector<int32_t> where{0, 1, vocab - 2, vocab - 1};
      for (int32_t e = 1; e < 8; ++e)
        for (int32_t d = -9; d <= 9; ++d) where.push_back(int32_t(int64_t(vocab) * e / 8) + d);
      std::uniform_int_distribution<int32_t> anywhere(0, vocab - 1);
      for (int i = 0; i < 16; ++i) where.push_back(anywhere(gen));
      Batch b{int32_t(where.size()), vocab, bf16, {}};
      SCOPED_TRACE(describe(b));
      std::normal_distribution<float> normal(0.0f, 2.0f);
      b.logits.resize(size_t(b.rows) * size_t(vocab));
      for (float& x : b.logits) x = normal(gen);
      for (int32_t r = 0; r < b.rows; ++r) {
        const int32_t at = where[size_t(r)];
        b.row(r)[at] = 100.0f;
        if (r % 2 == 1 && at + 1 < vocab) b.row(r)[std::uniform_int_distribution<int32_t>(at + 1, vocab - 1)(gen)] = 100.0f;
      }
      round_to_dtype(b);
      const std::vector<SamplingRow> params(size_t(b.rows), row_of(0.0f, 0, 1.0f, 0.0f, 1, 0));
      const auto tokens = run(b, params);
      for (int32_t r = 0; r < b.rows; ++r)
        ASSERT_EQ(tokens[size_t(r)], where[size_t(r)]) << "row " << r << " (largest logit at " << where[size_t(r)] << ")";
    }
  }
}

TEST_F(SamplingGpuTest, GreedyOnSpecialValuesMatchesReference) {
  const float inf = INFINITY, nan = NAN;
  const std::vector<std::vector<float>> cases{
      {-0.0f, 0.0f, -1.0f},      // -0 and +0 tie: id 0
      {-1.0f, 0.0f, -0.0f},      // +0 then -0: id 1
      {-inf, -inf, -inf, -inf},  // nothing finite: id 0
      {nan, 5.0f, 7.0f},         // NaN at id 0 is never replaced by ref::argmax
      {1.0f, nan, 3.0f, nan},    // NaN elsewhere is skipped
      {2.0f, inf, 1.0f, inf},    // the first +inf
      {-inf, nan, -inf},         // NaN never beats -inf
      {-3e38f, -2e38f, -3e38f},  // large magnitudes
  };
  for (bool bf16 : {false, true}) {
    for (size_t c = 0; c < cases.size(); ++c) {
      Batch b{1, int32_t(cases[c].size()), bf16, cases[c]};
      round_to_dtype(b);
      SCOPED_TRACE(describe(b) + " case " + std::to_string(c));
      const auto tokens = run(b, {row_of(0.0f, 0, 1.0f, 0.0f, 1, 0)});
      EXPECT_EQ(tokens[0], int32_t(argmax(b.row(0), b.vocab)));
    }
  }
}

// ---- the kept set and the frequencies ---------------------------------------------------------

TEST_F(SamplingGpuTest, SampledTokensLieInTheKeptSetWithReferenceFrequencies) {
  const uint32_t seed = fresh_seed();
  SCOPED_TRACE(seed_trace(seed));
  std::mt19937_64 gen(seed);
  for (bool bf16 : {false, true}) {
    check_kept_sets(Batch{64, 1000, bf16, {}}, 8000, true, gen);
    check_kept_sets(Batch{3, 63, bf16, {}}, 8000, true, gen);
    check_kept_sets(Batch{5, 2, bf16, {}}, 4000, true, gen);
    // The full vocabulary: every radix level and the draw's chunks see many elements.
    check_kept_sets(Batch{8, kFullVocab, bf16, {}}, 64, false, gen);
  }
}

// On a flat row every token ties, so each truncation must cut by id exactly as the reference does.
TEST_F(SamplingGpuTest, TiesAreCutByIdOnAFlatRow) {
  const uint32_t seed = fresh_seed();
  SCOPED_TRACE(seed_trace(seed));
  std::mt19937_64 gen(seed);
  const int32_t vocab = 999;
  const int steps = 600;
  for (bool bf16 : {false, true}) {
    Batch b{2, vocab, bf16, std::vector<float>(size_t(2 * vocab), 1.5f)};
    const uint64_t s0 = gen(), s1 = gen();
    std::vector<SamplingRow> params;
    for (int s = 0; s < steps; ++s) {
      params.push_back(row_of(1.0f, 5, 1.0f, 0.0f, s0, uint64_t(s)));  // keeps ids 0..4
      params.push_back(row_of(0.7f, 0, 0.5f, 0.0f, s1, uint64_t(s)));  // 500 / 999 >= 0.5: ids 0..499
    }
    const auto tokens = run(b, params);
    std::set<int32_t> top_k_seen;
    int32_t top_p_highest = -1;
    for (int s = 0; s < steps; ++s) {
      const int32_t a = tokens[size_t(2 * s)], c = tokens[size_t(2 * s + 1)];
      ASSERT_TRUE(a >= 0 && a < 5) << "top_k 5 on a flat row drew " << a;
      ASSERT_TRUE(c >= 0 && c < 500) << "top_p 0.5 on a flat row of 999 drew " << c;
      top_k_seen.insert(a);
      top_p_highest = std::max(top_p_highest, c);
    }
    // 600 uniform draws: a missing id among 5 has probability 5 * 0.8^600 < 1e-50; the highest of
    // 600 draws from 500 ids is below 450 with probability 0.9^600 < 1e-27.
    EXPECT_EQ(top_k_seen.size(), 5u);
    EXPECT_GE(top_p_highest, 450);
  }
}

// ---- determinism ----------------------------------------------------------------------------

TEST_F(SamplingGpuTest, SameSeedAndStepGiveTheSameTokenInAnyBatch) {
  const uint32_t seed = fresh_seed();
  SCOPED_TRACE(seed_trace(seed));
  std::mt19937_64 gen(seed);
  for (bool bf16 : {false, true}) {
    Batch b{64, 4097, bf16, {}};
    SCOPED_TRACE(describe(b));
    fill_random(b, gen);
    std::vector<SamplingRow> params;
    for (int32_t r = 0; r < b.rows; ++r) {
      SamplingRow row = random_row(gen);
      row.step = gen() % 1000;
      params.push_back(row);
    }
    const auto first = run(b, params);
    EXPECT_EQ(run(b, params), first) << "a second run of the same batch";
    // The same rows reversed, in a batch of their own: each row's token depends on the row alone.
    Batch reversed = b;
    std::vector<SamplingRow> reversed_params(params.rbegin(), params.rend());
    for (int32_t r = 0; r < b.rows; ++r) std::copy(b.row(r), b.row(r) + b.vocab, reversed.row(b.rows - 1 - r));
    const auto second = run(reversed, reversed_params);
    for (int32_t r = 0; r < b.rows; ++r)
      EXPECT_EQ(second[size_t(b.rows - 1 - r)], first[size_t(r)]) << "row " << r << " moved in the batch";
  }
}

TEST_F(SamplingGpuTest, DifferentStepsAndSeedsGiveDifferentTokensOnAFlatRow) {
  const uint32_t seed = fresh_seed();
  SCOPED_TRACE(seed_trace(seed));
  std::mt19937_64 gen(seed);
  const int32_t vocab = 1000, rows = 64;
  // Row r: the same seed at step r, then a fresh seed each at step 0.
  Batch b{rows, vocab, false, std::vector<float>(size_t(rows * vocab), 0.0f)};
  const uint64_t fixed_seed = gen();
  std::vector<SamplingRow> by_step, by_seed;
  for (int32_t r = 0; r < rows; ++r) {
    by_step.push_back(row_of(1.0f, 0, 1.0f, 0.0f, fixed_seed, uint64_t(r)));
    by_seed.push_back(row_of(1.0f, 0, 1.0f, 0.0f, gen(), 0));
  }
  // 64 uniform draws from 1000 ids give about 62 distinct ones; fewer than 40 has probability
  // below 1e-20.
  for (const auto& params : {by_step, by_seed}) {
    const auto tokens = run(b, params);
    const std::set<int32_t> distinct(tokens.begin(), tokens.end());
    EXPECT_GE(distinct.size(), 40u);
    for (int32_t t : tokens) EXPECT_TRUE(t >= 0 && t < vocab) << t;
  }
}

// ---- refusals -------------------------------------------------------------------------------

TEST_F(SamplingGpuTest, RejectsBadShapesAndPointers) {
  cuda::DeviceBuffer<float> logits(16);
  logits.fill_bytes(0);
  const SamplingRow row = row_of(0.0f, 0, 1.0f, 0.0f, 0, 0);
  cuda::DeviceBuffer<SamplingRow> rows{std::span<const SamplingRow>(&row, 1)};
  cuda::DeviceBuffer<int32_t> out(1);
  out.fill_bytes(0xFF);
  SampleParams good;
  good.logits = logits.data();
  good.rows = 1;
  good.vocab = 16;
  good.row_params = rows.data();
  good.out_tokens = out.data();
  auto with = [&](auto edit) {
    SampleParams p = good;
    edit(p);
    return launch_sample(p, stream_);
  };
  EXPECT_EQ(with([](SampleParams& p) { p.rows = 0; }), cudaErrorInvalidValue);
  EXPECT_EQ(with([](SampleParams& p) { p.rows = -3; }), cudaErrorInvalidValue);
  EXPECT_EQ(with([](SampleParams& p) { p.vocab = 0; }), cudaErrorInvalidValue);
  EXPECT_EQ(with([](SampleParams& p) { p.vocab = -1; }), cudaErrorInvalidValue);
  EXPECT_EQ(with([](SampleParams& p) { p.logits = nullptr; }), cudaErrorInvalidValue);
  EXPECT_EQ(with([](SampleParams& p) { p.row_params = nullptr; }), cudaErrorInvalidValue);
  EXPECT_EQ(with([](SampleParams& p) { p.out_tokens = nullptr; }), cudaErrorInvalidValue);
  sync();
  EXPECT_EQ(out.download()[0], -1) << "a refused launch wrote a token";
  EXPECT_EQ(with([](SampleParams&) {}), cudaSuccess);
  sync();
  EXPECT_EQ(out.download()[0], 0) << "sixteen zero logits: greedy takes id 0";
}

// The kernel cannot report a bad row, so rows are built through make_sampling_row, which runs
// di::validate and throws (naming the field) before anything is launched.
TEST_F(SamplingGpuTest, BadParametersAreCaughtOnTheHostBeforeLaunch) {
  auto rejected = [](float temperature, int64_t top_k, float top_p, float min_p, const std::string& field) {
    return di::testing::throws_error_with([&] { (void)row_of(temperature, top_k, top_p, min_p, 0, 0); }, {field});
  };
  EXPECT_TRUE(rejected(-1.0f, 0, 1.0f, 0.0f, "temperature"));
  EXPECT_TRUE(rejected(NAN, 0, 1.0f, 0.0f, "temperature"));
  EXPECT_TRUE(rejected(1.0f, -2, 1.0f, 0.0f, "top_k"));
  EXPECT_TRUE(rejected(1.0f, 0, 0.0f, 0.0f, "top_p"));
  EXPECT_TRUE(rejected(1.0f, 0, 1.5f, 0.0f, "top_p"));
  EXPECT_TRUE(rejected(1.0f, 0, 1.0f, -0.5f, "min_p"));
  EXPECT_TRUE(rejected(1.0f, 0, 1.0f, 2.0f, "min_p"));
  // A top_k beyond int32 saturates (it then keeps the whole vocabulary, as the reference does).
  EXPECT_EQ(row_of(1.0f, int64_t(1) << 40, 1.0f, 0.0f, 0, 0).top_k, INT32_MAX);
}

}  // namespace
}  // namespace di::sampling
