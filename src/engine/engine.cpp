#include "engine/engine.h"

#include <algorithm>
#include <chrono>
#include <exception>

#include <fmt/format.h>

#include "core/error.h"
#include <spdlog/spdlog.h>

namespace di {

// A request as the engine follows it: its events not yet read, and the text streamed so far.
// A request that ends outside the scheduler's own finish (a stop string, a failed step) is cancelled
// there, and its final event waits in `pending_final` until the next step has freed its memory: a
// reader who has the final event may rely on the memory being free.
struct Engine::Live {
  int64_t id = 0;
  GenerationRequest request;
  std::deque<TokenEvent> events;
  bool ended = false;            // no more tokens: the final event is queued or pending
  bool final_queued = false;
  std::optional<TokenEvent> pending_final;
  std::vector<int32_t> output;   // tokens generated
  std::optional<StreamDecoder> decoder;  // tokenizer set: their text, whole UTF-8 characters only
  std::string text;              // that text so far
  size_t emitted = 0;            // bytes of `text` already sent
};


Engine::Engine(ModelRunner& runner, int64_t vocab_size, const EngineOptions& options, const Tokenizer* tokenizer)
    : runner_(runner), vocab_size_(vocab_size), tokenizer_(tokenizer), options_(options), scheduler_(options.scheduler) {
  worker_ = std::thread([this] { loop(); });
}

Engine::~Engine() {
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
  }
  work_.notify_all();
  worker_.join();
  std::lock_guard lock(mutex_);
  for (auto& [id, r] : requests_)
    if (!r->final_queued)
      emit(*r, TokenEvent{.finished = true, .reason = FinishReason::cancelled, .error = "the engine stopped"});
  events_.notify_all();
}

Submitted Engine::submit_text(const std::string& prompt, GenerationRequest request) {
  if (tokenizer_ == nullptr) {
    std::lock_guard lock(mutex_);
    const int64_t id = next_id_++;
    auto r = std::make_unique<Live>();
    r->id = id;
    const std::string why = "a text prompt needs the model's tokenizer, and this engine has none";
    emit(*r, TokenEvent{.finished = true, .reason = FinishReason::rejected, .error = why});
    requests_.emplace(id, std::move(r));
    return {id, {SubmitStatus::invalid, why}};
  }
  request.prompt = tokenizer_->encode(prompt);
  return submit(std::move(request));
}

Submitted Engine::submit(GenerationRequest request) {
  std::string invalid;
  try {
    validate(request.sampling);
  } catch (const std::exception& e) {
    invalid = e.what();
  }
  if (invalid.empty() && !request.stop_strings.empty() && tokenizer_ == nullptr)
    invalid = "stop strings need the model's tokenizer, and this engine has none";
  if (invalid.empty())
    for (const std::string& s : request.stop_strings)
      if (s.empty()) invalid = "a stop string is empty";
  const int64_t vocab = vocab_size_;
  if (invalid.empty())
    for (int32_t t : request.prompt)
      if (t < 0 || t >= vocab) {
        invalid = fmt::format("prompt token id {} is outside the vocabulary [0, {})", t, vocab);
        break;
      }

  std::unique_lock lock(mutex_);
  const int64_t id = next_id_++;
  auto r = std::make_unique<Live>();
  r->id = id;
  Submitted out{id, {}};
  if (invalid.empty() && !failure_.empty()) invalid = "the engine stopped serving after a failure: " + failure_;
  if (!invalid.empty()) {
    out.result = {SubmitStatus::invalid, invalid};
  } else {
    Request sched{.id = id, .prompt = request.prompt, .max_new_tokens = request.max_tokens, .stop_ids = request.stop_ids};
    if (!request.ignore_eos) sched.stop_ids.insert(sched.stop_ids.end(), options_.eos_ids.begin(), options_.eos_ids.end());
    out.result = scheduler_.submit(std::move(sched));
    if (!out.result.accepted()) scheduler_.forget(id);
  }
  if (!out.result.accepted()) emit(*r, TokenEvent{.finished = true, .reason = FinishReason::rejected, .error = out.result.reason});
  r->request = std::move(request);
  requests_.emplace(id, std::move(r));
  lock.unlock();
  if (out.result.accepted()) work_.notify_all();
  return out;
}

bool Engine::cancel(int64_t id) {
  {
    std::lock_guard lock(mutex_);
    auto it = requests_.find(id);
    if (it == requests_.end() || it->second->ended) return false;
    if (!scheduler_.cancel(id)) return false;
    it->second->ended = true;  // a token of the step in flight is dropped; the final event comes
                               // with the step that frees the memory
  }
  work_.notify_all();
  return true;
}

std::optional<TokenEvent> Engine::next(int64_t id, std::chrono::milliseconds timeout) {
  std::unique_lock lock(mutex_);
  auto it = requests_.find(id);
  DI_CHECK(it != requests_.end(), "engine: unknown request id {} (never submitted, or its final event was read)", id);
  Live* r = it->second.get();  // stays valid: only this call erases it
  if (!events_.wait_for(lock, timeout, [&] { return !r->events.empty(); })) return std::nullopt;
  TokenEvent event = std::move(r->events.front());
  r->events.pop_front();
  if (event.finished) requests_.erase(id);
  return event;
}

EngineStats Engine::stats() const {
  std::lock_guard lock(mutex_);
  EngineStats s;
  s.running = scheduler_.num_running();
  s.waiting = scheduler_.num_waiting();
  s.free_slots = scheduler_.slots().free_count();
  s.total_slots = scheduler_.slots().capacity();
  s.free_kv_blocks = scheduler_.kv().free_blocks();
  s.total_kv_blocks = scheduler_.kv().num_blocks();
  s.steps = steps_;
  s.preemptions = scheduler_.total_preemptions();
  s.runner_slots = runner_slots_;
  s.runner_seconds = runner_seconds_;
  return s;
}

Engine::Live* Engine::find_live(int64_t id) {
  auto it = requests_.find(id);
  return it == requests_.end() ? nullptr : it->second.get();
}

void Engine::emit(Live& r, TokenEvent event) {
  if (event.finished) r.ended = r.final_queued = true;
  r.events.push_back(std::move(event));
}

void Engine::end_early(Live& r, TokenEvent final_event) {
  r.ended = true;
  r.pending_final = std::move(final_event);
  scheduler_.cancel(r.id);
}

// Appends the new token's text to the request's text and puts into `event` what can be sent: all
// but the tail that may still grow into a stop string, or, when a stop string appears, the text
// before it (then true). At the request's end (`last`), nothing is held back. Ids past the
// tokenizer's vocabulary (the embedding's padding rows) have no text.
bool Engine::stream_text(Live& r, int32_t token, bool last, TokenEvent& event) {
  if (tokenizer_ == nullptr) return false;
  if (!r.decoder) r.decoder.emplace(*tokenizer_, /*skip_special=*/true);
  if (token >= 0 && token < tokenizer_->vocab_size()) r.text += r.decoder->push(token);
  if (last) r.text += r.decoder->finish();
  size_t longest = 0;
  size_t stop_at = std::string::npos;
  for (const std::string& s : r.request.stop_strings) {
    longest = std::max(longest, s.size());
    const size_t from = r.emitted >= s.size() ? r.emitted - s.size() + 1 : 0;
    stop_at = std::min(stop_at, r.text.find(s, from));
  }
  if (stop_at != std::string::npos) {
    event.text = r.emitted < stop_at ? r.text.substr(r.emitted, stop_at - r.emitted) : std::string();
    r.emitted = std::max(r.emitted, stop_at);
    return true;
  }
  const size_t hold = last || longest == 0 ? 0 : std::min(longest - 1, r.text.size());
  const size_t end = r.text.size() - hold;
  if (end > r.emitted) {
    event.text = r.text.substr(r.emitted, end - r.emitted);
    r.emitted = end;
  }
  return false;
}

void Engine::loop() {
  try {
    serve();
  } catch (const std::exception& e) {
    // A broken invariant of the engine's own books: stop serving, and say so to every request.
    std::lock_guard lock(mutex_);
    failure_ = e.what();
    spdlog::error("engine: stopped serving: {}", failure_);
    for (auto& [id, r] : requests_)
      if (!r->final_queued)
        emit(*r, TokenEvent{.finished = true, .reason = FinishReason::cancelled, .error = "engine failure: " + failure_});
    events_.notify_all();
  }
}

void Engine::serve() {
  std::unique_lock lock(mutex_);
  while (true) {
    work_.wait(lock, [&] { return stopping_ || scheduler_.has_work(); });
    if (stopping_) break;
    StepPlan plan = scheduler_.schedule();
    ++steps_;
    // The runner is the worker's alone: requests enter it when first admitted, leave it when their
    // memory is freed.
    for (int64_t id : plan.cancelled) {
      if (in_runner_.erase(id) > 0) runner_.remove(id);
      if (Live* r = find_live(id); r != nullptr && !r->final_queued)
        emit(*r, r->pending_final ? *r->pending_final : TokenEvent{.finished = true, .reason = FinishReason::cancelled});
      scheduler_.forget(id);
    }
    for (int64_t id : plan.preempted) runner_.drop_state(id);
    for (int64_t id : plan.admitted) {
      const Live* r = find_live(id);
      DI_CHECK(r != nullptr, "engine: admitted request {} has no record", id);
      if (in_runner_.insert(id).second) runner_.add(id, r->request.sampling);
    }
    runner_slots_ = runner_.live_slots();
    if (!plan.cancelled.empty()) events_.notify_all();
    if (plan.empty()) {
      // Nothing could run (the head of the queue waits for memory that a cancel frees next step).
      work_.wait_for(lock, std::chrono::milliseconds(1));
      continue;
    }

    lock.unlock();
    std::vector<int32_t> sampled;
    std::string failure;
    const auto run_start = std::chrono::steady_clock::now();
    try {
      sampled = runner_.run(plan);
    } catch (const std::exception& e) {
      failure = e.what();
    }
    const double run_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - run_start).count();
    lock.lock();
    runner_seconds_ += run_seconds;

    if (!failure.empty()) {
      // The step itself failed (a device error): every request in it ends, with the reason.
      spdlog::error("engine: step {} failed: {}", plan.step, failure);
      for (const StepItem& item : plan.items)
        if (Live* r = find_live(item.request_id); r != nullptr && !r->ended)
          end_early(*r, TokenEvent{.finished = true, .reason = FinishReason::cancelled,
                                   .error = "the model step failed: " + failure});
      sampled.assign(size_t(plan.num_samples), 0);
    }
    const std::vector<int64_t> finished = scheduler_.on_step_done(plan, sampled);
    std::vector<std::optional<TokenLogprobs>> logprobs;
    if (failure.empty()) logprobs = runner_.last_logprobs();

    size_t next = 0;
    for (const StepItem& item : plan.items) {
      if (!item.samples) continue;
      const size_t index = next++;
      const int32_t token = sampled[index];
      Live* live = find_live(item.request_id);
      if (live == nullptr || live->ended) continue;  // cancelled, stopped by a string, or failed meanwhile
      Live& r = *live;
      r.output.push_back(token);
      TokenEvent event{.token = token};
      if (index < logprobs.size()) event.logprobs = logprobs[index];
      const bool done = std::find(finished.begin(), finished.end(), item.request_id) != finished.end();
      bool stopped = false;
      try {
        stopped = stream_text(r, token, done, event);
      } catch (const std::exception& e) {  // never expected: text is a convenience, the token stands
        spdlog::warn("engine: request {}: no text for token {}: {}", r.id, token, e.what());
      }
      if (stopped) {
        if (done) {  // the scheduler finished it with this token anyway: its memory is free now
          event.finished = true;
          event.reason = FinishReason::stop;
        } else {     // the text before the stop string now, the final event once its memory is freed
          emit(r, std::move(event));
          end_early(r, TokenEvent{.finished = true, .reason = FinishReason::stop});
          continue;
        }
      } else if (done) {
        event.finished = true;
        event.reason = scheduler_.finish_reason(item.request_id);
      }
      emit(r, std::move(event));
    }
    for (int64_t id : finished) {
      if (in_runner_.erase(id) > 0) runner_.remove(id);
      scheduler_.forget(id);
    }
    runner_slots_ = runner_.live_slots();
    events_.notify_all();
  }
}

}  // namespace di
