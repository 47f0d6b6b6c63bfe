#pragma once
// The ModelRunner of a tensor-parallel model (model/tensor_parallel.h): `size` ranks, one thread
// each, every rank an OpsModelRunner over its own Ops (a CudaOps on its GPU joined by NCCL, or a
// CpuOps joined by HostCollectives) and its slice of the weights.
//
// The scheduler runs on the caller's thread (rank 0's engine) and drives every rank: each notice
// and each step goes to all ranks at once, and the call returns when all are done. Every rank
// samples from the same gathered logits with the same per-request generator, so all draw the same
// token; the runner checks that they agree (a disagreement means the ranks' logits differ, which
// the collectives rule out) and returns rank 0's.
//
// A rank that throws aborts the collectives at once (so that no rank waits for ever on a peer that
// is gone), and the call rethrows the first rank's error; the runner is unusable afterwards.
#include <atomic>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <vector>

#include "engine/model_runner.h"
#include "engine/ops_runner.h"
#include "engine/qwen35_model.h"
#include "model/tensor_parallel.h"

namespace di {

class TensorParallelRunner final : public ModelRunner {
 public:
  // What one rank holds, made and destroyed on that rank's thread (a CUDA rank selects its device
  // there first, and its device memory, streams and graphs live on that thread's device).
  struct Rank {
    std::unique_ptr<RankWeights> weights;  // the model below reads these
    std::unique_ptr<Ops> ops;
    std::unique_ptr<Qwen35Model> model;
    std::unique_ptr<OpsModelRunner> runner;
  };
  using MakeRank = std::function<Rank(int rank)>;

  // Starts `size` threads and makes every rank (a failure in any is rethrown here). `abort` breaks
  // the collectives' waits; it is called from the failing rank's thread.
  TensorParallelRunner(int size, const MakeRank& make, std::function<void()> abort);
  ~TensorParallelRunner() override;
  TensorParallelRunner(const TensorParallelRunner&) = delete;
  TensorParallelRunner& operator=(const TensorParallelRunner&) = delete;

  int size() const { return int(workers_.size()); }

  void add(int64_t id, const SamplingParams& sampling) override;
  void drop_state(int64_t id) override;
  void remove(int64_t id) override;
  int64_t live_slots() const override { return live_slots_; }
  std::vector<int32_t> run(const StepPlan& plan) override;
  std::vector<std::optional<TokenLogprobs>> last_logprobs() const override { return logprobs_; }

  // Runs fn on every rank's thread and waits for all (tests read the ranks' Ops this way).
  void on_every_rank(const std::function<void(int rank, Rank& parts)>& fn);

 private:
  struct Worker;
  void fail_rank(std::exception_ptr error);

  std::vector<std::unique_ptr<Worker>> workers_;
  std::function<void()> abort_;
  std::mutex error_mutex_;
  std::exception_ptr first_error_;  // the first rank's failure; sticky
  std::atomic<int64_t> live_slots_ = 0;
  std::vector<std::optional<TokenLogprobs>> logprobs_;  // rank 0's, of the last step  // read by the engine's statistics
};

}  // namespace di
