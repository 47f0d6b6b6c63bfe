#pragma once
// Continuous batching for the hybrid model: every step feeds a batch of pieces (one decode token of
// a running sequence, or a piece of a prompt) within a token budget, over two kinds of memory: a
// state slot per running sequence (GDN conv and recurrent state) and paged KV blocks (attention).
//
// Policies (docs/runtime.md):
//  - budget order: decode tokens of running sequences first (oldest admitted first), then pieces of
//    partially prefilled sequences, then new admissions from the front of the wait queue;
//  - admission is first-come-first-served and never over-commits: the head of the queue is
//    admitted only when a slot is free, fewer than max_num_seqs run, and the KV blocks for its
//    first piece are free; otherwise admission stops for this step (no overtaking);
//  - a long prompt is prefilled in pieces in the same slot, so the state carries across pieces;
//  - when a running sequence cannot get the KV block it needs, the most recently admitted running
//    sequence is preempted (its slot and blocks freed, its work dropped from this step) and goes
//    back to the FRONT of the wait queue; it is later prefilled again from its prompt and the
//    tokens it already generated (recompute: a GDN state cannot be rebuilt any other way);
//    no new admission happens in a step that preempted;
//  - cancel() marks a request; the next schedule() frees its memory;
//  - the wait queue is bounded: submit() answers queue_full when it holds max_waiting requests
//    (preempted ones included; they always re-enter it).
// Single-threaded: the Engine's loop calls schedule(), runs the plan, then on_step_done().
#include <cstdint>
#include <deque>
#include <memory>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

#include "engine/kv_blocks.h"
#include "engine/state_slots.h"

namespace di {

enum class RequestState : uint8_t { waiting, running, preempted, finished, cancelled, rejected };
enum class FinishReason : uint8_t { none, stop, length, cancelled, rejected };
const char* request_state_name(RequestState state);
const char* finish_reason_name(FinishReason reason);

struct Request {
  int64_t id = 0;                  // unique among the scheduler's requests
  std::vector<int32_t> prompt;     // at least one token
  int64_t max_new_tokens = 16;     // at least 1
  std::vector<int32_t> stop_ids;   // generation ends after emitting one of these
};

struct SchedulerConfig {
  int64_t num_state_slots = 0;           // state pool size
  int64_t num_kv_blocks = 0;             // KV cache size in blocks
  int64_t block_size = 64;               // tokens per KV block
  int64_t max_num_seqs = 0;              // sequences running at once; 0: num_state_slots
  int64_t max_num_batched_tokens = 2048; // token budget of one step
  int64_t max_waiting = 1024;            // bound of the wait queue
  int64_t max_model_len = 0;             // prompt + max_new_tokens of a request; 0: the whole KV cache
};

enum class SubmitStatus : uint8_t { accepted, queue_full, invalid };
struct SubmitResult {
  SubmitStatus status = SubmitStatus::accepted;
  std::string reason;  // why it was rejected
  bool accepted() const { return status == SubmitStatus::accepted; }
};

// One sequence's share of a step.
struct StepItem {
  int64_t request_id = 0;
  int slot = -1;                // its state slot (the same for every piece of a sequence)
  int64_t start = 0;            // tokens of the sequence already in its state and KV cache
  std::vector<int32_t> tokens;  // fed this step: tokens [start, start + size) of prompt + output
  bool decode = false;          // a single generated token on top of a complete state
  bool samples = false;         // this step yields its next token (a decode, or a prefill's last piece)
};

struct StepPlan {
  int64_t step = 0;
  std::vector<StepItem> items;     // decodes, then prefill continuations, then admissions
  int64_t num_tokens = 0;          // sum of the items' tokens (<= the budget)
  int64_t num_samples = 0;         // items with samples set
  std::vector<int64_t> admitted;   // admitted this step, in order (re-admissions included)
  std::vector<int64_t> preempted;  // preempted this step, in order
  std::vector<int64_t> cancelled;  // cancelled requests whose memory this step freed
  bool empty() const { return items.empty(); }
};

class Scheduler {
 public:
  explicit Scheduler(const SchedulerConfig& config);
  ~Scheduler();
  Scheduler(const Scheduler&) = delete;
  Scheduler& operator=(const Scheduler&) = delete;

  // Queues a request (state waiting), or rejects it (state rejected) because the wait queue is full
  // or the request is invalid (empty prompt, max_new_tokens < 1, longer than max_model_len). A
  // duplicate id is a di::Error.
  SubmitResult submit(Request request);
  // Marks a waiting, running or preempted request cancelled; the next schedule() frees its memory
  // and drops it. Tokens sampled for it meanwhile are dropped. False when it is not live.
  bool cancel(int64_t id);

  // The next step. A non-empty plan must be followed by on_step_done before the next schedule().
  StepPlan schedule();
  // Takes one sampled token per item with `samples` set, in plan order: appends them, finishes
  // requests on a stop token or max_new_tokens and frees their memory. Returns the finished ids.
  std::vector<int64_t> on_step_done(const StepPlan& plan, std::span<const int32_t> sampled);

  bool has_work() const;  // anything waiting, running, or a cancel to process

  // Per request (di::Error for an unknown id).
  RequestState state(int64_t id) const;
  FinishReason finish_reason(int64_t id) const;
  const std::vector<int32_t>& output(int64_t id) const;
  int64_t preemptions(int64_t id) const;
  int slot(int64_t id) const;            // -1 unless running
  // Drops the record of a request that is finished, cancelled or rejected (di::Error otherwise).
  void forget(int64_t id);

  std::vector<int64_t> running() const;  // in admission order
  std::vector<int64_t> waiting() const;  // in queue order (preempted ones included)
  int64_t num_running() const { return int64_t(running_.size()); }
  int64_t num_waiting() const { return int64_t(waiting_.size()); }
  int64_t total_preemptions() const { return total_preemptions_; }

  const SchedulerConfig& config() const { return config_; }
  const KvBlockAllocator& kv() const { return kv_; }  // block tables for the GPU side
  const StateSlotPool& slots() const { return slots_; }

  // Checks every bookkeeping invariant (memory held only by running sequences and exactly what
  // they need, FCFS order of the queues, limits); di::Error naming the first that fails.
  void check_invariants() const;

 private:
  struct Seq;
  Seq& find(int64_t id) const;
  void release_memory(Seq& s);
  void remove_running(Seq& s);
  void preempt_newest(StepPlan& plan, int64_t& budget);
  void finish(Seq& s, FinishReason reason);

  SchedulerConfig config_;
  KvBlockAllocator kv_;
  StateSlotPool slots_;
  std::unordered_map<int64_t, std::unique_ptr<Seq>> seqs_;
  std::deque<Seq*> waiting_;     // FCFS; preempted sequences go back to the front
  std::vector<Seq*> running_;    // admission order
  std::vector<int64_t> cancels_; // cancel() calls not yet processed
  int64_t arrivals_ = 0;
  int64_t admissions_ = 0;
  int64_t step_ = 0;
  bool in_flight_ = false;
  int64_t total_preemptions_ = 0;
};

}  // namespace di
