#pragma once
// What the scheduler's steps run on: the Engine implements it with CudaOps (one batched forward over
// the plan's pieces, then sampling); the scheduler tests implement it with a fake whose next token is
// a hash of the sequence's whole token history.
#include <cstdint>
#include <vector>

#include "engine/scheduler.h"

namespace di {

class ModelRunner {
 public:
  virtual ~ModelRunner() = default;
  // Runs one step: feeds every item's tokens to its slot (state and KV cache carried from the
  // item's earlier pieces), and returns one sampled token for each item whose `samples` is set, in
  // the plan's order.
  virtual std::vector<int32_t> run(const StepPlan& plan) = 0;
};

}  // namespace di
