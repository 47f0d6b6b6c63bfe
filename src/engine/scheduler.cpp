#include "engine/scheduler.h"

#include <algorithm>

#include "core/error.h"

namespace di {

const char* request_state_name(RequestState state) {
  switch (state) {
    case RequestState::waiting: return "waiting";
    case RequestState::running: return "running";
    case RequestState::preempted: return "preempted";
    case RequestState::finished: return "finished";
    case RequestState::cancelled: return "cancelled";
    case RequestState::rejected: return "rejected";
  }
  return "?";
}

const char* finish_reason_name(FinishReason reason) {
  switch (reason) {
    case FinishReason::none: return "none";
    case FinishReason::stop: return "stop";
    case FinishReason::length: return "length";
    case FinishReason::cancelled: return "cancelled";
    case FinishReason::rejected: return "rejected";
  }
  return "?";
}

struct Scheduler::Seq {
  Request req;
  RequestState state = RequestState::waiting;
  FinishReason finish = FinishReason::none;
  int64_t arrival = 0;        // submit order
  int64_t admitted_at = -1;   // admission order of the current admission
  std::vector<int32_t> output;
  int slot = -1;
  int64_t computed = 0;       // tokens of prompt + output in the state and KV cache
  int64_t scheduled = 0;      // tokens given to it in the plan being built or in flight
  int64_t preemptions = 0;
  bool cancel_requested = false;

  int64_t prompt_len() const { return int64_t(req.prompt.size()); }
  int64_t total_len() const { return prompt_len() + int64_t(output.size()); }
  int64_t pending() const { return total_len() - computed; }  // tokens still to feed
  int32_t token(int64_t i) const {
    return i < prompt_len() ? req.prompt[size_t(i)] : output[size_t(i - prompt_len())];
  }
  bool live() const {
    return state == RequestState::waiting || state == RequestState::running || state == RequestState::preempted;
  }
};

namespace {

SchedulerConfig resolved(SchedulerConfig c) {
  DI_CHECK(c.num_state_slots >= 1, "scheduler: num_state_slots must be >= 1, found {}", c.num_state_slots);
  DI_CHECK(c.num_kv_blocks >= 1, "scheduler: num_kv_blocks must be >= 1, found {}", c.num_kv_blocks);
  DI_CHECK(c.block_size >= 1, "scheduler: block_size must be >= 1, found {}", c.block_size);
  if (c.max_num_seqs == 0) c.max_num_seqs = c.num_state_slots;
  DI_CHECK(c.max_num_seqs >= 1 && c.max_num_seqs <= c.num_state_slots,
           "scheduler: max_num_seqs must be in [1, num_state_slots = {}], found {}", c.num_state_slots,
           c.max_num_seqs);
  DI_CHECK(c.max_num_batched_tokens >= 1, "scheduler: max_num_batched_tokens must be >= 1, found {}",
           c.max_num_batched_tokens);
  DI_CHECK(c.max_waiting >= 1, "scheduler: max_waiting must be >= 1, found {}", c.max_waiting);
  const int64_t kv_tokens = c.num_kv_blocks * c.block_size;
  if (c.max_model_len == 0) c.max_model_len = kv_tokens;
  // A request alone must always fit: then the oldest running sequence can always progress, and
  // preemption (of newer ones) always ends.
  DI_CHECK(c.max_model_len >= 1 && c.max_model_len <= kv_tokens,
           "scheduler: max_model_len must be in [1, {}] (num_kv_blocks {} x block_size {}), found {}", kv_tokens,
           c.num_kv_blocks, c.block_size, c.max_model_len);
  return c;
}

}  // namespace

Scheduler::Scheduler(const SchedulerConfig& config)
    : config_(resolved(config)), kv_(config_.num_kv_blocks, config_.block_size), slots_(int(config_.num_state_slots)) {}

Scheduler::~Scheduler() = default;

Scheduler::Seq& Scheduler::find(int64_t id) const {
  auto it = seqs_.find(id);
  if (it == seqs_.end()) fail("scheduler: unknown request id {}", id);
  return *it->second;
}

SubmitResult Scheduler::submit(Request request) {
  const int64_t id = request.id;
  if (seqs_.count(id)) fail("scheduler: request id {} was already submitted", id);
  SubmitResult r;
  const int64_t len = int64_t(request.prompt.size()) + request.max_new_tokens;
  if (request.prompt.empty()) {
    r = {SubmitStatus::invalid, "the prompt is empty"};
  } else if (request.max_new_tokens < 1) {
    r = {SubmitStatus::invalid, fmt::format("max_new_tokens must be >= 1, found {}", request.max_new_tokens)};
  } else if (len > config_.max_model_len) {
    r = {SubmitStatus::invalid, fmt::format("prompt ({} tokens) + max_new_tokens ({}) = {} exceeds max_model_len {}",
                                            request.prompt.size(), request.max_new_tokens, len, config_.max_model_len)};
  } else if (num_waiting() >= config_.max_waiting) {
    r = {SubmitStatus::queue_full, fmt::format("the wait queue is full ({} requests)", config_.max_waiting)};
  }
  auto s = std::make_unique<Seq>();
  s->req = std::move(request);
  s->arrival = arrivals_++;
  if (r.accepted()) {
    waiting_.push_back(s.get());
  } else {
    s->state = RequestState::rejected;
    s->finish = FinishReason::rejected;
  }
  seqs_.emplace(id, std::move(s));
  return r;
}

bool Scheduler::cancel(int64_t id) {
  auto it = seqs_.find(id);
  if (it == seqs_.end()) return false;
  Seq& s = *it->second;
  if (!s.live() || s.cancel_requested) return false;
  s.cancel_requested = true;
  cancels_.push_back(id);
  return true;
}

void Scheduler::release_memory(Seq& s) {
  if (s.slot >= 0) slots_.free(s.slot);
  if (kv_.has(s.req.id)) kv_.free(s.req.id);
  s.slot = -1;
  s.computed = 0;
  s.scheduled = 0;
}

void Scheduler::remove_running(Seq& s) {
  auto it = std::find(running_.begin(), running_.end(), &s);
  DI_CHECK(it != running_.end(), "scheduler: request {} is not running", s.req.id);
  running_.erase(it);
}

void Scheduler::finish(Seq& s, FinishReason reason) {
  release_memory(s);
  remove_running(s);
  s.state = RequestState::finished;
  s.finish = reason;
}

void Scheduler::preempt_newest(StepPlan& plan, int64_t& budget) {
  Seq& v = *running_.back();
  budget += v.scheduled;  // its work this step is dropped
  release_memory(v);
  running_.pop_back();
  v.state = RequestState::preempted;
  v.admitted_at = -1;
  ++v.preemptions;
  ++total_preemptions_;
  waiting_.push_front(&v);
  plan.preempted.push_back(v.req.id);
}

StepPlan Scheduler::schedule() {
  DI_CHECK(!in_flight_, "scheduler: schedule() called before on_step_done() of step {}", step_);
  StepPlan plan;
  plan.step = ++step_;

  // Cancellations: free the memory, leave the queues.
  for (int64_t id : cancels_) {
    Seq& s = find(id);
    if (!s.live()) continue;
    if (s.state == RequestState::running) {
      remove_running(s);
    } else {
      auto it = std::find(waiting_.begin(), waiting_.end(), &s);
      DI_CHECK(it != waiting_.end(), "scheduler: {} request {} is not in the wait queue", request_state_name(s.state), id);
      waiting_.erase(it);
    }
    release_memory(s);
    s.state = RequestState::cancelled;
    s.finish = FinishReason::cancelled;
    plan.cancelled.push_back(id);
  }
  cancels_.clear();

  int64_t budget = config_.max_num_batched_tokens;
  std::vector<Seq*> order;  // sequences given work, in plan order (some may be preempted later on)
  const std::vector<Seq*> snapshot = running_;

  // 1. Decodes (and any running sequence with exactly one token left to feed), oldest first.
  for (Seq* s : snapshot) {
    if (budget == 0) break;
    if (s->state != RequestState::running || s->pending() != 1) continue;
    while (!kv_.can_append(s->req.id, 1) && s->state == RequestState::running) preempt_newest(plan, budget);
    if (s->state != RequestState::running) continue;
    kv_.append(s->req.id, 1);
    s->scheduled = 1;
    budget -= 1;
    order.push_back(s);
  }

  // 2. Further pieces of partially prefilled sequences, oldest first; a piece shrinks to the KV room
  // left, and only a sequence that has no room for a single token preempts.
  for (Seq* s : snapshot) {
    if (budget == 0) break;
    if (s->state != RequestState::running || s->pending() <= 1) continue;
    while (kv_.appendable_tokens(s->req.id) < 1 && s->state == RequestState::running) preempt_newest(plan, budget);
    if (s->state != RequestState::running) continue;
    const int64_t n = std::min({s->pending(), budget, kv_.appendable_tokens(s->req.id)});
    kv_.append(s->req.id, n);
    s->scheduled = n;
    budget -= n;
    order.push_back(s);
  }

  // 3. Admissions from the front of the queue, first come first served, never over-committing.
  if (plan.preempted.empty()) {
    while (!waiting_.empty() && budget > 0 && num_running() < config_.max_num_seqs && slots_.free_count() > 0) {
      Seq* s = waiting_.front();
      const int64_t n = std::min(s->pending(), budget);
      if (!kv_.can_append(s->req.id, n)) break;  // the head waits; nobody overtakes it
      waiting_.pop_front();
      s->slot = slots_.allocate();
      kv_.append(s->req.id, n);
      s->state = RequestState::running;
      s->admitted_at = admissions_++;
      s->scheduled = n;
      running_.push_back(s);
      budget -= n;
      order.push_back(s);
      plan.admitted.push_back(s->req.id);
    }
  }

  for (Seq* s : order) {
    if (s->state != RequestState::running || s->scheduled == 0) continue;  // preempted after being given work
    StepItem item;
    item.request_id = s->req.id;
    item.slot = s->slot;
    item.start = s->computed;
    item.tokens.reserve(size_t(s->scheduled));
    for (int64_t i = s->computed; i < s->computed + s->scheduled; ++i) item.tokens.push_back(s->token(i));
    item.samples = s->computed + s->scheduled == s->total_len();
    item.decode = s->scheduled == 1 && item.samples && s->computed >= s->prompt_len();
    plan.num_tokens += s->scheduled;
    plan.num_samples += item.samples ? 1 : 0;
    plan.items.push_back(std::move(item));
  }
  in_flight_ = !plan.items.empty();
  return plan;
}

std::vector<int64_t> Scheduler::on_step_done(const StepPlan& plan, std::span<const int32_t> sampled) {
  std::vector<int64_t> finished;
  if (plan.items.empty()) return finished;
  DI_CHECK(in_flight_ && plan.step == step_, "scheduler: on_step_done for step {}, but the step in flight is {}",
           plan.step, in_flight_ ? std::to_string(step_) : std::string("none"));
  DI_CHECK(int64_t(sampled.size()) == plan.num_samples,
           "scheduler: step {} expects {} sampled tokens (one per sampling item), got {}", plan.step,
           plan.num_samples, sampled.size());
  size_t next = 0;
  for (const StepItem& item : plan.items) {
    Seq& s = find(item.request_id);
    DI_CHECK(s.state == RequestState::running && s.scheduled == int64_t(item.tokens.size()) && s.computed == item.start,
             "scheduler: step {} item of request {} does not match its state ({}, {} scheduled, {} computed)",
             plan.step, item.request_id, request_state_name(s.state), s.scheduled, s.computed);
    s.computed += s.scheduled;
    s.scheduled = 0;
    if (!item.samples) continue;
    const int32_t token = sampled[next++];
    if (s.cancel_requested) continue;  // freed by the next schedule()
    s.output.push_back(token);
    const auto& stops = s.req.stop_ids;
    if (std::find(stops.begin(), stops.end(), token) != stops.end()) {
      finish(s, FinishReason::stop);
      finished.push_back(s.req.id);
    } else if (int64_t(s.output.size()) >= s.req.max_new_tokens) {
      finish(s, FinishReason::length);
      finished.push_back(s.req.id);
    }
  }
  in_flight_ = false;
  return finished;
}

bool Scheduler::has_work() const { return !waiting_.empty() || !running_.empty() || !cancels_.empty(); }

RequestState Scheduler::state(int64_t id) const { return find(id).state; }
FinishReason Scheduler::finish_reason(int64_t id) const { return find(id).finish; }
const std::vector<int32_t>& Scheduler::output(int64_t id) const { return find(id).output; }
int64_t Scheduler::preemptions(int64_t id) const { return find(id).preemptions; }
int Scheduler::slot(int64_t id) const { return find(id).slot; }

void Scheduler::forget(int64_t id) {
  const Seq& s = find(id);
  DI_CHECK(!s.live(), "scheduler: forget of request {}, which is still {}", id, request_state_name(s.state));
  seqs_.erase(id);
}

std::vector<int64_t> Scheduler::running() const {
  std::vector<int64_t> ids;
  for (const Seq* s : running_) ids.push_back(s->req.id);
  return ids;
}

std::vector<int64_t> Scheduler::waiting() const {
  std::vector<int64_t> ids;
  for (const Seq* s : waiting_) ids.push_back(s->req.id);
  return ids;
}

void Scheduler::check_invariants() const {
  kv_.check_consistency();
  DI_CHECK(num_running() <= config_.max_num_seqs, "scheduler: {} running > max_num_seqs {}", num_running(),
           config_.max_num_seqs);
  DI_CHECK(slots_.used_count() == num_running(), "scheduler: {} slots in use for {} running sequences",
           slots_.used_count(), num_running());
  DI_CHECK(kv_.num_sequences() == num_running(), "scheduler: {} sequences hold KV blocks, {} are running",
           kv_.num_sequences(), num_running());
  std::vector<bool> slot_seen(size_t(slots_.capacity()), false);
  const Seq* prev = nullptr;
  for (const Seq* s : running_) {
    const int64_t id = s->req.id;
    DI_CHECK(s->state == RequestState::running, "scheduler: request {} in the running list is {}", id,
             request_state_name(s->state));
    DI_CHECK(s->slot >= 0 && s->slot < slots_.capacity() && slots_.in_use(s->slot) && !slot_seen[size_t(s->slot)],
             "scheduler: running request {} has slot {} (not in use, or shared)", id, s->slot);
    slot_seen[size_t(s->slot)] = true;
    DI_CHECK(kv_.has(id) && kv_.tokens(id) == s->computed + s->scheduled,
             "scheduler: running request {} reserves {} KV tokens for {} computed + {} scheduled", id,
             kv_.has(id) ? kv_.tokens(id) : 0, s->computed, s->scheduled);
    // (A cancelled request's sampled token was dropped: it may have nothing left to feed.)
    DI_CHECK(s->pending() >= (s->cancel_requested ? 0 : 1) && s->computed + s->scheduled <= s->total_len(),
             "scheduler: running request {} has {} computed + {} scheduled of {} tokens", id, s->computed,
             s->scheduled, s->total_len());
    if (prev) {
      DI_CHECK(prev->admitted_at < s->admitted_at && prev->arrival < s->arrival,
               "scheduler: running list out of order at request {}", id);
    }
    prev = s;
  }
  for (const Seq* s : waiting_) {
    DI_CHECK(s->state == RequestState::waiting || s->state == RequestState::preempted,
             "scheduler: request {} in the wait queue is {}", s->req.id, request_state_name(s->state));
    DI_CHECK(s->slot < 0 && !kv_.has(s->req.id) && s->computed == 0,
             "scheduler: waiting request {} holds memory", s->req.id);
    // FCFS: the queue is in arrival order and every running sequence arrived before it.
    DI_CHECK(prev == nullptr || prev->arrival < s->arrival, "scheduler: wait queue out of arrival order at request {}",
             s->req.id);
    prev = s;
  }
}

}  // namespace di
