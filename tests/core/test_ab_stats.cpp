// The A/B statistics: a clear difference is measured with an interval that excludes 1 and holds the
// true ratio; two draws of one distribution give "no measurable difference"; one round falls back to
// its extremes; bad samples are refused.
#include <gtest/gtest.h>

#include <random>

#include "core/ab_stats.h"
#include "support/expect_error.h"
#include "support/seed.h"

namespace di {
namespace {

// `rounds` A, B, B, A rounds: A ~ base * (1 + noise), B ~ base * ratio * (1 + noise), with a drift
// over rounds that the pairing must cancel.
void make_rounds(std::mt19937& rng, int rounds, double ratio, double noise, std::vector<std::vector<double>>& a,
                 std::vector<std::vector<double>>& b) {
  std::normal_distribution<double> n(0.0, noise);
  a.assign(size_t(rounds), {}), b.assign(size_t(rounds), {});
  for (int r = 0; r < rounds; ++r) {
    const double base = 100.0 * (1.0 + 0.05 * r);  // 5% drift per round
    for (int i = 0; i < 2; ++i) {
      a[size_t(r)].push_back(base * (1 + n(rng)));
      b[size_t(r)].push_back(base * ratio * (1 + n(rng)));
    }
  }
}

TEST(AbStats, AClearDifferenceIsMeasuredDespiteDrift) {
  const uint32_t seed = testing::fresh_seed();
  SCOPED_TRACE(testing::seed_trace(seed));
  std::mt19937 rng(seed);
  std::vector<std::vector<double>> a, b;
  make_rounds(rng, 6, 1.10, 0.005, a, b);
  const AbComparison c = compare_ab(a, b);
  EXPECT_TRUE(c.measurable) << c.verdict;
  EXPECT_NEAR(c.ratio, 1.10, 0.01);
  // The interval sits around the true ratio (within 1%: a 95% interval misses it now and then).
  EXPECT_LT(c.ratio_low, 1.10 * 1.01);
  EXPECT_GT(c.ratio_high, 1.10 * 0.99);
  EXPECT_GT(c.ratio_low, 1.0);
  EXPECT_EQ(c.verdict.rfind("B is ", 0), 0u) << c.verdict;
  EXPECT_EQ(c.a.count, 12);
  EXPECT_LE(c.a.min, c.a.p25);
  EXPECT_LE(c.a.p25, c.a.median);
  EXPECT_LE(c.a.median, c.a.p75);
  EXPECT_LE(c.a.p75, c.a.max);
}

TEST(AbStats, OneDistributionGivesNoMeasurableDifference) {
  const uint32_t seed = testing::fresh_seed();
  SCOPED_TRACE(testing::seed_trace(seed));
  std::mt19937 rng(seed);
  int measurable = 0;
  constexpr int kTrials = 400;
  for (int trial = 0; trial < kTrials; ++trial) {
    std::vector<std::vector<double>> a, b;
    make_rounds(rng, 4, 1.0, 0.02, a, b);
    const AbComparison c = compare_ab(a, b);
    EXPECT_LE(c.ratio_low, c.ratio);
    EXPECT_GE(c.ratio_high, c.ratio);
    if (c.measurable) ++measurable;
    else EXPECT_NE(c.verdict.find("no measurable difference"), std::string::npos) << c.verdict;
  }
  // A 95% interval: about 20 false differences in 400. More than 40 has a chance of 1.4e-5 (binomial
  // tail); an interval that claimed 95% but held 85% would pass with a chance of 0.2%. (40 trials with
  // a bound of 6 had a chance of 0.34%, and a fresh draw hit it.)
  EXPECT_LE(measurable, kTrials / 10);
}

TEST(AbStats, OneRoundUsesItsExtremes) {
  const AbComparison c = compare_ab({{100, 104}}, {{110, 112}});
  EXPECT_DOUBLE_EQ(c.ratio_low, 110.0 / 104.0);
  EXPECT_DOUBLE_EQ(c.ratio_high, 112.0 / 100.0);
  EXPECT_TRUE(c.measurable);
  const AbComparison overlap = compare_ab({{100, 110}}, {{105, 108}});
  EXPECT_FALSE(overlap.measurable) << overlap.verdict;
}

TEST(AbStats, BadSamplesAreRefused) {
  using testing::throws_error_with;
  EXPECT_TRUE(throws_error_with([] { compare_ab({}, {}); }, {"0 rounds of A"}));
  EXPECT_TRUE(throws_error_with([] { compare_ab({{1}}, {{1}, {2}}); }, {"1 rounds of A against 2 of B"}));
  EXPECT_TRUE(throws_error_with([] { compare_ab({{1}}, {{}}); }, {"round 0 lacks a sample"}));
  EXPECT_TRUE(throws_error_with([] { compare_ab({{0}}, {{1}}); }, {"of A is not positive"}));
  EXPECT_TRUE(throws_error_with([] { compare_ab({{1}}, {{-2}}); }, {"of B is not positive"}));
}

}  // namespace
}  // namespace di
