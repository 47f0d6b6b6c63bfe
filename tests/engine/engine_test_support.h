#pragma once
// What the engine tests on the CPU (tests/engine/test_engine.cpp) and on the GPU
// (tests/gpu/test_engine_gpu.cpp) share: reading a request's stream, a request's greedy tokens run
// alone with each step's top-two margin, and the comparison of the two under the margin rule.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <functional>
#include <string>
#include <vector>

#include "engine/engine.h"
#include "engine/sequence.h"
#include "support/tolerance.h"

namespace di::testing {

using namespace std::chrono_literals;

struct Drained {
  std::vector<int32_t> tokens;
  std::string text;
  FinishReason reason = FinishReason::none;
  std::string error;
  int events = 0;
};

// Reads a request's events up to its final one.
inline Drained drain(Engine& engine, int64_t id) {
  Drained d;
  while (true) {
    const std::optional<TokenEvent> event = engine.next(id, 120s);
    if (!event) {
      ADD_FAILURE() << "request " << id << ": no event within 120 s";
      return d;
    }
    ++d.events;
    if (event->token >= 0) d.tokens.push_back(event->token);
    d.text += event->text;
    if (event->finished) {
      d.reason = event->reason;
      d.error = event->error;
      return d;
    }
  }
}

struct Alone {
  std::vector<int32_t> tokens;
  std::vector<double> margin;   // top logit minus the runner-up's, at each generated token
  std::vector<double> top;      // the top logit
};

inline Alone greedy_alone(const Qwen35Model& model, Ops& ops, const std::vector<int32_t>& prompt, int64_t max_tokens,
                   const std::vector<int32_t>& stop_ids = {}) {
  Alone a;
  Sequence seq(model, ops);
  std::vector<float> logits = seq.feed(prompt);
  for (int64_t i = 0; i < max_tokens; ++i) {
    std::vector<float> sorted = logits;
    std::partial_sort(sorted.begin(), sorted.begin() + 2, sorted.end(), std::greater<float>());
    const int32_t t = int32_t(argmax(logits.data(), int64_t(logits.size())));
    a.tokens.push_back(t);
    a.margin.push_back(double(sorted[0]) - double(sorted[1]));
    a.top.push_back(sorted[0]);
    if (std::find(stop_ids.begin(), stop_ids.end(), t) != stop_ids.end() || i + 1 == max_tokens) break;
    const int32_t next[1] = {t};
    logits = seq.feed(next);
  }
  return a;
}

// The engine's greedy tokens against the lone run: equal, or diverging at a token where the lone
// run's top two logits are within twice the tolerance `tol` of two runs' logits (then the rest
// differs legitimately; the golden gates' margin rule). Returns whether it diverged.
inline bool expect_greedy_matches(const std::vector<int32_t>& got, const Alone& alone, Tolerance tol,
                                  const std::string& what) {
  const size_t n = std::min(got.size(), alone.tokens.size());
  for (size_t i = 0; i < n; ++i) {
    if (got[i] == alone.tokens[i]) continue;
    const double tie = 2 * allowed_error(tol, alone.top[i]);
    EXPECT_LE(alone.margin[i], tie) << what << ": token " << i << " is " << got[i] << ", alone " << alone.tokens[i]
                                    << " with a margin of " << alone.margin[i] << " (not a near tie)";
    return true;
  }
  EXPECT_EQ(got.size(), alone.tokens.size()) << what;
  return false;
}

}  // namespace di::testing
