#pragma once
// The serving engine: many requests at once on one model and one Ops, through the continuous-
// batching Scheduler, on a worker thread of its own. Thread-safe: any thread may submit, read a
// request's stream of tokens, or cancel it (docs/runtime.md).
//
//   OpsModelRunner runner(model, ops);
//   Engine engine(runner, config.vocab_size, options, &tokenizer);
//   const Submitted s = engine.submit({.prompt = ids, .max_tokens = 64});
//   while (auto event = engine.next(s.id, 1s)) { ... if (event->finished) break; }
//
// A request ends with one final event (finished set): a stop token, a stop string, max_tokens, a
// cancel, a failed step, or a rejection at submit. When it arrives, the request's state slot and KV
// blocks are free again. After it the engine forgets the request.
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "engine/model_runner.h"
#include "engine/scheduler.h"
#include "tokenizer/tokenizer.h"

namespace di {

struct GenerationRequest {
  std::vector<int32_t> prompt;            // token ids, at least one (submit_text tokenizes text)
  int64_t max_tokens = 16;                // at least 1
  SamplingParams sampling;                // its seed makes the request's draws reproducible
  std::vector<int32_t> stop_ids;          // generation ends after emitting one of these
  std::vector<std::string> stop_strings;  // ... or when the text generated so far contains one
  bool ignore_eos = false;                // true: the engine's end-of-sequence ids do not stop it
};

struct EngineOptions {
  SchedulerConfig scheduler;      // state slots, KV blocks, token budget, queue bound
  std::vector<int32_t> eos_ids;   // stop every request unless it sets ignore_eos
};

struct TokenEvent {
  int32_t token = -1;          // the new token; -1 on a final event that carries none
  std::string text;            // the text this token completes (tokenizer set; bytes of an
                               // unfinished UTF-8 character, and a tail that may become a stop
                               // string, wait for the next token)
  bool finished = false;       // the request's last event
  FinishReason reason = FinishReason::none;  // when finished
  std::string error;           // why it was rejected
  std::optional<TokenLogprobs> logprobs;  // when the request asked (SamplingParams::logprobs >= 0)
};

struct Submitted {
  int64_t id = -1;
  SubmitResult result;  // accepted, or queue_full / invalid with the reason
};

struct EngineStats {
  int64_t running = 0, waiting = 0;
  int64_t free_slots = 0, total_slots = 0;
  int64_t free_kv_blocks = 0, total_kv_blocks = 0;
  int64_t steps = 0, preemptions = 0;
  int64_t runner_slots = 0;  // Ops slots the runner holds
  // Seconds the worker spent in the model runner (the forward step and its sampling, to the tokens
  // on the host), all steps together. The rest of a busy worker's time is the host's bookkeeping
  // between steps, while the GPU waits.
  double runner_seconds = 0;
};

class Engine {
 public:
  // `runner` (only the engine's worker thread uses it) and `tokenizer` (optional: text prompts and
  // stop strings need it) outlive the engine. Starts the worker thread.
  Engine(ModelRunner& runner, int64_t vocab_size, const EngineOptions& options, const Tokenizer* tokenizer = nullptr);
  // Stops the worker after the step in flight; requests still live end cancelled.
  ~Engine();
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  // Queues a request. A rejected one (queue full, invalid parameters) still gets an id, whose only
  // event is the final one with the reason.
  Submitted submit(GenerationRequest request);
  // The same with the prompt as text (needs the tokenizer).
  Submitted submit_text(const std::string& prompt, GenerationRequest request);
  // Cancels a live request: its memory is freed at the next step and its stream ends with reason
  // cancelled. False when the id is unknown or already finished.
  bool cancel(int64_t id);
  // The request's next event, waiting at most `timeout`; nullopt on timeout. di::Error for an id
  // the engine does not know (never submitted, or its final event already read).
  std::optional<TokenEvent> next(int64_t id, std::chrono::milliseconds timeout);

  EngineStats stats() const;
  const EngineOptions& options() const { return options_; }

 private:
  struct Live;
  void loop();   // the worker thread: serve(), and the end of every request if it throws
  void serve();
  Live* find_live(int64_t id);  // null once its final event was read
  void emit(Live& r, TokenEvent event);
  void end_early(Live& r, TokenEvent final_event);
  bool stream_text(Live& r, int32_t token, bool last, TokenEvent& event);

  ModelRunner& runner_;
  int64_t vocab_size_;
  const Tokenizer* tokenizer_;
  EngineOptions options_;
  std::unordered_set<int64_t> in_runner_;  // requests the runner knows (worker thread only)

  mutable std::mutex mutex_;
  std::condition_variable work_;    // the worker: new requests or cancels
  std::condition_variable events_;  // readers: new events
  Scheduler scheduler_;
  std::unordered_map<int64_t, std::unique_ptr<Live>> requests_;
  int64_t next_id_ = 1;
  int64_t steps_ = 0;
  double runner_seconds_ = 0;
  int64_t runner_slots_ = 0;
  bool stopping_ = false;
  std::string failure_;  // set when the worker stopped on an error
  std::thread worker_;
};

}  // namespace di
