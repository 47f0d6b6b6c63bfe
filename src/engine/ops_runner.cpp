#include "engine/ops_runner.h"

#include "core/error.h"

namespace di {

OpsModelRunner::OpsModelRunner(const Qwen35Model& model, Ops& ops, DeviceSampler sampler)
    : model_(model), ops_(ops), sampler_(std::move(sampler)) {}

OpsModelRunner::~OpsModelRunner() {
  for (auto& [id, l] : live_)
    if (l.ops_slot >= 0) ops_.free_slot(l.ops_slot);
}

void OpsModelRunner::add(int64_t id, const SamplingParams& sampling) {
  DI_CHECK(!live_.contains(id), "OpsModelRunner: request {} is already registered", id);
  live_.emplace(id, Live{sampling, std::mt19937_64(sampling.seed)});
}

OpsModelRunner::Live& OpsModelRunner::live(int64_t id) {
  auto it = live_.find(id);
  DI_CHECK(it != live_.end(), "OpsModelRunner: request {} is not registered", id);
  return it->second;
}

void OpsModelRunner::drop_state(int64_t id) {
  Live& l = live(id);
  if (l.ops_slot >= 0) ops_.free_slot(l.ops_slot);
  l.ops_slot = -1;
  l.fed = 0;
}

void OpsModelRunner::remove(int64_t id) {
  drop_state(id);
  live_.erase(id);
}

int64_t OpsModelRunner::live_slots() const {
  int64_t n = 0;
  for (const auto& [id, l] : live_) n += l.ops_slot >= 0;
  return n;
}

std::vector<int32_t> OpsModelRunner::run(const StepPlan& step) {
  if (step.empty()) return {};
  BatchPlan plan;
  std::vector<int64_t> rows;
  std::vector<Live*> samplers;
  for (const StepItem& item : step.items) {
    Live& l = live(item.request_id);
    if (item.start == 0 && l.ops_slot >= 0) drop_state(item.request_id);  // prefilled again from scratch
    DI_CHECK(item.start == l.fed, "OpsModelRunner: request {} continues at token {}, its state holds {}",
             item.request_id, item.start, l.fed);
    if (l.ops_slot < 0) l.ops_slot = ops_.alloc_slot();
    const int64_t first = plan.n_tokens(), n = int64_t(item.tokens.size());
    plan.token_ids.insert(plan.token_ids.end(), item.tokens.begin(), item.tokens.end());
    for (int64_t i = 0; i < n; ++i) plan.positions.push_back(item.start + i);
    plan.seqs.push_back({first, n, item.start, l.ops_slot});
    l.fed += n;
    if (item.samples) {
      rows.push_back(first + n - 1);
      samplers.push_back(&l);
    }
  }
  Tensor logits = ops_.run_forward(plan, rows, /*graphable=*/!model_.observer,
                                  [&] { return model_.forward(plan, rows, ops_); });
  logprobs_.assign(rows.size(), std::nullopt);
  if (rows.empty()) return {};
  const int64_t vocab = model_.config().vocab_size;
  std::vector<int32_t> tokens;
  std::vector<float> host;  // the logits on the host (host sampling) or empty
  if (sampler_) {
    std::vector<SamplingParams> params;
    std::vector<uint64_t> steps;
    for (Live* l : samplers) {
      params.push_back(l->sampling);
      steps.push_back(l->drawn++);
    }
    tokens = sampler_(logits, params, steps);
    DI_CHECK(tokens.size() == rows.size(), "OpsModelRunner: {} tokens sampled for {} rows", tokens.size(), rows.size());
  } else {
    host = ops_.to_host(logits);
    DI_CHECK(int64_t(host.size()) == int64_t(rows.size()) * vocab, "OpsModelRunner: {} logits for {} rows of {}",
             host.size(), rows.size(), vocab);
    tokens.reserve(rows.size());
    for (size_t r = 0; r < rows.size(); ++r)
      tokens.push_back(int32_t(sample_token(host.data() + r * size_t(vocab), vocab, samplers[r]->sampling, samplers[r]->rng)));
    for (Live* l : samplers) ++l->drawn;
  }
  // Log-probabilities where a request asked: from the host copy, or that one row brought down.
  for (size_t r = 0; r < rows.size(); ++r) {
    const int32_t top_n = samplers[r]->sampling.logprobs;
    if (top_n < 0) continue;
    std::vector<float> row;
    if (host.empty()) row = ops_.to_host(ops_.gather_rows(logits, {int64_t(r)}));
    const float* values = host.empty() ? row.data() : host.data() + r * size_t(vocab);
    logprobs_[r] = token_logprobs(values, vocab, tokens[r], top_n);
  }
  return tokens;
}

}  // namespace di
