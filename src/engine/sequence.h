#pragma once
// One sequence run through the model step by step: prefill in one or several pieces (the GDN conv
// and recurrent state and the KV cache carried between them), then decode one token at a time.
// The building block of generate/score and of the equivalence tests.
#include <cstdint>
#include <functional>
#include <span>
#include <vector>

#include "engine/qwen35_model.h"
#include "kernels/sampling/ref.h"

namespace di {

class Sequence {
 public:
  Sequence(const Qwen35Model& model, Ops& ops);
  ~Sequence();
  Sequence(const Sequence&) = delete;
  Sequence& operator=(const Sequence&) = delete;

  // Feeds tokens; returns the logits [rows, vocab] of the last token, or of every token fed when
  // all_logits is set. Tokens may be fed in any number of pieces.
  std::vector<float> feed(std::span<const int32_t> tokens, bool all_logits = false);

  int64_t n_past() const { return n_past_; }
  int slot() const { return slot_; }

 private:
  const Qwen35Model& model_;
  Ops& ops_;
  int slot_;
  int64_t n_past_ = 0;
};

struct GenerateOptions {
  int64_t max_tokens = 32;
  SamplingParams sampling;
  std::vector<int64_t> stop_ids;  // generation ends after emitting one of these
  int64_t prefill_chunk = 0;      // > 0: prefill the prompt in pieces of this many tokens
};

// Greedy or sampled continuation of `prompt`; calls on_token for each new token as it comes and
// returns them all.
std::vector<int32_t> generate(const Qwen35Model& model, Ops& ops, std::span<const int32_t> prompt,
                              const GenerateOptions& options,
                              const std::function<void(int32_t)>& on_token = nullptr);

}  // namespace di
