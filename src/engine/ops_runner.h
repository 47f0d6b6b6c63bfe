#pragma once
// The ModelRunner of a real model: one step of the scheduler's plan as one batched forward pass on
// an Ops (CpuOps or CudaOps), then one sampled token per item that asks for it.
//
// The scheduler's state slots are bookkeeping ids; the Ops keep their own slots. The runner maps a
// request to its Ops slot: allocated (zeroed) at the request's first piece, freed when the engine
// says its state is gone (preempted, cancelled, finished). Sampling is per request: its own
// parameters and its own seeded generator, so a request's tokens do not depend on what it was
// batched with, nor on a preemption (the tokens it already has are fed back, not drawn again).
#include <cstdint>
#include <functional>
#include <random>
#include <unordered_map>
#include <vector>

#include "engine/model_runner.h"
#include "engine/qwen35_model.h"
#include "kernels/sampling/ref.h"

namespace di {

class OpsModelRunner final : public ModelRunner {
 public:
  // Draws one token per row of the step's logits where they lie (CudaOps::sample: only the ids
  // cross to the host): row r with params[r], as the request's draw number steps[r] (a pure
  // function of seed and step, so a request's tokens still do not depend on its batch).
  using DeviceSampler = std::function<std::vector<int32_t>(
      const Tensor& logits, const std::vector<SamplingParams>& params, const std::vector<uint64_t>& steps)>;

  // Without a device sampler the logits come to the host and each request draws from its own
  // seeded std::mt19937_64 (kernels/sampling/ref.h).
  OpsModelRunner(const Qwen35Model& model, Ops& ops, DeviceSampler sampler = {});
  ~OpsModelRunner() override;
  OpsModelRunner(const OpsModelRunner&) = delete;
  OpsModelRunner& operator=(const OpsModelRunner&) = delete;

  // add: its sampling parameters (validated by the caller); drop_state frees its Ops slot; remove
  // frees everything the runner holds for it.
  void add(int64_t id, const SamplingParams& sampling) override;
  void drop_state(int64_t id) override;
  void remove(int64_t id) override;
  int64_t live_slots() const override;  // Ops slots held now

  std::vector<int32_t> run(const StepPlan& plan) override;
  std::vector<std::optional<TokenLogprobs>> last_logprobs() const override { return logprobs_; }

 private:
  struct Live {
    SamplingParams sampling;
    std::mt19937_64 rng;
    int ops_slot = -1;
    int64_t fed = 0;    // tokens in the slot's state
    uint64_t drawn = 0;  // tokens sampled so far (kept across a preemption: they are fed back)
  };
  Live& live(int64_t id);

  const Qwen35Model& model_;
  Ops& ops_;
  DeviceSampler sampler_;
  std::vector<std::optional<TokenLogprobs>> logprobs_;  // of the last step's tokens
  std::unordered_map<int64_t, Live> live_;
};

}  // namespace di
