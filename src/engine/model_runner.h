#pragma once
// What the scheduler's steps run on: OpsModelRunner (engine/ops_runner.h) runs the model on CpuOps or
// CudaOps (one batched forward over the plan's pieces, then sampling); the scheduler and engine
// tests use a fake whose next token is a hash of the sequence's whole token history.
#include <cstdint>
#include <optional>
#include <vector>

#include "engine/scheduler.h"
#include "kernels/sampling/ref.h"

namespace di {

class ModelRunner {
 public:
  virtual ~ModelRunner() = default;
  // The engine's notices about a request (defaults: nothing to do). add: before its first step, with
  // its sampling parameters; drop_state: its state is gone (preempted), its next piece starts at
  // token 0; remove: it is over (finished, cancelled).
  virtual void add(int64_t id, const SamplingParams& sampling) { (void)id, (void)sampling; }
  virtual void drop_state(int64_t id) { (void)id; }
  virtual void remove(int64_t id) { (void)id; }
  // State slots the runner holds now (the engine's statistics).
  virtual int64_t live_slots() const { return 0; }
  // Runs one step: feeds every item's tokens to its slot (state and KV cache carried from the
  // item's earlier pieces), and returns one sampled token for each item whose `samples` is set, in
  // the plan's order.
  virtual std::vector<int32_t> run(const StepPlan& plan) = 0;
  // After run(): one entry per token it returned, in order; set where the request asked for
  // log-probabilities (SamplingParams::logprobs >= 0). Default: none asked or none kept.
  virtual std::vector<std::optional<TokenLogprobs>> last_logprobs() const { return {}; }
};

}  // namespace di
