// The serving engine (engine/engine.h) on the CPU.
// With the fake runner (fake_model_runner.h, whose tokens are a hash of a sequence's whole history):
// every request streams the tokens it gets alone, under preemption; a full queue and invalid
// requests are rejected with their reasons; cancels end a stream wherever the request is; a failing
// step ends its requests with the error and the engine goes on; 10,000 requests from four threads,
// a share cancelled, leave every slot and block free.
// With the tiny model on CpuOps (float32): concurrent requests of mixed lengths under token budgets
// of 64, 512 and 8192, and under preemption, give the greedy tokens each gives alone (a divergence
// is accepted only where the lone run's top two logits are within float32 reordering of each
// other); seeded sampling does not depend on the batch; stop tokens and stop strings end a stream.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <random>
#include <stdexcept>
#include <thread>

#include "engine/engine.h"
#include "engine/ops_runner.h"
#include "engine/engine_test_support.h"
#include "engine/sequence.h"
#include "fake_model_runner.h"
#include "support/seed.h"
#include "support/tiny_model_fixture.h"
#include "support/tolerance.h"

namespace di {
namespace {

using namespace std::chrono_literals;
using testing::Alone;
using testing::drain;
using testing::Drained;
using testing::fake_expected_output;
using testing::FakeModelRunner;
using testing::greedy_alone;
using testing::scheduler_config;

constexpr int32_t kFakeVocab = 64;

void expect_all_memory_free(const Engine& engine) {
  const EngineStats s = engine.stats();
  EXPECT_EQ(s.running, 0);
  EXPECT_EQ(s.waiting, 0);
  EXPECT_EQ(s.free_slots, s.total_slots);
  EXPECT_EQ(s.free_kv_blocks, s.total_kv_blocks);
  EXPECT_EQ(s.runner_slots, 0);
}

GenerationRequest fake_request(std::mt19937& rng, int64_t max_prompt, int64_t max_new, int64_t min_prompt = 1) {
  GenerationRequest r;
  const int64_t len = std::uniform_int_distribution<int64_t>(min_prompt, max_prompt)(rng);
  for (int64_t i = 0; i < len; ++i) r.prompt.push_back(std::uniform_int_distribution<int32_t>(0, kFakeVocab - 1)(rng));
  r.max_tokens = std::uniform_int_distribution<int64_t>(1, max_new)(rng);
  if (rng() % 3 == 0) r.stop_ids = {std::uniform_int_distribution<int32_t>(0, kFakeVocab - 1)(rng)};
  return r;
}

std::vector<int32_t> fake_alone(const GenerationRequest& g) {
  Request r;
  r.prompt = g.prompt;
  r.max_new_tokens = g.max_tokens;
  r.stop_ids = g.stop_ids;
  return fake_expected_output(r, kFakeVocab);
}

FinishReason fake_reason(const GenerationRequest& g, const std::vector<int32_t>& out) {
  const bool stopped = !out.empty() && std::find(g.stop_ids.begin(), g.stop_ids.end(), out.back()) != g.stop_ids.end();
  return stopped ? FinishReason::stop : FinishReason::length;
}

// A fake runner whose steps wait until the test opens the gate: holds the engine mid-step so that
// the queue and cancellation cases are deterministic.
class GatedRunner final : public ModelRunner {
 public:
  explicit GatedRunner(int64_t slots) : fake_(slots, kFakeVocab) {}
  std::vector<int32_t> run(const StepPlan& plan) override {
    std::unique_lock lock(mutex_);
    ++entered_;
    changed_.notify_all();
    changed_.wait(lock, [&] { return open_; });
    if (fail_at_step_ == plan.step) throw std::runtime_error("device lost (injected)");
    return fake_.run(plan);
  }
  void wait_entered(int n) {
    std::unique_lock lock(mutex_);
    ASSERT_TRUE(changed_.wait_for(lock, 60s, [&] { return entered_ >= n; })) << "the engine never ran step " << n;
  }
  void open() {
    std::lock_guard lock(mutex_);
    open_ = true;
    changed_.notify_all();
  }
  void fail_at(int64_t step) { fail_at_step_ = step; }

 private:
  FakeModelRunner fake_;
  std::mutex mutex_;
  std::condition_variable changed_;
  int entered_ = 0;
  bool open_ = false;
  std::atomic<int64_t> fail_at_step_{-1};
};

TEST(EngineFake, EveryRequestStreamsWhatItGetsAlone) {
  const uint32_t seed = testing::fresh_seed();
  SCOPED_TRACE(testing::seed_trace(seed));
  std::mt19937 rng(seed);
  FakeModelRunner runner(4, kFakeVocab);
  // 24 blocks of 16 tokens (384) for 4 slots and requests of 41 to 160 tokens (100 on average): the
  // running sequences outgrow the cache, so preemption and recompute happen.
  Engine engine(runner, kFakeVocab, EngineOptions{.scheduler = scheduler_config(4, 24, 16, 96, /*max_waiting=*/1000)});
  std::vector<GenerationRequest> requests;
  std::vector<int64_t> ids;
  for (int i = 0; i < 200; ++i) {
    requests.push_back(fake_request(rng, 120, 40, /*min_prompt=*/40));
    const Submitted s = engine.submit(requests.back());
    ASSERT_TRUE(s.result.accepted()) << s.result.reason;
    ids.push_back(s.id);
  }
  for (size_t i = 0; i < ids.size(); ++i) {
    const Drained d = drain(engine, ids[i]);
    const std::vector<int32_t> want = fake_alone(requests[i]);
    EXPECT_EQ(d.tokens, want) << "request " << ids[i];
    EXPECT_EQ(d.reason, fake_reason(requests[i], want)) << "request " << ids[i];
    EXPECT_EQ(d.events, int(want.size())) << "one event per token, the last one final";
  }
  EXPECT_GT(engine.stats().preemptions, 0) << "the cache was sized to force preemption";
  expect_all_memory_free(engine);
}

TEST(EngineFake, AFullQueueRejectsWithTheReason) {
  GatedRunner runner(1);
  Engine engine(runner, kFakeVocab, EngineOptions{.scheduler = scheduler_config(1, 64, 16, 64, /*max_waiting=*/2)});
  GenerationRequest g{.prompt = {1, 2, 3}, .max_tokens = 4};
  const Submitted first = engine.submit(g);
  runner.wait_entered(1);  // admitted and in its step: the queue is empty again
  const Submitted second = engine.submit(g), third = engine.submit(g), fourth = engine.submit(g);
  EXPECT_TRUE(second.result.accepted() && third.result.accepted());
  EXPECT_EQ(fourth.result.status, SubmitStatus::queue_full);
  EXPECT_NE(fourth.result.reason.find("wait queue is full"), std::string::npos) << fourth.result.reason;
  const Drained rejected = drain(engine, fourth.id);
  EXPECT_EQ(rejected.events, 1);
  EXPECT_EQ(rejected.reason, FinishReason::rejected);
  EXPECT_EQ(rejected.error, fourth.result.reason);
  runner.open();
  for (int64_t id : {first.id, second.id, third.id}) EXPECT_EQ(drain(engine, id).tokens.size(), 4u);
  expect_all_memory_free(engine);
}

TEST(EngineFake, InvalidRequestsAreRejectedWithTheirReason) {
  FakeModelRunner runner(2, kFakeVocab);
  Engine engine(runner, kFakeVocab, EngineOptions{.scheduler = scheduler_config(2, 16, 16, 64)});
  auto expect_invalid = [&](GenerationRequest g, const std::string& words) {
    const Submitted s = engine.submit(std::move(g));
    EXPECT_EQ(s.result.status, SubmitStatus::invalid) << words;
    EXPECT_NE(s.result.reason.find(words), std::string::npos) << "reason: " << s.result.reason;
    const Drained d = drain(engine, s.id);
    EXPECT_EQ(d.events, 1);
    EXPECT_EQ(d.reason, FinishReason::rejected);
  };
  expect_invalid({.prompt = {}, .max_tokens = 4}, "prompt is empty");
  expect_invalid({.prompt = {1}, .max_tokens = 0}, "max_new_tokens must be >= 1");
  expect_invalid({.prompt = {1}, .max_tokens = 256}, "exceeds max_model_len");
  expect_invalid({.prompt = {1, kFakeVocab}, .max_tokens = 2}, "outside the vocabulary");
  expect_invalid({.prompt = {1}, .max_tokens = 2, .sampling = {.temperature = -1.0f}}, "temperature");
  expect_invalid({.prompt = {1}, .max_tokens = 2, .stop_strings = {"x"}}, "stop strings need the model's tokenizer");
  const Submitted text = engine.submit_text("hello", {.max_tokens = 2});
  EXPECT_EQ(text.result.status, SubmitStatus::invalid);
  EXPECT_EQ(drain(engine, text.id).reason, FinishReason::rejected);
  EXPECT_THROW(engine.next(12345, 1ms), Error);
  expect_all_memory_free(engine);
}

TEST(EngineFake, CancelEndsTheStreamWhereverTheRequestIs) {
  GatedRunner runner(1);
  Engine engine(runner, kFakeVocab, EngineOptions{.scheduler = scheduler_config(1, 64, 16, 64)});
  const Submitted running = engine.submit({.prompt = {5, 6, 7}, .max_tokens = 50});
  runner.wait_entered(1);
  const Submitted waiting = engine.submit({.prompt = {8}, .max_tokens = 50});
  const Submitted after = engine.submit({.prompt = {9, 10}, .max_tokens = 3});
  EXPECT_TRUE(engine.cancel(waiting.id));
  EXPECT_TRUE(engine.cancel(running.id));   // in the middle of its step: the token it yields is dropped
  EXPECT_FALSE(engine.cancel(running.id));  // once is enough
  runner.open();
  const Drained r = drain(engine, running.id), w = drain(engine, waiting.id), a = drain(engine, after.id);
  EXPECT_EQ(r.reason, FinishReason::cancelled);
  EXPECT_TRUE(r.tokens.empty()) << "the token of the step in flight belongs to a cancelled request";
  EXPECT_EQ(w.reason, FinishReason::cancelled);
  EXPECT_TRUE(w.tokens.empty());
  EXPECT_EQ(a.tokens, fake_alone({.prompt = {9, 10}, .max_tokens = 3}));
  EXPECT_FALSE(engine.cancel(after.id)) << "finished and read";
  expect_all_memory_free(engine);
}

TEST(EngineFake, AFailedStepEndsItsRequestsAndTheEngineGoesOn) {
  GatedRunner runner(2);
  Engine engine(runner, kFakeVocab, EngineOptions{.scheduler = scheduler_config(2, 64, 16, 64)});
  runner.fail_at(1);
  const Submitted doomed = engine.submit({.prompt = {1, 2}, .max_tokens = 5});
  runner.wait_entered(1);
  runner.open();
  const Drained d = drain(engine, doomed.id);
  EXPECT_EQ(d.reason, FinishReason::cancelled);
  EXPECT_NE(d.error.find("device lost (injected)"), std::string::npos) << d.error;
  const Submitted next = engine.submit({.prompt = {3}, .max_tokens = 4});
  EXPECT_EQ(drain(engine, next.id).tokens, fake_alone({.prompt = {3}, .max_tokens = 4}));
  expect_all_memory_free(engine);
}

TEST(EngineFake, TenThousandRequestsFromFourThreadsLeaveNothingBehind) {
  const uint32_t seed = testing::fresh_seed();
  SCOPED_TRACE(testing::seed_trace(seed));
  FakeModelRunner runner(16, kFakeVocab);
  Engine engine(runner, kFakeVocab, EngineOptions{.scheduler = scheduler_config(16, 40, 16, 256, 64)});
  const EngineStats start = engine.stats();
  std::atomic<int> wrong{0}, cancelled{0}, rejected{0};
  auto client = [&](uint32_t client_seed) {
    std::mt19937 rng(client_seed);
    for (int i = 0; i < 2500; ++i) {
      GenerationRequest g = fake_request(rng, 40, 12);
      const Submitted s = engine.submit(g);
      if (!s.result.accepted()) {  // the queue (64) may fill: the client sees the reason and moves on
        ++rejected;
        if (drain(engine, s.id).reason != FinishReason::rejected) ++wrong;
        continue;
      }
      const int mode = int(rng() % 10);  // 0: cancel at once; 1: cancel after the first token
      if (mode == 0) engine.cancel(s.id);
      Drained d;
      if (mode == 1) {
        const std::optional<TokenEvent> first = engine.next(s.id, 120s);
        if (!first) { ++wrong; continue; }
        if (!first->finished) {
          engine.cancel(s.id);
          d = drain(engine, s.id);
        }
        d.tokens.insert(d.tokens.begin(), first->token);
        if (first->finished) d.reason = first->reason;
      } else {
        d = drain(engine, s.id);
      }
      const std::vector<int32_t> want = fake_alone(g);
      if (d.reason == FinishReason::cancelled) {
        ++cancelled;
        // Whatever it streamed before the cancel is a prefix of what it gets alone.
        if (d.tokens.size() > want.size() || !std::equal(d.tokens.begin(), d.tokens.end(), want.begin())) ++wrong;
      } else if (d.tokens != want || d.reason != fake_reason(g, want)) {
        ++wrong;
      }
    }
  };
  std::vector<std::thread> clients;
  for (uint32_t c = 0; c < 4; ++c) clients.emplace_back(client, seed + c);
  for (std::thread& t : clients) t.join();
  EXPECT_EQ(wrong.load(), 0);
  EXPECT_GT(cancelled.load(), 0);
  std::printf("10,000 requests: %d cancelled, %d rejected by the full queue, %lld steps, %lld preemptions\n",
              cancelled.load(), rejected.load(), static_cast<long long>(engine.stats().steps),
              static_cast<long long>(engine.stats().preemptions));
  expect_all_memory_free(engine);
  EXPECT_EQ(engine.stats().free_slots, start.free_slots);
  EXPECT_EQ(engine.stats().free_kv_blocks, start.free_kv_blocks);
}

// ---- The tiny model on CpuOps.

std::vector<int32_t> random_prompt(std::mt19937& rng, int64_t n, int64_t vocab) {
  std::vector<int32_t> p(static_cast<size_t>(n));
  for (auto& t : p) t = std::uniform_int_distribution<int32_t>(0, int32_t(vocab - 1))(rng);
  return p;
}

class EngineTinyModel : public ::testing::Test {
 protected:
  EngineTinyModel()
      : config_(testing::tiny_model().config), model_(config_, testing::tiny_model().weights),
        ops_(config_, Precision::f32), alone_ops_(config_, Precision::f32) {}
  const ModelConfig& config_;
  Qwen35Model model_;
  CpuOps ops_, alone_ops_;
};

class EngineTinyModelBudgets : public EngineTinyModel, public ::testing::WithParamInterface<int64_t> {};

// Mixed prompt lengths (chunk boundaries included) through 4 slots, so that requests queue, run
// together, and long prompts are prefilled in pieces of the step budget.
TEST_P(EngineTinyModelBudgets, ConcurrentRequestsGiveTheirAloneGreedyTokens) {
  const int64_t budget = GetParam();
  const uint32_t seed = testing::fresh_seed();
  SCOPED_TRACE(testing::seed_trace(seed) + ", budget " + std::to_string(budget));
  std::mt19937 rng(seed);
  const std::vector<int64_t> lengths = {1, 2, 63, 64, 65, 127, 128, 200, 9, 33};
  std::vector<GenerationRequest> requests;
  std::vector<Alone> alone;
  for (int64_t len : lengths) {
    requests.push_back({.prompt = random_prompt(rng, len, config_.vocab_size),
                        .max_tokens = std::uniform_int_distribution<int64_t>(1, 6)(rng)});
    alone.push_back(greedy_alone(model_, alone_ops_, requests.back().prompt, requests.back().max_tokens));
  }
  OpsModelRunner runner(model_, ops_);
  Engine engine(runner, config_.vocab_size, EngineOptions{.scheduler = scheduler_config(4, 64, 64, budget)});
  std::vector<int64_t> ids;
  for (const GenerationRequest& g : requests) ids.push_back(engine.submit(g).id);
  int diverged = 0;
  for (size_t i = 0; i < ids.size(); ++i) {
    const Drained d = drain(engine, ids[i]);
    EXPECT_EQ(d.reason, FinishReason::length);
    diverged += testing::expect_greedy_matches(d.tokens, alone[i], testing::kF32ReorderLogit,
                                               "prompt of " + std::to_string(lengths[i]) + " tokens");
  }
  EXPECT_LE(diverged, 1) << "near ties are rare; more divergences point at a state bug";
  expect_all_memory_free(engine);
}

INSTANTIATE_TEST_SUITE_P(Budgets, EngineTinyModelBudgets, ::testing::Values(int64_t(64), int64_t(512), int64_t(8192)));

TEST_F(EngineTinyModel, PreemptedRequestsStillGiveTheirAloneTokens) {
  const uint32_t seed = testing::fresh_seed();
  SCOPED_TRACE(testing::seed_trace(seed));
  std::mt19937 rng(seed);
  // 4 slots, 24 blocks of 16 tokens (384): four prompts of ~90 tokens generating 10 each need 400.
  std::vector<GenerationRequest> requests;
  std::vector<Alone> alone;
  for (int i = 0; i < 4; ++i) {
    requests.push_back({.prompt = random_prompt(rng, 86 + i, config_.vocab_size), .max_tokens = 10});
    alone.push_back(greedy_alone(model_, alone_ops_, requests.back().prompt, 10));
  }
  OpsModelRunner runner(model_, ops_);
  Engine engine(runner, config_.vocab_size, EngineOptions{.scheduler = scheduler_config(4, 24, 16, 512)});
  std::vector<int64_t> ids;
  for (const GenerationRequest& g : requests) ids.push_back(engine.submit(g).id);
  for (size_t i = 0; i < ids.size(); ++i)
    testing::expect_greedy_matches(drain(engine, ids[i]).tokens, alone[i], testing::kF32ReorderLogit,
                                   "request " + std::to_string(i));
  EXPECT_GT(engine.stats().preemptions, 0);
  expect_all_memory_free(engine);
}

TEST_F(EngineTinyModel, SeededSamplingDoesNotDependOnTheBatch) {
  const uint32_t seed = testing::fresh_seed();
  SCOPED_TRACE(testing::seed_trace(seed));
  std::mt19937 rng(seed);
  const GenerationRequest sampled{.prompt = random_prompt(rng, 40, config_.vocab_size), .max_tokens = 8,
                                  .sampling = {.temperature = 1.0f, .top_p = 0.9f, .seed = seed}};
  OpsModelRunner runner(model_, ops_);
  std::vector<int32_t> alone_tokens;
  {
    Engine engine(runner, config_.vocab_size, EngineOptions{.scheduler = scheduler_config(4, 64, 64, 512)});
    alone_tokens = drain(engine, engine.submit(sampled).id).tokens;
  }
  Engine engine(runner, config_.vocab_size, EngineOptions{.scheduler = scheduler_config(4, 64, 64, 512)});
  std::vector<int64_t> others;
  for (int i = 0; i < 3; ++i)
    others.push_back(engine.submit({.prompt = random_prompt(rng, 30 + i, config_.vocab_size), .max_tokens = 8,
                                    .sampling = {.temperature = 1.0f, .seed = uint64_t(i)}}).id);
  const int64_t id = engine.submit(sampled).id;
  EXPECT_EQ(drain(engine, id).tokens, alone_tokens);
  for (int64_t o : others) EXPECT_EQ(drain(engine, o).tokens.size(), 8u);
  expect_all_memory_free(engine);
}

// Log-probabilities where a request asks for them: the drawn token's and its top alternatives under
// log_softmax of the logits (the lone run's, recomputed here in double), highest first; a request
// that does not ask gets none.
TEST_F(EngineTinyModel, LogprobsAreThoseOfTheRawDistribution) {
  const uint32_t seed = testing::fresh_seed();
  SCOPED_TRACE(testing::seed_trace(seed));
  std::mt19937 rng(seed);
  const std::vector<int32_t> prompt = random_prompt(rng, 30, config_.vocab_size);
  OpsModelRunner runner(model_, ops_);
  Engine engine(runner, config_.vocab_size, EngineOptions{.scheduler = scheduler_config(4, 64, 64, 512)});
  const int64_t asked = engine.submit({.prompt = prompt, .max_tokens = 4, .sampling = {.logprobs = 3}}).id;
  const int64_t plain = engine.submit({.prompt = prompt, .max_tokens = 4}).id;
  Sequence alone(model_, alone_ops_);
  std::vector<float> logits = alone.feed(prompt);
  int tokens = 0;
  while (const std::optional<TokenEvent> e = engine.next(asked, 60s)) {
    if (e->token >= 0) {
      ++tokens;
      ASSERT_TRUE(e->logprobs.has_value()) << "token " << tokens;
      double max = logits[0], sum = 0;
      for (float x : logits) max = std::max(max, double(x));
      for (float x : logits) sum += std::exp(double(x) - max);
      const double lse = max + std::log(sum);
      EXPECT_NEAR(e->logprobs->logprob, double(logits[size_t(e->token)]) - lse, 1e-4);
      ASSERT_EQ(e->logprobs->top.size(), 3u);
      EXPECT_EQ(e->logprobs->top[0].first, e->token) << "greedy draws the top token";
      EXPECT_EQ(e->logprobs->top[0].second, e->logprobs->logprob);
      for (size_t i = 0; i < 3; ++i) {
        EXPECT_NEAR(e->logprobs->top[i].second, double(logits[size_t(e->logprobs->top[i].first)]) - lse, 1e-4);
        if (i > 0) {
          EXPECT_LE(e->logprobs->top[i].second, e->logprobs->top[i - 1].second);
        }
      }
      const int32_t next[1] = {e->token};
      logits = alone.feed(next);
    }
    if (e->finished) break;
  }
  EXPECT_EQ(tokens, 4);
  while (const std::optional<TokenEvent> e = engine.next(plain, 60s)) {
    EXPECT_FALSE(e->logprobs.has_value());
    if (e->finished) break;
  }
  expect_all_memory_free(engine);
}

TEST_F(EngineTinyModel, StopTokensAndStopStringsEndTheStream) {
  const uint32_t seed = testing::fresh_seed();
  SCOPED_TRACE(testing::seed_trace(seed));
  std::mt19937 rng(seed);
  const Tokenizer tokenizer = Tokenizer::load(DI_TOKENIZER_DIR);
  const std::vector<int32_t> prompt = random_prompt(rng, 20, config_.vocab_size);
  const Alone alone = greedy_alone(model_, alone_ops_, prompt, 12);
  ASSERT_EQ(alone.tokens.size(), 12u);
  OpsModelRunner runner(model_, ops_);
  Engine engine(runner, config_.vocab_size, EngineOptions{.scheduler = scheduler_config(4, 64, 64, 512), .eos_ids = {alone.tokens[4]}},
                &tokenizer);

  // An end-of-sequence id (the engine's) stops at its first occurrence, unless ignore_eos.
  const size_t first_eos = size_t(std::find(alone.tokens.begin(), alone.tokens.end(), alone.tokens[4]) - alone.tokens.begin());
  const Drained eos = drain(engine, engine.submit({.prompt = prompt, .max_tokens = 12}).id);
  EXPECT_EQ(eos.reason, FinishReason::stop);
  EXPECT_EQ(eos.tokens, std::vector<int32_t>(alone.tokens.begin(), alone.tokens.begin() + first_eos + 1));
  const Drained ignored = drain(engine, engine.submit({.prompt = prompt, .max_tokens = 12, .ignore_eos = true}).id);
  EXPECT_EQ(ignored.tokens, alone.tokens);
  EXPECT_EQ(ignored.reason, FinishReason::length);
  // The streamed text is the tokens' text (skipping special tokens and the ids past the tokenizer's
  // vocabulary, which a random model may draw), in pieces.
  auto text_of = [&](std::span<const int32_t> ids) {
    std::vector<int32_t> known;
    for (int32_t t : ids)
      if (t < tokenizer.vocab_size()) known.push_back(t);
    return tokenizer.decode(known, /*skip_special=*/true);
  };
  EXPECT_EQ(ignored.text, text_of(alone.tokens));

  // A stop string: the stream ends before it, with reason stop.
  const std::string full = text_of(alone.tokens);
  const std::string tail_text = text_of(std::span<const int32_t>(alone.tokens).subspan(6));
  if (full.size() < 8 || tail_text.size() < 3) GTEST_SKIP() << "these tokens decode to too little text for a stop string";
  const std::string stop = tail_text.substr(0, 3);
  const size_t at = full.find(stop);
  const Drained stopped = drain(engine, engine.submit({.prompt = prompt, .max_tokens = 12, .stop_strings = {stop},
                                                      .ignore_eos = true}).id);
  EXPECT_EQ(stopped.reason, FinishReason::stop);
  EXPECT_EQ(stopped.text, full.substr(0, at)) << "stop string '" << stop << "'";
  expect_all_memory_free(engine);
}

}  // namespace
}  // namespace di
