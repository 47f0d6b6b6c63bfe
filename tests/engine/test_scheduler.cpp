// The scheduler on the CPU with a fake model runner (fake_model_runner.h): admission without
// over-commitment, token budgets and their order, chunked prefill in one slot, mixed steps,
// preemption with recompute, cancellation, the bounded queue, FCFS, and a 10,000-request soak after
// which every block and slot is free again. Every step of every test goes through Harness::step,
// which checks the plan and the memory books independently of the scheduler's own invariant check.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <functional>
#include <map>
#include <random>
#include <set>

#include "engine/scheduler.h"
#include "fake_model_runner.h"
#include "support/expect_error.h"
#include "support/seed.h"

namespace di {
namespace {

using testing::fake_expected_output;
using testing::FakeModelRunner;
using testing::scheduler_config;
using testing::throws_error_with;

constexpr int32_t kVocab = 64;

Request make_request(int64_t id, int64_t prompt_len, int64_t max_new, std::vector<int32_t> stop_ids = {}) {
  Request r;
  r.id = id;
  for (int64_t i = 0; i < prompt_len; ++i) r.prompt.push_back(int32_t((id * 131 + i * 7) % kVocab));
  r.max_new_tokens = max_new;
  r.stop_ids = std::move(stop_ids);
  return r;
}

class Harness {
 public:
  explicit Harness(const SchedulerConfig& c) : sched(c), runner(c.num_state_slots, kVocab) {}

  void submit(const Request& r) {
    requests[r.id] = r;
    ASSERT_TRUE(sched.submit(r).accepted()) << "request " << r.id;
  }

  // One step: schedule, check the plan, run the fake model, hand the tokens back, check the books.
  // `between` runs after schedule() and before on_step_done() (a cancel arriving mid-step).
  StepPlan step(const std::function<void(const StepPlan&)>& between = nullptr) {
    const std::vector<int64_t> running_before = sched.running();
    StepPlan plan = sched.schedule();
    check_plan(plan, running_before);
    if (between) between(plan);
    const std::vector<int32_t> sampled = runner.run(plan);
    sched.on_step_done(plan, sampled);
    sched.check_invariants();
    check_books();
    for (int64_t id : plan.admitted) admissions.push_back(id);
    ++steps;
    return plan;
  }

  void run_until_idle(int64_t max_steps = 100000) {
    while (sched.has_work() && steps < max_steps) step();
    EXPECT_FALSE(sched.has_work()) << "still busy after " << steps << " steps";
  }

  // Independent check of the memory: every block and slot is free or held by a running request.
  void check_books() {
    const KvBlockAllocator& kv = sched.kv();
    int64_t held = 0;
    std::set<int> slots;
    for (int64_t id : sched.running()) {
      held += int64_t(kv.block_table(id).size());
      slots.insert(sched.slot(id));
    }
    EXPECT_GE(kv.free_blocks(), 0);
    EXPECT_EQ(kv.free_blocks() + held, kv.num_blocks()) << "step " << steps;
    EXPECT_EQ(int64_t(slots.size()), sched.num_running()) << "two running requests share a slot";
    EXPECT_GE(sched.slots().free_count(), 0);
    EXPECT_EQ(sched.slots().free_count() + sched.num_running(), sched.config().num_state_slots);
    EXPECT_LE(sched.num_running(), sched.config().max_num_seqs);
  }

  void check_plan(const StepPlan& plan, const std::vector<int64_t>& running_before) {
    const SchedulerConfig& c = sched.config();
    int64_t sum = 0, samples = 0;
    std::set<int64_t> ids;
    std::set<int> slots;
    bool past_decodes = false;
    for (const StepItem& it : plan.items) {
      const int64_t n = int64_t(it.tokens.size());
      sum += n;
      samples += it.samples;
      EXPECT_GE(n, 1);
      EXPECT_TRUE(ids.insert(it.request_id).second) << "request " << it.request_id << " twice in a step";
      EXPECT_TRUE(slots.insert(it.slot).second) << "slot " << it.slot << " twice in a step";
      EXPECT_EQ(sched.state(it.request_id), RequestState::running);
      EXPECT_EQ(sched.slot(it.request_id), it.slot);
      // Never over-committed: the blocks for the tokens fed this step are reserved.
      const int64_t reserved = int64_t(sched.kv().block_table(it.request_id).size()) * c.block_size;
      EXPECT_GE(reserved, it.start + n) << "request " << it.request_id;
      EXPECT_EQ(sched.kv().tokens(it.request_id), it.start + n);
      if (it.decode) {
        EXPECT_EQ(n, 1);
        EXPECT_TRUE(it.samples);
        EXPECT_FALSE(past_decodes) << "decode of request " << it.request_id << " after a prefill piece";
      } else if (n > 1 || it.start == 0) {
        past_decodes = true;
      }
      if (auto r_it = requests.find(it.request_id); it.start == 0 && r_it != requests.end()) {
        // A (re-)prefill starts with the prompt.
        const Request& r = r_it->second;
        const size_t k = std::min(r.prompt.size(), it.tokens.size());
        EXPECT_TRUE(std::equal(r.prompt.begin(), r.prompt.begin() + long(k), it.tokens.begin()));
      }
    }
    EXPECT_EQ(sum, plan.num_tokens);
    EXPECT_EQ(samples, plan.num_samples);
    EXPECT_LE(plan.num_tokens, c.max_num_batched_tokens) << "step " << plan.step << " over the token budget";
    EXPECT_LE(int64_t(plan.items.size()), c.max_num_seqs);
    // Victims are the most recently admitted running requests, newest first.
    std::vector<int64_t> candidates = running_before;
    for (int64_t id : plan.cancelled) std::erase(candidates, id);
    for (size_t i = 0; i < plan.preempted.size(); ++i) {
      ASSERT_LT(i, candidates.size());
      EXPECT_EQ(plan.preempted[i], candidates[candidates.size() - 1 - i]) << "victim is not the newest";
      EXPECT_EQ(ids.count(plan.preempted[i]), 0u) << "a preempted request still has work";
    }
    if (!plan.preempted.empty()) {
      EXPECT_TRUE(plan.admitted.empty()) << "admitted in a step that preempted";
      EXPECT_EQ(sched.waiting().front(), plan.preempted.back()) << "the preempted request is not at the front";
    }
    for (int64_t id : plan.cancelled) EXPECT_EQ(ids.count(id), 0u);
  }

  Scheduler sched;
  FakeModelRunner runner;
  std::map<int64_t, Request> requests;
  std::vector<int64_t> admissions;
  int64_t steps = 0;
};

std::vector<int32_t> run_alone(const Request& r) {
  Harness h(scheduler_config(1, 64, 16, 32));
  h.submit(r);
  h.run_until_idle();
  EXPECT_EQ(h.sched.total_preemptions(), 0);
  return h.sched.output(r.id);
}

TEST(Scheduler, AdmitsUpToTheSlotsAndWithinTheBudget) {
  Harness h(scheduler_config(/*slots=*/2, /*blocks=*/64, /*block_size=*/16, /*budget=*/100));
  for (int64_t id = 0; id < 3; ++id) h.submit(make_request(id, 10, 4));
  const StepPlan p = h.step();
  EXPECT_EQ(p.admitted, (std::vector<int64_t>{0, 1}));
  EXPECT_EQ(p.num_tokens, 20);
  EXPECT_EQ(h.sched.state(2), RequestState::waiting) << "admitted without a free slot";
  EXPECT_EQ(h.sched.slots().free_count(), 0);
  h.run_until_idle();
  for (int64_t id = 0; id < 3; ++id) {
    EXPECT_EQ(h.sched.state(id), RequestState::finished);
    EXPECT_EQ(h.sched.finish_reason(id), FinishReason::length);
    EXPECT_EQ(h.sched.output(id), fake_expected_output(h.requests[id], kVocab));
  }
  EXPECT_EQ(h.sched.slots().free_count(), 2);
  EXPECT_EQ(h.sched.kv().free_blocks(), 64);
}

TEST(Scheduler, MixesPrefillAndDecodeInOneStep) {
  Harness h(scheduler_config(4, 64, 16, 64));
  h.submit(make_request(1, 8, 10));
  const StepPlan first = h.step();
  ASSERT_EQ(first.items.size(), 1u);
  EXPECT_FALSE(first.items[0].decode);
  EXPECT_TRUE(first.items[0].samples);
  ASSERT_EQ(h.sched.output(1).size(), 1u);
  h.submit(make_request(2, 20, 10));
  const StepPlan mixed = h.step();
  ASSERT_EQ(mixed.items.size(), 2u);
  EXPECT_EQ(mixed.items[0].request_id, 1);
  EXPECT_TRUE(mixed.items[0].decode);
  EXPECT_EQ(mixed.items[0].start, 8);
  EXPECT_EQ(mixed.items[0].tokens, std::vector<int32_t>{h.sched.output(1)[0]});
  EXPECT_EQ(mixed.items[1].request_id, 2);
  EXPECT_FALSE(mixed.items[1].decode);
  EXPECT_EQ(mixed.items[1].start, 0);
  EXPECT_EQ(mixed.items[1].tokens.size(), 20u);
  EXPECT_EQ(mixed.num_tokens, 21);
  h.run_until_idle();
  EXPECT_EQ(h.sched.output(1), fake_expected_output(h.requests[1], kVocab));
  EXPECT_EQ(h.sched.output(2), fake_expected_output(h.requests[2], kVocab));
}

// Budget order: decodes first, then the next piece of a partial prefill, then admissions.
TEST(Scheduler, SpendsTheBudgetOnDecodesThenPrefillPiecesThenAdmissions) {
  Harness h(scheduler_config(8, 64, 16, /*budget=*/16));
  h.submit(make_request(1, 4, 50));
  h.submit(make_request(2, 4, 50));
  h.step();  // admits 1 and 2 (8 tokens), both sample
  h.submit(make_request(3, 40, 50));
  h.submit(make_request(4, 10, 50));
  auto shape = [](const StepPlan& p) {
    std::vector<std::pair<int64_t, size_t>> s;
    for (const StepItem& it : p.items) s.emplace_back(it.request_id, it.tokens.size());
    return s;
  };
  using Shape = std::vector<std::pair<int64_t, size_t>>;
  const StepPlan s2 = h.step();
  EXPECT_EQ(shape(s2), (Shape{{1, 1}, {2, 1}, {3, 14}}));
  EXPECT_EQ(s2.admitted, std::vector<int64_t>{3});
  const StepPlan s3 = h.step();
  EXPECT_EQ(shape(s3), (Shape{{1, 1}, {2, 1}, {3, 14}})) << "the partial prefill must continue before 4 is admitted";
  EXPECT_EQ(h.sched.state(4), RequestState::waiting);
  const StepPlan s4 = h.step();
  EXPECT_EQ(shape(s4), (Shape{{1, 1}, {2, 1}, {3, 12}, {4, 2}}));
  EXPECT_TRUE(s4.items[2].samples) << "the prompt's last piece samples";
  EXPECT_FALSE(s4.items[3].samples);
  const StepPlan s5 = h.step();
  EXPECT_EQ(shape(s5), (Shape{{1, 1}, {2, 1}, {3, 1}, {4, 8}}));
  h.run_until_idle();
  for (int64_t id = 1; id <= 4; ++id) EXPECT_EQ(h.sched.output(id), fake_expected_output(h.requests[id], kVocab));
}

TEST(Scheduler, ChunksALongPromptOverSeveralStepsInOneSlot) {
  Harness h(scheduler_config(2, 64, 16, /*budget=*/64));
  h.submit(make_request(9, 200, 5));
  std::vector<StepItem> pieces;
  while (h.sched.output(9).empty()) {
    const StepPlan p = h.step();
    ASSERT_EQ(p.items.size(), 1u);
    pieces.push_back(p.items[0]);
  }
  ASSERT_EQ(pieces.size(), 4u);
  const int64_t starts[] = {0, 64, 128, 192};
  const size_t sizes[] = {64, 64, 64, 8};
  for (size_t i = 0; i < 4; ++i) {
    EXPECT_EQ(pieces[i].slot, pieces[0].slot) << "piece " << i << " moved to another slot";
    EXPECT_EQ(pieces[i].start, starts[i]);
    EXPECT_EQ(pieces[i].tokens.size(), sizes[i]);
    EXPECT_EQ(pieces[i].samples, i == 3);
    const auto& prompt = h.requests[9].prompt;
    EXPECT_TRUE(std::equal(pieces[i].tokens.begin(), pieces[i].tokens.end(), prompt.begin() + starts[i]));
  }
  h.run_until_idle();
  // The fake's token depends on everything fed to the slot: the state went across the pieces.
  EXPECT_EQ(h.sched.output(9), fake_expected_output(h.requests[9], kVocab));
}

TEST(Scheduler, AdmitsOnlyWhenTheBlocksForThePieceAreFree) {
  Harness h(scheduler_config(/*slots=*/8, /*blocks=*/4, /*block_size=*/16, /*budget=*/1000));
  h.submit(make_request(1, 40, 3));  // 3 blocks
  h.submit(make_request(2, 40, 3));  // 3 more blocks: only 1 free
  const StepPlan p = h.step();
  EXPECT_EQ(p.admitted, std::vector<int64_t>{1});
  EXPECT_EQ(h.sched.state(2), RequestState::waiting);
  EXPECT_EQ(h.sched.slots().free_count(), 7) << "a waiting request holds a slot";
  EXPECT_EQ(h.sched.kv().free_blocks(), 1);
  h.run_until_idle();
  EXPECT_EQ(h.admissions, (std::vector<int64_t>{1, 2}));
  EXPECT_EQ(h.sched.total_preemptions(), 0);
  EXPECT_EQ(h.sched.kv().free_blocks(), 4);
}

TEST(Scheduler, PreemptsTheNewestWhenBlocksRunOutAndRecomputesIt) {
  // 6 blocks of 4 tokens; each request reaches 17..20 tokens (5 blocks), so they cannot all run.
  Harness h(scheduler_config(/*slots=*/4, /*blocks=*/6, /*block_size=*/4, /*budget=*/64));
  h.submit(make_request(1, 6, 14));
  h.submit(make_request(2, 5, 14));
  h.submit(make_request(3, 3, 14));
  std::map<int64_t, std::vector<int32_t>> output_at_preemption;
  bool saw_recompute = false;
  while (h.sched.has_work()) {
    std::map<int64_t, std::vector<int32_t>> before;
    for (int64_t id = 1; id <= 3; ++id) before[id] = h.sched.output(id);
    const StepPlan p = h.step();
    for (int64_t id : p.preempted) {
      EXPECT_EQ(h.sched.state(id), RequestState::preempted);
      EXPECT_EQ(h.sched.slot(id), -1);
      // It keeps what it generated (already streamed to its caller).
      EXPECT_FALSE(before[id].empty());
      EXPECT_EQ(h.sched.output(id), before[id]);
      output_at_preemption[id] = h.sched.output(id);
    }
    for (const StepItem& it : p.items) {
      auto found = output_at_preemption.find(it.request_id);
      if (it.start == 0 && found != output_at_preemption.end()) {
        // Re-prefilled from its prompt and the tokens it had generated.
        std::vector<int32_t> history = h.requests[it.request_id].prompt;
        history.insert(history.end(), found->second.begin(), found->second.end());
        EXPECT_EQ(it.tokens, history);
        saw_recompute = true;
      }
    }
    ASSERT_LT(h.steps, 1000);
  }
  EXPECT_GT(h.sched.total_preemptions(), 0);
  EXPECT_TRUE(saw_recompute);
  EXPECT_EQ(h.sched.preemptions(1), 0) << "the oldest request was preempted";
  for (int64_t id = 1; id <= 3; ++id) {
    EXPECT_EQ(h.sched.state(id), RequestState::finished);
    EXPECT_EQ(h.sched.output(id), run_alone(h.requests[id])) << "request " << id;
  }
  EXPECT_EQ(h.sched.kv().free_blocks(), 6);
  EXPECT_EQ(h.sched.slots().free_count(), 4);
}

TEST(Scheduler, CancelFreesTheMemoryAtTheNextStep) {
  Harness h(scheduler_config(/*slots=*/1, 16, 16, 64));
  h.submit(make_request(1, 20, 30));
  h.submit(make_request(2, 20, 30));
  h.submit(make_request(3, 20, 30));
  h.step();
  ASSERT_EQ(h.sched.state(1), RequestState::running);
  EXPECT_TRUE(h.sched.cancel(1));
  EXPECT_TRUE(h.sched.cancel(3));  // still waiting
  EXPECT_FALSE(h.sched.cancel(1)) << "cancelled twice";
  EXPECT_FALSE(h.sched.cancel(99));
  EXPECT_EQ(h.sched.state(1), RequestState::running) << "freed before the next step";
  EXPECT_EQ(h.sched.slots().free_count(), 0);
  EXPECT_EQ(h.sched.kv().free_blocks(), 14);
  const StepPlan p = h.step();
  EXPECT_EQ(p.cancelled, (std::vector<int64_t>{1, 3}));
  EXPECT_EQ(h.sched.state(1), RequestState::cancelled);
  EXPECT_EQ(h.sched.state(3), RequestState::cancelled);
  EXPECT_EQ(h.sched.finish_reason(1), FinishReason::cancelled);
  EXPECT_EQ(p.admitted, std::vector<int64_t>{2}) << "the freed slot goes to the next in line";
  EXPECT_EQ(h.sched.kv().free_blocks(), 14);  // 2's 20 tokens
  // A cancel arriving while a step is in flight: its token is dropped, its memory freed next step.
  const size_t before = h.sched.output(2).size();
  h.step([&](const StepPlan& plan) {
    ASSERT_EQ(plan.items.size(), 1u);
    EXPECT_TRUE(h.sched.cancel(2));
  });
  EXPECT_EQ(h.sched.output(2).size(), before);
  EXPECT_EQ(h.sched.slots().free_count(), 0);
  const StepPlan last = h.step();
  EXPECT_EQ(last.cancelled, std::vector<int64_t>{2});
  EXPECT_TRUE(last.empty());
  EXPECT_EQ(h.sched.slots().free_count(), 1);
  EXPECT_EQ(h.sched.kv().free_blocks(), 16);
  EXPECT_FALSE(h.sched.has_work());
}

TEST(Scheduler, CancelOfAPreemptedRequest) {
  Harness h(scheduler_config(/*slots=*/4, /*blocks=*/6, /*block_size=*/4, /*budget=*/64));
  h.submit(make_request(1, 6, 14));
  h.submit(make_request(2, 5, 14));
  int64_t victim = -1;
  while (victim < 0 && h.sched.has_work()) {
    const StepPlan p = h.step();
    if (!p.preempted.empty()) victim = p.preempted[0];
  }
  ASSERT_EQ(victim, 2);
  ASSERT_EQ(h.sched.state(2), RequestState::preempted);
  EXPECT_TRUE(h.sched.cancel(2));
  const StepPlan p = h.step();
  EXPECT_EQ(p.cancelled, std::vector<int64_t>{2});
  EXPECT_EQ(h.sched.state(2), RequestState::cancelled);
  EXPECT_TRUE(h.sched.waiting().empty());
  h.run_until_idle();
  EXPECT_EQ(h.sched.state(2), RequestState::cancelled) << "a cancelled request came back";
  EXPECT_EQ(h.sched.output(1), fake_expected_output(h.requests[1], kVocab));
  EXPECT_EQ(h.sched.kv().free_blocks(), 6);
  EXPECT_EQ(h.sched.slots().free_count(), 4);
}

TEST(Scheduler, RejectsExplicitlyWhenTheQueueIsFull) {
  Harness h(scheduler_config(/*slots=*/1, 16, 16, 64, /*max_waiting=*/3));
  for (int64_t id = 1; id <= 3; ++id) h.submit(make_request(id, 5, 4));
  const SubmitResult full = h.sched.submit(make_request(4, 5, 4));
  EXPECT_EQ(full.status, SubmitStatus::queue_full);
  EXPECT_NE(full.reason.find("full"), std::string::npos) << full.reason;
  EXPECT_EQ(h.sched.state(4), RequestState::rejected);
  EXPECT_EQ(h.sched.finish_reason(4), FinishReason::rejected);
  EXPECT_FALSE(h.sched.cancel(4));
  h.step();  // admits 1: room for one more
  EXPECT_EQ(h.sched.num_waiting(), 2);
  EXPECT_TRUE(h.sched.submit(make_request(5, 5, 4)).accepted());
  EXPECT_EQ(h.sched.submit(make_request(6, 5, 4)).status, SubmitStatus::queue_full);
  // Invalid requests are rejected whatever the queue holds.
  Request empty = make_request(7, 0, 4);
  EXPECT_EQ(h.sched.submit(empty).status, SubmitStatus::invalid);
  EXPECT_EQ(h.sched.submit(make_request(8, 5, 0)).status, SubmitStatus::invalid);
  const SubmitResult too_long = h.sched.submit(make_request(10, 250, 7));  // max_model_len 256
  EXPECT_EQ(too_long.status, SubmitStatus::invalid);
  EXPECT_NE(too_long.reason.find("max_model_len 256"), std::string::npos) << too_long.reason;
  EXPECT_TRUE(throws_error_with([&] { h.sched.submit(make_request(5, 5, 4)); }, {"request id 5", "already"}));
  h.run_until_idle();
  EXPECT_EQ(h.admissions, (std::vector<int64_t>{1, 2, 3, 5}));
  EXPECT_EQ(h.sched.state(6), RequestState::rejected);
}

TEST(Scheduler, AdmitsInArrivalOrder) {
  const uint32_t seed = testing::fresh_seed();
  SCOPED_TRACE(testing::seed_trace(seed));
  std::mt19937 rng(seed);
  Harness h(scheduler_config(/*slots=*/3, /*blocks=*/40, /*block_size=*/16, /*budget=*/48, /*max_waiting=*/100));
  std::vector<int64_t> order;
  for (int64_t id = 0; id < 60; ++id) {
    h.submit(make_request(id, std::uniform_int_distribution<int64_t>(1, 120)(rng),
                          std::uniform_int_distribution<int64_t>(1, 20)(rng)));
    order.push_back(id);
    if (rng() % 3 == 0) h.step();
  }
  h.run_until_idle();
  EXPECT_EQ(h.sched.total_preemptions(), 0);
  EXPECT_EQ(h.admissions, order);
}

TEST(Scheduler, TheHeadOfTheQueueIsNotOvertaken) {
  Harness h(scheduler_config(/*slots=*/4, /*blocks=*/10, /*block_size=*/16, /*budget=*/200));
  h.submit(make_request(1, 100, 20));  // 7 blocks
  h.step();
  h.submit(make_request(2, 60, 5));  // 4 blocks: does not fit next to 1
  h.submit(make_request(3, 5, 5));   // 1 block: would fit, but 2 is first
  h.step();
  EXPECT_EQ(h.sched.state(2), RequestState::waiting);
  EXPECT_EQ(h.sched.state(3), RequestState::waiting) << "3 overtook 2";
  h.run_until_idle();
  EXPECT_EQ(h.admissions, (std::vector<int64_t>{1, 2, 3}));
}

TEST(Scheduler, MisuseIsAClearError) {
  EXPECT_TRUE(throws_error_with([] { Scheduler s(scheduler_config(0, 8, 16, 64)); }, {"num_state_slots"}));
  SchedulerConfig c = scheduler_config(2, 8, 16, 64);
  c.max_model_len = 200;
  EXPECT_TRUE(throws_error_with([&] { Scheduler s(c); }, {"max_model_len", "128", "200"}));
  c.max_model_len = 0;
  c.max_num_seqs = 3;
  EXPECT_TRUE(throws_error_with([&] { Scheduler s(c); }, {"max_num_seqs", "3"}));
  Scheduler s(scheduler_config(2, 8, 16, 64));
  ASSERT_TRUE(s.submit(make_request(1, 5, 4)).accepted());
  const StepPlan p = s.schedule();
  EXPECT_TRUE(throws_error_with([&] { s.schedule(); }, {"on_step_done", "step 1"}));
  EXPECT_TRUE(throws_error_with([&] { s.on_step_done(p, {}); }, {"expects 1 sampled", "got 0"}));
  const std::vector<int32_t> one{3};
  s.on_step_done(p, one);
  EXPECT_EQ(s.output(1), one);
  EXPECT_TRUE(throws_error_with([&] { s.on_step_done(p, one); }, {"step 1", "none"}));
  EXPECT_TRUE(throws_error_with([&] { s.forget(1); }, {"request 1", "running"}));
  EXPECT_TRUE(throws_error_with([&] { s.state(42); }, {"unknown request id 42"}));
}

// 10,000 requests with random lengths, arrivals (bursts overflowing the queue) and ~10% cancels
// (waiting, running, in flight, preempted) on a KV cache too small for all slots at once: every
// step is checked, every finished output equals the request's output alone, and at the end every
// block and slot is free.
TEST(Scheduler, SoakOf10000RequestsReturnsEveryBlockAndSlot) {
  const uint32_t seed = testing::fresh_seed();
  SCOPED_TRACE(testing::seed_trace(seed));
  std::mt19937 rng(seed);
  SchedulerConfig c = scheduler_config(/*slots=*/12, /*blocks=*/64, /*block_size=*/16, /*budget=*/96, /*max_waiting=*/48);
  c.max_model_len = 400;
  Harness h(c);
  const int64_t free_blocks0 = h.sched.kv().free_blocks();
  const int free_slots0 = h.sched.slots().free_count();
  ASSERT_EQ(free_blocks0, 64);
  ASSERT_EQ(free_slots0, 12);

  constexpr int64_t kRequests = 10000;
  std::uniform_real_distribution<double> u01(0, 1);
  std::multimap<int64_t, int64_t> cancel_at;  // step -> request
  std::set<int64_t> accepted, rejected;
  int64_t next_id = 0;
  std::map<RequestState, int64_t> cancelled_while;
  auto do_cancel = [&](int64_t id) {
    const RequestState st = h.sched.state(id);
    if (h.sched.cancel(id)) ++cancelled_while[st];
  };
  while (next_id < kRequests || h.sched.has_work()) {
    // Arrivals: about 0.4 per step, a little below what 12 slots serve, and every 2,500 steps a
    // burst of 60 that overflows the queue.
    const bool burst = h.steps % 2500 == 1000;
    for (int k = 0; k < (burst ? 60 : 2) && next_id < kRequests; ++k) {
      if (!burst && u01(rng) >= 0.21) continue;
      const int64_t prompt = u01(rng) < 0.8 ? std::uniform_int_distribution<int64_t>(1, 80)(rng)
                                            : std::uniform_int_distribution<int64_t>(81, 300)(rng);
      const int64_t max_new = std::uniform_int_distribution<int64_t>(1, 40)(rng);
      Request r = make_request(next_id, prompt, max_new, {int32_t(rng() % kVocab)});
      for (auto& t : r.prompt) t = int32_t(rng() % kVocab);
      h.requests[r.id] = r;
      const SubmitResult res = h.sched.submit(r);
      if (res.accepted()) {
        accepted.insert(r.id);
        if (u01(rng) < 0.1) cancel_at.emplace(h.steps + std::uniform_int_distribution<int64_t>(0, 20)(rng), r.id);
      } else {
        EXPECT_EQ(res.status, SubmitStatus::queue_full) << res.reason;
        EXPECT_GE(h.sched.num_waiting(), c.max_waiting);
        rejected.insert(r.id);
      }
      ++next_id;
    }
    for (auto it = cancel_at.begin(); it != cancel_at.end() && it->first <= h.steps;) {
      if (it->first == h.steps && (it->second & 1)) {
        ++it;  // odd ids due now are cancelled while their step is in flight
        continue;
      }
      do_cancel(it->second);
      it = cancel_at.erase(it);
    }
    const StepPlan plan = h.step([&](const StepPlan&) {
      for (auto it = cancel_at.begin(); it != cancel_at.end() && it->first <= h.steps;) {
        do_cancel(it->second);
        it = cancel_at.erase(it);
      }
    });
    for (int64_t id : plan.preempted)  // some requests are cancelled while preempted
      if (u01(rng) < 0.2) do_cancel(id);
    if (::testing::Test::HasFailure()) break;
    ASSERT_LT(h.steps, 200000) << "no progress";
  }

  int64_t finished = 0, cancelled = 0;
  for (int64_t id : accepted) {
    const RequestState st = h.sched.state(id);
    const std::vector<int32_t> expected = fake_expected_output(h.requests[id], kVocab);
    const std::vector<int32_t>& out = h.sched.output(id);
    if (st == RequestState::finished) {
      ++finished;
      EXPECT_EQ(out, expected) << "request " << id;
    } else {
      ASSERT_EQ(st, RequestState::cancelled) << "request " << id;
      ++cancelled;
      ASSERT_LE(out.size(), expected.size());
      EXPECT_TRUE(std::equal(out.begin(), out.end(), expected.begin())) << "request " << id;
    }
    h.sched.forget(id);
  }
  for (int64_t id : rejected) EXPECT_EQ(h.sched.state(id), RequestState::rejected);
  EXPECT_EQ(finished + cancelled + int64_t(rejected.size()), kRequests);
  EXPECT_EQ(h.sched.kv().free_blocks(), free_blocks0);
  EXPECT_EQ(h.sched.slots().free_count(), free_slots0);
  EXPECT_EQ(h.sched.kv().num_sequences(), 0);
  // The run exercised what it is meant to.
  EXPECT_GT(h.sched.total_preemptions(), 0);
  EXPECT_GT(cancelled_while[RequestState::waiting], 0);
  EXPECT_GT(cancelled_while[RequestState::running], 0);
  EXPECT_GT(cancelled_while[RequestState::preempted], 0);
  EXPECT_GT(rejected.size(), 0u);
  EXPECT_LT(int64_t(rejected.size()), kRequests / 10);
  RecordProperty("steps", std::to_string(h.steps));
  std::printf("soak: %lld steps, %lld finished, %lld cancelled (%lld waiting, %lld running, %lld preempted), %zu "
              "rejected, %lld preemptions, %lld tokens fed\n",
              (long long)h.steps, (long long)finished, (long long)cancelled,
              (long long)cancelled_while[RequestState::waiting], (long long)cancelled_while[RequestState::running],
              (long long)cancelled_while[RequestState::preempted], rejected.size(),
              (long long)h.sched.total_preemptions(), (long long)h.runner.tokens_fed());
}

}  // namespace
}  // namespace di
