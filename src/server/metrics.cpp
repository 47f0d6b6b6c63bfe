#include "server/metrics.h"

#include <fmt/format.h>

namespace di::server {

Histogram::Histogram(std::vector<double> bounds) : bounds_(std::move(bounds)), counts_(bounds_.size() + 1, 0) {}

void Histogram::observe(double value) {
  size_t i = 0;
  while (i < bounds_.size() && value > bounds_[i]) ++i;
  ++counts_[i];
  sum_ += value;
  ++count_;
}

std::string Histogram::render(const std::string& name) const {
  std::string out = fmt::format("# TYPE {} histogram\n", name);
  int64_t cumulative = 0;
  for (size_t i = 0; i < bounds_.size(); ++i) {
    cumulative += counts_[i];
    out += fmt::format("{}_bucket{{le=\"{}\"}} {}\n", name, bounds_[i], cumulative);
  }
  out += fmt::format("{}_bucket{{le=\"+Inf\"}} {}\n{}_sum {}\n{}_count {}\n", name, count_, name, sum_, name, count_);
  return out;
}

Metrics::Metrics()
    : ttft_({0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60}),
      tpot_({0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1}) {}

void Metrics::count_request(const std::string& endpoint, int status) {
  std::lock_guard lock(mutex_);
  ++requests_[{endpoint, status}];
}

void Metrics::add_tokens(int64_t prompt, int64_t generated) {
  std::lock_guard lock(mutex_);
  prompt_tokens_ += prompt;
  generation_tokens_ += generated;
}

void Metrics::observe_ttft(double seconds) {
  std::lock_guard lock(mutex_);
  ttft_.observe(seconds);
}

void Metrics::observe_tpot(double seconds) {
  std::lock_guard lock(mutex_);
  tpot_.observe(seconds);
}

std::string Metrics::render(const EngineStats* e) const {
  std::lock_guard lock(mutex_);
  std::string out = "# TYPE deltainfer_requests_total counter\n";
  for (const auto& [key, n] : requests_)
    out += fmt::format("deltainfer_requests_total{{endpoint=\"{}\",status=\"{}\"}} {}\n", key.first, key.second, n);
  out += fmt::format("# TYPE deltainfer_prompt_tokens_total counter\ndeltainfer_prompt_tokens_total {}\n", prompt_tokens_);
  out += fmt::format("# TYPE deltainfer_generation_tokens_total counter\ndeltainfer_generation_tokens_total {}\n",
                     generation_tokens_);
  out += ttft_.render("deltainfer_time_to_first_token_seconds");
  out += tpot_.render("deltainfer_time_per_output_token_seconds");
  if (e != nullptr) {
    auto gauge = [&](const char* name, int64_t v) { out += fmt::format("# TYPE {} gauge\n{} {}\n", name, name, v); };
    gauge("deltainfer_requests_waiting", e->waiting);
    gauge("deltainfer_requests_running", e->running);
    gauge("deltainfer_kv_blocks_free", e->free_kv_blocks);
    gauge("deltainfer_kv_blocks_total", e->total_kv_blocks);
    gauge("deltainfer_state_slots_free", e->free_slots);
    gauge("deltainfer_state_slots_total", e->total_slots);
    gauge("deltainfer_runner_slots", e->runner_slots);
    gauge("deltainfer_engine_steps", e->steps);
    gauge("deltainfer_preemptions", e->preemptions);
  }
  return out;
}

}  // namespace di::server
