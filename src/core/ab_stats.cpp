#include "core/ab_stats.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include <fmt/format.h>

#include "core/error.h"

namespace di {
namespace {

double quantile(const std::vector<double>& sorted, double q) {
  if (sorted.empty()) return 0;
  const double rank = q * double(sorted.size() - 1);
  const size_t lo = size_t(std::floor(rank)), hi = size_t(std::ceil(rank));
  return sorted[lo] + (sorted[hi] - sorted[lo]) * (rank - double(lo));
}

double mean(const std::vector<double>& v) { return std::accumulate(v.begin(), v.end(), 0.0) / double(v.size()); }

// The 97.5% quantile of Student's t with `df` degrees of freedom (the next smaller tabulated df
// above 10, which errs wide).
double t975(int df) {
  static const double small[] = {12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228};
  if (df <= 10) return small[df - 1];
  if (df < 15) return 2.228;
  if (df < 20) return 2.131;
  if (df < 30) return 2.086;
  if (df < 60) return 2.042;
  return 2.000;
}

}  // namespace

Spread spread_of(std::vector<double> samples) {
  Spread s;
  if (samples.empty()) return s;
  std::sort(samples.begin(), samples.end());
  s.count = int64_t(samples.size());
  s.min = samples.front(), s.max = samples.back();
  s.median = quantile(samples, 0.5), s.p25 = quantile(samples, 0.25), s.p75 = quantile(samples, 0.75);
  return s;
}

AbComparison compare_ab(const std::vector<std::vector<double>>& a_rounds,
                        const std::vector<std::vector<double>>& b_rounds) {
  DI_CHECK(!a_rounds.empty() && a_rounds.size() == b_rounds.size(), "A/B: {} rounds of A against {} of B",
           a_rounds.size(), b_rounds.size());
  std::vector<double> all_a, all_b, log_ratio;
  for (size_t r = 0; r < a_rounds.size(); ++r) {
    DI_CHECK(!a_rounds[r].empty() && !b_rounds[r].empty(), "A/B: round {} lacks a sample", r);
    for (double x : a_rounds[r]) DI_CHECK(x > 0 && std::isfinite(x), "A/B: sample {} of A is not positive", x);
    for (double x : b_rounds[r]) DI_CHECK(x > 0 && std::isfinite(x), "A/B: sample {} of B is not positive", x);
    all_a.insert(all_a.end(), a_rounds[r].begin(), a_rounds[r].end());
    all_b.insert(all_b.end(), b_rounds[r].begin(), b_rounds[r].end());
    log_ratio.push_back(std::log(mean(b_rounds[r]) / mean(a_rounds[r])));
  }
  AbComparison c;
  c.a = spread_of(all_a), c.b = spread_of(all_b);
  c.ratio = std::exp(mean(log_ratio));
  if (log_ratio.size() == 1) {
    c.ratio_low = c.b.min / c.a.max;
    c.ratio_high = c.b.max / c.a.min;
  } else {
    // Student's t interval on the per-round log ratios: right for few rounds, where a bootstrap
    // over them is too narrow.
    const double n = double(log_ratio.size()), m = mean(log_ratio);
    double ss = 0;
    for (double x : log_ratio) ss += (x - m) * (x - m);
    const double half = t975(int(log_ratio.size()) - 1) * std::sqrt(ss / (n - 1) / n);
    c.ratio_low = std::exp(m - half), c.ratio_high = std::exp(m + half);
  }
  c.measurable = c.ratio_low > 1 || c.ratio_high < 1;
  c.verdict = c.measurable ? fmt::format("B is {:.3f}x A ({:.3f}-{:.3f})", c.ratio, c.ratio_low, c.ratio_high)
                           : fmt::format("no measurable difference ({:.3f}-{:.3f})", c.ratio_low, c.ratio_high);
  return c;
}

}  // namespace di
