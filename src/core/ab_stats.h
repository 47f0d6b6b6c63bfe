#pragma once
// Statistics of an interleaved A/B benchmark (deltainfer bench ab): rounds of A, B, B, A runs of one
// workload, each run giving one sample of a metric. The comparison is B against A, round by round,
// so that drift over the run (clocks, temperature, other tenants) cancels within a round.
#include <cstdint>
#include <string>
#include <vector>

namespace di {

struct Spread {
  double median = 0, min = 0, max = 0, p25 = 0, p75 = 0;
  int64_t count = 0;
};
Spread spread_of(std::vector<double> samples);

struct AbComparison {
  Spread a, b;
  // B / A: the geometric mean over rounds of mean(B in the round) / mean(A in the round), with a 95%
  // Student's t interval over the rounds' log ratios. With one round the interval is that round's
  // extremes: (min B / max A, max B / min A).
  double ratio = 1, ratio_low = 1, ratio_high = 1;
  bool measurable = false;  // the interval excludes 1
  std::string verdict;      // "B is 1.12x A (1.08-1.16)", or "no measurable difference (0.97-1.04)"
};

// `a_rounds[r]` and `b_rounds[r]` hold round r's samples of A and of B (two each in an A, B, B, A
// round); every sample must be positive. Whether a ratio above 1 is better (tokens/s) or worse (a
// latency) is the caller's to say.
AbComparison compare_ab(const std::vector<std::vector<double>>& a_rounds,
                        const std::vector<std::vector<double>>& b_rounds);

}  // namespace di
