// The serving engine on the GPU (OpsModelRunner over CudaOps, bf16, the tiny model): 64 concurrent
// requests with prompts of 1 to 8000 tokens, then 16 short prompts with 24 to 32 tokens to generate
// (a decode-heavy wave: the first one's prefill leaves few steps that only decode), give the greedy
// tokens each gives alone, with decode graphs on and off and step budgets of 64, 512 and 8192 tokens. A divergence is accepted only at a
// step where the lone run's top two logits are within twice the bf16 run-to-run tolerance
// (kBf16RunLogit: the golden gates' margin rule). Afterwards every slot and block is free, and with
// graphs on, decode steps ran from graphs (alone and in the engine); with them off, none did.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <random>
#include <string>
#include <tuple>

#include "engine/cuda_ops.h"
#include "engine/engine.h"
#include "engine/engine_test_support.h"
#include "engine/ops_runner.h"
#include "gpu/gpu_test.h"
#include "support/tiny_model_fixture.h"
#include "support/tolerance.h"

namespace di {
namespace {

class EngineGpu : public testing::SeededGpuTest<std::mt19937>,
                  public ::testing::WithParamInterface<std::tuple<int64_t, bool>> {};

// With graphs on, every decode step but each batch size's first (eager: it sizes the graph's arena)
// ran from a graph; with them off, none did and none was captured. There were decode steps either way.
void expect_graph_use(const CudaOps& ops, bool graphs, const std::string& where) {
  const CudaOps::DecodeStepCounts c = ops.decode_step_counts();
  EXPECT_GT(c.steps, 0u) << where << ": no decode step";
  if (graphs) {
    EXPECT_EQ(c.graphed, c.steps - c.batch_sizes) << where << ": decode steps that ran eagerly with graphs on";
    EXPECT_GT(ops.captured_graphs(), 0u) << where;
  } else {
    EXPECT_EQ(c.graphed, 0u) << where;
    EXPECT_EQ(ops.captured_graphs(), 0u) << where;
  }
}

TEST_P(EngineGpu, SixtyFourConcurrentRequestsGiveTheirAloneGreedyTokens) {
  const auto [budget, graphs] = GetParam();
  SCOPED_TRACE(testing::seed_trace(seed_) + ", budget " + std::to_string(budget) + (graphs ? ", graphs" : ", eager"));
  const ModelConfig& c = testing::tiny_model().config;
  const Qwen35Model model(c, testing::tiny_model().weights);
  auto request = [&](int64_t len, int64_t min_tokens, int64_t max_tokens) {
    GenerationRequest g;
    for (int64_t i = 0; i < len; ++i)
      g.prompt.push_back(std::uniform_int_distribution<int32_t>(0, int32_t(c.vocab_size - 1))(rng_));
    g.max_tokens = std::uniform_int_distribution<int64_t>(min_tokens, max_tokens)(rng_);
    return g;
  };

  // The mixed wave: chunk boundaries, the longest prompt, and random lengths between. Its prefill
  // runs almost to its end, so few of its steps are decode steps alone (none at a budget of 64).
  std::vector<int64_t> lengths = {1, 2, 63, 64, 65, 127, 128, 129, 511, 4096, 8000};
  while (lengths.size() < 64) lengths.push_back(std::uniform_int_distribution<int64_t>(1, 8000)(rng_));
  std::vector<GenerationRequest> mixed;
  for (int64_t len : lengths) mixed.push_back(request(len, 1, 16));
  // The decode wave, after it: 16 prompts of 1 to 8 tokens and 24 to 32 tokens each, so that at every
  // budget more than twenty steps decode the whole batch (from graphs, when they are on).
  std::vector<GenerationRequest> decode_heavy;
  for (int i = 0; i < 16; ++i)
    decode_heavy.push_back(request(std::uniform_int_distribution<int64_t>(1, 8)(rng_), 24, 32));
  int64_t total = 0;
  for (const std::vector<GenerationRequest>* wave : {&mixed, &decode_heavy})
    for (const GenerationRequest& g : *wave) total += int64_t(g.prompt.size()) + g.max_tokens;

  std::vector<testing::Alone> alone_mixed, alone_decode;
  {
    CudaOps ops(c, testing::tiny_model().weights,
                CudaOpsOptions{.max_slots = 1, .kv_cache_tokens = 8192 + 64, .decode_graphs = graphs});
    for (const GenerationRequest& g : mixed) alone_mixed.push_back(testing::greedy_alone(model, ops, g.prompt, g.max_tokens));
    for (const GenerationRequest& g : decode_heavy)
      alone_decode.push_back(testing::greedy_alone(model, ops, g.prompt, g.max_tokens));
    expect_graph_use(ops, graphs, "alone");
  }

  const int64_t blocks = (total + 64 * 64) / 64;  // room for all at once, and a block of slack each
  CudaOps ops(c, testing::tiny_model().weights,
              CudaOpsOptions{.max_slots = 64, .kv_cache_tokens = blocks * 64, .decode_graphs = graphs});
  OpsModelRunner runner(model, ops);
  SchedulerConfig sc;
  sc.num_state_slots = 64;
  sc.num_kv_blocks = blocks;
  sc.block_size = 64;
  sc.max_num_batched_tokens = budget;
  sc.max_model_len = 8000 + 32;
  Engine engine(runner, c.vocab_size, EngineOptions{.scheduler = sc});
  int diverged = 0, equal = 0;
  auto run_wave = [&](const std::vector<GenerationRequest>& wave, const std::vector<testing::Alone>& alone) {
    std::vector<int64_t> ids;
    for (const GenerationRequest& g : wave) {
      const Submitted s = engine.submit(g);
      ASSERT_TRUE(s.result.accepted()) << s.result.reason;
      ids.push_back(s.id);
    }
    for (size_t i = 0; i < ids.size(); ++i) {
      const testing::Drained d = testing::drain(engine, ids[i]);
      EXPECT_EQ(d.reason, FinishReason::length);
      const bool div = testing::expect_greedy_matches(d.tokens, alone[i], testing::kBf16RunLogit,
                                                      "prompt of " + std::to_string(wave[i].prompt.size()) + " tokens");
      diverged += div;
      equal += !div;
    }
  };
  run_wave(mixed, alone_mixed);
  const CudaOps::DecodeStepCounts after_mixed = ops.decode_step_counts();
  run_wave(decode_heavy, alone_decode);
  const CudaOps::DecodeStepCounts counts = ops.decode_step_counts();
  std::printf("[ engine ] budget %lld, %s: %d of 80 requests equal to alone, %d diverged at a low margin; %lld steps, "
              "of them decode steps: %zu in the mixed wave, %zu in all, of %zu batch sizes, %zu from graphs "
              "(%zu captured)\n",
              static_cast<long long>(budget), graphs ? "graphs" : "eager", equal, diverged,
              static_cast<long long>(engine.stats().steps), after_mixed.steps, counts.steps, counts.batch_sizes,
              counts.graphed, ops.captured_graphs());
  EXPECT_GE(counts.steps - after_mixed.steps, 20u) << "the decode wave's steps that decode the whole batch";
  expect_graph_use(ops, graphs, "in the engine");
  const EngineStats s = engine.stats();
  EXPECT_EQ(s.free_slots, s.total_slots);
  EXPECT_EQ(s.free_kv_blocks, s.total_kv_blocks);
  EXPECT_EQ(s.runner_slots, 0);
}

INSTANTIATE_TEST_SUITE_P(Budgets, EngineGpu,
                         ::testing::Combine(::testing::Values(int64_t(64), int64_t(512), int64_t(8192)),
                                            ::testing::Bool()),
                         [](const auto& info) {
                           return "budget" + std::to_string(std::get<0>(info.param)) +
                                  (std::get<1>(info.param) ? "_graphs" : "_eager");
                         });

}  // namespace
}  // namespace di
