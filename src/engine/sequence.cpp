#include "engine/sequence.h"

#include <algorithm>
#include <numeric>

#include "core/error.h"

namespace di {

Sequence::Sequence(const Qwen35Model& model, Ops& ops) : model_(model), ops_(ops), slot_(ops.alloc_slot()) {}

Sequence::~Sequence() { ops_.free_slot(slot_); }

std::vector<float> Sequence::feed(std::span<const int32_t> tokens, bool all_logits) {
  DI_CHECK(!tokens.empty(), "Sequence::feed: no tokens");
  const int64_t n = int64_t(tokens.size());
  const int64_t max_pos = model_.config().max_position_embeddings;
  DI_CHECK(n_past_ + n <= max_pos, "sequence of {} tokens exceeds max_position_embeddings {}", n_past_ + n, max_pos);
  BatchPlan plan;
  plan.token_ids.assign(tokens.begin(), tokens.end());
  plan.positions.resize(size_t(n));
  std::iota(plan.positions.begin(), plan.positions.end(), n_past_);
  plan.seqs.push_back({0, n, n_past_, slot_});
  std::vector<int64_t> rows;
  if (all_logits) {
    rows.resize(size_t(n));
    std::iota(rows.begin(), rows.end(), 0);
  } else {
    rows.push_back(n - 1);
  }
  Tensor logits = ops_.run_forward(plan, rows, /*graphable=*/!model_.observer,
                                  [&] { return model_.forward(plan, rows, ops_); });
  n_past_ += n;
  return ops_.to_host(logits);
}

std::vector<int32_t> generate(const Qwen35Model& model, Ops& ops, std::span<const int32_t> prompt,
                              const GenerateOptions& options, const std::function<void(int32_t)>& on_token) {
  DI_CHECK(!prompt.empty(), "generate: the prompt is empty");
  DI_CHECK(options.max_tokens >= 0, "generate: max_tokens must be >= 0, found {}", options.max_tokens);
  validate(options.sampling);
  const int64_t vocab = model.config().vocab_size;
  Sequence seq(model, ops);
  std::vector<float> logits;
  const int64_t piece = options.prefill_chunk > 0 ? options.prefill_chunk : int64_t(prompt.size());
  for (size_t i = 0; i < prompt.size(); i += size_t(piece))
    logits = seq.feed(prompt.subspan(i, std::min(prompt.size() - i, size_t(piece))));
  std::mt19937_64 rng(options.sampling.seed);
  std::vector<int32_t> out;
  for (int64_t step = 0; step < options.max_tokens; ++step) {
    const int32_t token = int32_t(sample_token(logits.data(), vocab, options.sampling, rng));
    out.push_back(token);
    if (on_token) on_token(token);
    const bool stop = std::find(options.stop_ids.begin(), options.stop_ids.end(), token) != options.stop_ids.end();
    if (stop || step + 1 == options.max_tokens) break;
    const int32_t next[1] = {token};
    logits = seq.feed(next);
  }
  return out;
}

}  // namespace di
