// The engine's state handling: a prefill split at arbitrary points (conv state, recurrent state and
// KV cache carried between pieces) equals the whole prefill; prefill followed by decode equals a
// longer prefill; sequences batched together equal each run alone. Float32 precision, so the only
// differences are float32 summation order (kF32Reorder for states, kF32ReorderLogit for logits).
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <numeric>
#include <random>

#include "engine/sequence.h"
#include "support/tiny_model_fixture.h"
#include "support/tolerance.h"

namespace di {
namespace {

using testing::all_close;
using testing::kF32Reorder;

std::vector<int32_t> random_tokens(int64_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<int32_t> id(0, 248043);
  std::vector<int32_t> out(static_cast<size_t>(n));
  for (auto& t : out) t = id(rng);
  return out;
}

class StateEquivalence : public ::testing::Test {
 protected:
  StateEquivalence()
      : config_(testing::tiny_model().config),
        model_(config_, testing::tiny_model().weights),
        ops_(config_, Precision::f32),
        vocab_(config_.vocab_size) {
    const uint64_t seed = std::random_device{}();
    tokens_ = random_tokens(200, seed);
    trace_ = "token seed " + std::to_string(seed);
  }

  // Every piece of per-sequence state must agree.
  void expect_same_state(int slot_a, int slot_b, const std::string& what) {
    const auto& a = ops_.slot_state(slot_a);
    const auto& b = ops_.slot_state(slot_b);
    for (size_t l = 0; l < a.conv.size(); ++l) {
      EXPECT_TRUE(all_close(a.conv[l], b.conv[l], kF32Reorder, what + ": conv state of GDN layer " + std::to_string(l)));
      EXPECT_TRUE(all_close(a.recurrent[l], b.recurrent[l], kF32Reorder,
                            what + ": recurrent state of GDN layer " + std::to_string(l)));
    }
    for (size_t l = 0; l < a.keys.size(); ++l) {
      EXPECT_TRUE(all_close(a.keys[l], b.keys[l], kF32Reorder, what + ": keys of attention layer " + std::to_string(l)));
      EXPECT_TRUE(all_close(a.values[l], b.values[l], kF32Reorder, what + ": values of attention layer " + std::to_string(l)));
    }
  }

  const ModelConfig& config_;
  Qwen35Model model_;
  CpuOps ops_;
  int64_t vocab_;
  std::vector<int32_t> tokens_;
  std::string trace_;
};

TEST_F(StateEquivalence, SplitPrefillEqualsWholePrefill) {
  SCOPED_TRACE(trace_);
  Sequence whole(model_, ops_);
  const std::vector<float> whole_logits = whole.feed(tokens_);
  // Split points on both sides of the 64-token chunk boundaries, single tokens, and an uneven mix.
  const std::vector<std::vector<int64_t>> splits = {{1}, {37}, {63}, {64}, {65}, {3, 4, 5}, {100, 101, 150}, {64, 128, 192}};
  for (const auto& points : splits) {
    std::string name = "split at";
    for (int64_t p : points) name += fmt::format(" {}", p);
    SCOPED_TRACE(name);
    Sequence pieces(model_, ops_);
    std::vector<float> logits;
    int64_t begin = 0;
    for (size_t i = 0; i <= points.size(); ++i) {
      const int64_t end = i < points.size() ? points[i] : int64_t(tokens_.size());
      logits = pieces.feed(std::span<const int32_t>(tokens_).subspan(size_t(begin), size_t(end - begin)));
      begin = end;
    }
    EXPECT_EQ(pieces.n_past(), whole.n_past());
    EXPECT_TRUE(all_close(logits, whole_logits, testing::kF32ReorderLogit, name + ": last-token logits"));
    expect_same_state(pieces.slot(), whole.slot(), name);
  }
}

TEST_F(StateEquivalence, PrefillThenDecodeEqualsLongerPrefill) {
  SCOPED_TRACE(trace_);
  for (int64_t prompt : {1, 2, 63, 64, 65, 127, 128}) {
    SCOPED_TRACE("prompt of " + std::to_string(prompt) + " tokens");
    const int64_t total = prompt + 6;
    const std::span<const int32_t> all(tokens_.data(), size_t(total));
    Sequence longer(model_, ops_);
    const std::vector<float> reference = longer.feed(all, /*all_logits=*/true);

    Sequence stepwise(model_, ops_);
    std::vector<float> logits = stepwise.feed(all.first(size_t(prompt)));
    for (int64_t t = prompt;; ++t) {
      const std::vector<float> expected(reference.begin() + (t - 1) * vocab_, reference.begin() + t * vocab_);
      EXPECT_TRUE(all_close(logits, expected, testing::kF32ReorderLogit, "logits after " + std::to_string(t) + " tokens"));
      if (t == total) break;
      logits = stepwise.feed(all.subspan(size_t(t), 1));  // one decode step (recurrent form)
    }
    expect_same_state(stepwise.slot(), longer.slot(), "decode vs prefill");
  }
}

TEST_F(StateEquivalence, BatchedSequencesEqualEachAlone) {
  SCOPED_TRACE(trace_);
  // Three sequences of different lengths and histories in one step: two fresh prefills and one
  // continuing from 70 tokens of earlier context.
  const std::vector<int64_t> lengths = {65, 1, 30};
  const int64_t history = 70;
  std::vector<std::vector<int32_t>> prompts;
  for (size_t i = 0; i < lengths.size(); ++i) prompts.push_back(random_tokens(lengths[i], 1000 + i));
  const std::vector<int32_t> context = random_tokens(history, 77);

  std::vector<std::vector<float>> alone;
  std::vector<int> alone_slots;
  std::vector<std::unique_ptr<Sequence>> keep;
  for (size_t i = 0; i < prompts.size(); ++i) {
    keep.push_back(std::make_unique<Sequence>(model_, ops_));
    if (i == 2) keep.back()->feed(context);
    alone.push_back(keep.back()->feed(prompts[i], /*all_logits=*/true));
    alone_slots.push_back(keep.back()->slot());
  }

  Sequence third_context(model_, ops_);  // the continuing sequence's history, in its own slot
  third_context.feed(context);
  BatchPlan plan;
  std::vector<int> slots = {ops_.alloc_slot(), ops_.alloc_slot(), third_context.slot()};
  std::vector<int64_t> rows;
  for (size_t i = 0; i < prompts.size(); ++i) {
    const int64_t n_past = i == 2 ? history : 0;
    plan.seqs.push_back({plan.n_tokens(), lengths[i], n_past, slots[i]});
    for (int64_t t = 0; t < lengths[i]; ++t) {
      rows.push_back(plan.n_tokens());
      plan.token_ids.push_back(prompts[i][t]);
      plan.positions.push_back(n_past + t);
    }
  }
  const std::vector<float> batched = ops_.to_host(model_.forward(plan, rows, ops_));
  int64_t row = 0;
  for (size_t i = 0; i < prompts.size(); ++i) {
    const std::vector<float> mine(batched.begin() + row * vocab_, batched.begin() + (row + lengths[i]) * vocab_);
    EXPECT_TRUE(all_close(mine, alone[i], testing::kF32ReorderLogit, "sequence " + std::to_string(i) + " logits"));
    expect_same_state(slots[i], alone_slots[i], "sequence " + std::to_string(i));
    row += lengths[i];
  }
  ops_.free_slot(slots[0]);
  ops_.free_slot(slots[1]);
}

TEST_F(StateEquivalence, ChunkedGenerateEqualsWholeGenerate) {
  SCOPED_TRACE(trace_);
  GenerateOptions options;
  options.max_tokens = 8;
  const std::span<const int32_t> prompt(tokens_.data(), 150);
  const std::vector<int32_t> whole = generate(model_, ops_, prompt, options);
  options.prefill_chunk = 64;
  EXPECT_EQ(generate(model_, ops_, prompt, options), whole);
  options.prefill_chunk = 17;
  EXPECT_EQ(generate(model_, ops_, prompt, options), whole);
}

TEST_F(StateEquivalence, FreedSlotsAreReusedZeroed) {
  const std::span<const int32_t> prompt(tokens_.data(), 20);
  std::vector<float> first_logits;
  int first_slot = -1;
  {
    Sequence first(model_, ops_);
    first_logits = first.feed(prompt);
    first.feed(std::span<const int32_t>(tokens_.data() + 20, 5));  // leave state behind
    first_slot = first.slot();
  }
  Sequence second(model_, ops_);
  EXPECT_EQ(second.slot(), first_slot) << "the freed slot is taken again";
  EXPECT_TRUE(all_close(second.feed(prompt), first_logits, testing::kExactF32, "a reused slot starts from zero state"));
}

}  // namespace
}  // namespace di
