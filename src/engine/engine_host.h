#pragma once
// A served model in one object: the checkpoint, the Ops that run it (CPU or CUDA), its tokenizer,
// the runner and the Engine, sized from the options. What the C ABI (include/deltainfer/engine.h),
// `deltainfer bench-offline` and the server build on.
//
// Sizing. On the GPU, the state pool and the KV cache come from the memory plan
// (engine/memory_plan.h): utilization x the device's memory, less the weights (the checkpoint's
// bytes) and an activation reserve, shared between max_num_seqs state slots and KV blocks; the plan's
// line is logged at start-up. On the CPU, memory grows with use: max_num_seqs slots and
// kv_cache_tokens tokens of KV (default max_num_seqs x max_model_len) only bound the scheduler.
//
// Tensor parallelism (tensor_parallel_size > 1): every rank gets its slice of the weights and its own
// Ops, state pool and KV cache (on GPU r, or a CPU thread), sized alike from rank 0's plan; the
// engine's scheduler drives them all through a TensorParallelRunner.
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "engine/engine.h"
#include "engine/memory_plan.h"
#include "engine/ops_runner.h"
#include "kernels/cpu_ops.h"
#include "model/weights.h"
#include "tokenizer/tokenizer.h"

namespace di {

struct EngineHostOptions {
  std::string model_dir;
  std::string device = "auto";            // auto (cuda when a GPU is visible), cpu or cuda
  Precision cpu_precision = Precision::bf16;
  std::string gdn_prefill_backend;        // empty: production dispatch (GPU only)
  int64_t max_num_seqs = 64;              // sequences running at once
  // Token budget of one step. Prefill steps of 8192 tokens run the 4B at 68.5% MFU on an H200
  // against 64% for 2048, and output throughput at 16 concurrent requests of 1024 tokens in is 3-5%
  // higher (docs/benchmarks/decode.md); it is also vLLM's server default on GPUs of 70 GiB and more.
  int64_t max_num_batched_tokens = 8192;
  int64_t max_waiting = 1024;             // bound of the wait queue
  int64_t max_model_len = 0;              // prompt + output of one request; 0: min(32768, the model's)
  double gpu_memory_utilization = 0.9;    // GPU: fraction of the device's memory the engine may use
  uint64_t activation_reserve_bytes = uint64_t(3) << 30;  // GPU: left for the forward pass
  int64_t kv_cache_tokens = 0;            // CPU: KV bound (0: max_num_seqs x max_model_len)
  bool show_progress = false;             // a progress bar while the checkpoint is read
  int tensor_parallel_size = 1;           // ranks (GPUs 0..N-1, or CPU threads); model/tensor_parallel.h
};

// Whether a CUDA device is visible (always false in a build without CUDA).
bool gpu_visible();

// The ids that end generation: config.json's and generation_config.json's eos_token_id and the
// tokenizer's eos token.
std::vector<int64_t> model_stop_ids(const LoadedModel& model, const Tokenizer* tokenizer);

class EngineHost {
 public:
  // Loads and sizes everything; di::Error naming what was wrong (no model, no GPU, too little memory).
  explicit EngineHost(const EngineHostOptions& options);
  ~EngineHost();
  EngineHost(const EngineHost&) = delete;
  EngineHost& operator=(const EngineHost&) = delete;

  Engine& engine() { return *engine_; }
  const Tokenizer* tokenizer() const { return tokenizer_ ? &*tokenizer_ : nullptr; }
  const ModelConfig& config() const { return loaded_.config; }
  const std::string& device() const { return device_; }
  const SchedulerConfig& scheduler_config() const { return engine_->options().scheduler; }
  // The start-up line: device, slots, KV tokens (and the memory plan on the GPU).
  const std::string& describe() const { return description_; }

  // GPU memory as it stands now (-1 where it does not apply: the CPU engine, or several ranks):
  // the GDN prefill backend's scratch, grown to the largest step so far, and the device's memory in
  // use (every process on it; the engine holds nearly all of it from start-up).
  struct MemoryUse {
    std::string gdn_prefill_backend;  // the backend the dispatch chose (empty: none)
    int64_t gdn_scratch_bytes = -1;
    int64_t device_used_bytes = -1;
  };
  MemoryUse memory_use() const;

 private:
  std::string device_;
  LoadedModel loaded_;
  std::unique_ptr<Ops> ops_;  // one rank: its Ops and model (the ranks of a parallel run hold theirs)
  std::unique_ptr<Qwen35Model> model_;
  std::unique_ptr<HostCollectives> host_group_;  // a parallel CPU run's collectives
  std::shared_ptr<void> device_group_;           // a parallel GPU run's DeviceGroup (CUDA builds)
  std::optional<Tokenizer> tokenizer_;
  std::unique_ptr<ModelRunner> runner_;
  std::unique_ptr<Engine> engine_;
  std::string description_;
};

}  // namespace di
