#pragma once
// The server's Prometheus metrics: request counts by endpoint and status, prompt and generated
// tokens, TTFT and TPOT histograms, and the engine's queue, slots and KV blocks read at scrape time.
#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "engine/engine.h"

namespace di::server {

class Histogram {
 public:
  explicit Histogram(std::vector<double> bounds);
  void observe(double value);
  // The exposition lines of metric `name` (_bucket{le=...}, _sum, _count).
  std::string render(const std::string& name) const;

 private:
  std::vector<double> bounds_;
  std::vector<int64_t> counts_;  // per bucket (not cumulative)
  double sum_ = 0;
  int64_t count_ = 0;
};

class Metrics {
 public:
  Metrics();
  void count_request(const std::string& endpoint, int status);
  void add_tokens(int64_t prompt, int64_t generated);
  void observe_ttft(double seconds);
  void observe_tpot(double seconds);
  // The whole exposition, with the engine's state now (none while loading).
  std::string render(const EngineStats* engine) const;

 private:
  mutable std::mutex mutex_;
  std::map<std::pair<std::string, int>, int64_t> requests_;
  int64_t prompt_tokens_ = 0, generation_tokens_ = 0;
  Histogram ttft_, tpot_;
};

}  // namespace di::server
