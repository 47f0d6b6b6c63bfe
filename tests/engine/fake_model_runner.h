#pragma once
// A stand-in for the model in the scheduler tests: each slot keeps a running hash of every token fed
// to it, and a sampled token is a function of that hash, i.e. of the sequence's whole history. It
// checks what a real model's state would need: a piece that continues a sequence (start > 0) lands
// in the slot that holds exactly that sequence's first `start` tokens; a slot serves one item per
// step. So a scheduler that lost or mixed up state, or re-prefilled the wrong tokens after a
// preemption, produces different tokens than the sequence run alone (expected_output).
#include <cstdint>
#include <vector>

#include "core/error.h"
#include "engine/model_runner.h"
#include "engine/scheduler.h"

namespace di::testing {

// A scheduler configuration for the tests: slots, KV blocks of block_size tokens, the step budget and
// the queue bound; max_model_len is left 0 (the whole KV cache).
inline SchedulerConfig scheduler_config(int64_t slots, int64_t blocks, int64_t block_size, int64_t budget,
                                        int64_t max_waiting = 64) {
  SchedulerConfig c;
  c.num_state_slots = slots;
  c.num_kv_blocks = blocks;
  c.block_size = block_size;
  c.max_num_batched_tokens = budget;
  c.max_waiting = max_waiting;
  return c;
}

constexpr uint64_t kFakeHashInit = 1469598103934665603ull;  // FNV-1a offset basis

inline uint64_t fake_hash_step(uint64_t h, int32_t token) {
  const auto u = uint32_t(token);
  for (int i = 0; i < 4; ++i) {
    h ^= (u >> (8 * i)) & 0xffu;
    h *= 1099511628211ull;  // FNV-1a prime
  }
  return h;
}

inline int32_t fake_token_of(uint64_t h, int32_t vocab) {
  h ^= h >> 33;
  h *= 0xff51afd7ed558ccdull;
  h ^= h >> 33;
  return int32_t(h % uint64_t(vocab));
}

// What the fake model generates for `r` alone: greedy continuation until a stop token or
// max_new_tokens.
inline std::vector<int32_t> fake_expected_output(const Request& r, int32_t vocab) {
  uint64_t h = kFakeHashInit;
  for (int32_t t : r.prompt) h = fake_hash_step(h, t);
  std::vector<int32_t> out;
  while (int64_t(out.size()) < r.max_new_tokens) {
    const int32_t t = fake_token_of(h, vocab);
    out.push_back(t);
    bool stop = false;
    for (int32_t s : r.stop_ids) stop = stop || s == t;
    if (stop) break;
    h = fake_hash_step(h, t);
  }
  return out;
}

class FakeModelRunner final : public ModelRunner {
 public:
  FakeModelRunner(int64_t num_slots, int32_t vocab) : slots_(size_t(num_slots)), vocab_(vocab) {}

  std::vector<int32_t> run(const StepPlan& plan) override {
    std::vector<int32_t> out;
    std::vector<int64_t> used_in_step(slots_.size(), -1);
    for (const StepItem& item : plan.items) {
      DI_CHECK(item.slot >= 0 && size_t(item.slot) < slots_.size(), "fake runner: slot {} out of range", item.slot);
      DI_CHECK(used_in_step[size_t(item.slot)] < 0, "fake runner: slot {} fed twice in step {} (requests {} and {})",
               item.slot, plan.step, used_in_step[size_t(item.slot)], item.request_id);
      used_in_step[size_t(item.slot)] = item.request_id;
      DI_CHECK(!item.tokens.empty(), "fake runner: empty item for request {}", item.request_id);
      SlotState& s = slots_[size_t(item.slot)];
      if (item.start == 0) {
        s = {item.request_id, 0, kFakeHashInit};
      } else {
        DI_CHECK(s.owner == item.request_id && s.fed == item.start,
                 "fake runner: request {} continues at token {} in slot {}, which holds {} tokens of request {}",
                 item.request_id, item.start, item.slot, s.fed, s.owner);
      }
      for (int32_t t : item.tokens) s.hash = fake_hash_step(s.hash, t);
      s.fed += int64_t(item.tokens.size());
      tokens_fed_ += int64_t(item.tokens.size());
      if (item.samples) out.push_back(fake_token_of(s.hash, vocab_));
    }
    return out;
  }

  int64_t tokens_fed() const { return tokens_fed_; }

 private:
  struct SlotState {
    int64_t owner = -1;
    int64_t fed = 0;
    uint64_t hash = kFakeHashInit;
  };
  std::vector<SlotState> slots_;
  int32_t vocab_;
  int64_t tokens_fed_ = 0;
};

}  // namespace di::testing
