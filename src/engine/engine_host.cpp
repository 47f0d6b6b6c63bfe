#include "engine/engine_host.h"

#include <algorithm>
#include <filesystem>
#include <fstream>

#include <fmt/format.h>
#include <nlohmann/json.hpp>
#include <spdlog/spdlog.h>

#include "core/error.h"
#include "engine/tensor_parallel_runner.h"
#include "model/tensor_parallel.h"
#if DI_HAVE_CUDA
#include "core/cuda.h"
#include "engine/cuda_ops.h"
#include "engine/device_group.h"
#endif

namespace di {

std::vector<int64_t> model_stop_ids(const LoadedModel& model, const Tokenizer* tokenizer) {
  std::vector<int64_t> ids = model.config.eos_token_ids;
  const auto generation_config = model.dir / "generation_config.json";
  if (std::ifstream in{generation_config}) {
    const nlohmann::json j = nlohmann::json::parse(in, nullptr, false);
    if (j.is_discarded()) fail("{}: not valid JSON", generation_config.string());
    if (j.contains("eos_token_id")) {
      const nlohmann::json& e = j["eos_token_id"];
      if (e.is_number_integer()) ids.push_back(e.get<int64_t>());
      else if (e.is_array())
        for (const auto& v : e)
          if (v.is_number_integer()) ids.push_back(v.get<int64_t>());
    }
  }
  if (tokenizer != nullptr && tokenizer->eos_id()) ids.push_back(*tokenizer->eos_id());
  std::sort(ids.begin(), ids.end());
  ids.erase(std::unique(ids.begin(), ids.end()), ids.end());
  return ids;
}

bool gpu_visible() {
#if DI_HAVE_CUDA
  return cuda::device_count() > 0;
#else
  return false;
#endif
}

namespace {

#if DI_HAVE_CUDA
// The checkpoint's bytes: what the weights take on the GPU (bf16 as stored).
uint64_t checkpoint_bytes(const std::filesystem::path& dir) {
  uint64_t total = 0;
  for (const auto& entry : std::filesystem::directory_iterator(dir))
    if (entry.is_regular_file() && entry.path().extension() == ".safetensors") total += entry.file_size();
  return total;
}
// Sampling on the GPU where the logits are (CudaOps::sample): only the ids come back.
OpsModelRunner::DeviceSampler device_sampler(CudaOps& ops) {
  return [&ops](const Tensor& logits, const std::vector<SamplingParams>& params, const std::vector<uint64_t>& steps) {
    std::vector<sampling::SamplingRow> rows;
    for (size_t i = 0; i < params.size(); ++i) rows.push_back(sampling::make_sampling_row(params[i], steps[i]));
    return ops.sample(logits, rows);
  };
}
#endif

// A rank's model and runner over its Ops and weights.
void finish_rank(TensorParallelRunner::Rank& r, OpsModelRunner::DeviceSampler sampler) {
  r.model = std::make_unique<Qwen35Model>(r.weights->config, r.weights->weights);
  r.runner = std::make_unique<OpsModelRunner>(*r.model, *r.ops, std::move(sampler));
}

}  // namespace

EngineHost::EngineHost(const EngineHostOptions& o) {
  if (o.max_num_seqs < 1) fail("max_num_seqs must be >= 1, found {}", o.max_num_seqs);
  if (o.max_num_batched_tokens < 1) fail("max_num_batched_tokens must be >= 1, found {}", o.max_num_batched_tokens);
  if (o.max_waiting < 0) fail("max_waiting must be >= 0, found {}", o.max_waiting);
  if (!(o.gpu_memory_utilization > 0.0 && o.gpu_memory_utilization <= 1.0))
    fail("gpu_memory_utilization must be in (0, 1], found {}", o.gpu_memory_utilization);
  device_ = o.device == "auto" ? (gpu_visible() && o.cpu_precision == Precision::bf16 ? "cuda" : "cpu") : o.device;
  if (device_ != "cpu" && device_ != "cuda") fail("device '{}': use auto, cpu or cuda", o.device);
  if (device_ == "cuda") {
    if (!DI_HAVE_CUDA) fail("device cuda: this build has no CUDA (nvcc was not found at build time)");
    if (!gpu_visible()) fail("device cuda: no CUDA device is visible");
  } else if (!o.gdn_prefill_backend.empty()) {
    fail("GDN prefill backend {}: the backends run on the GPU (device cuda)", o.gdn_prefill_backend);
  }

  loaded_ = load_model(o.model_dir, {.show_progress = o.show_progress});
  const ModelConfig& c = loaded_.config;
  const int64_t max_model_len =
      o.max_model_len > 0 ? o.max_model_len : std::min<int64_t>(32768, c.max_position_embeddings);
  if (max_model_len > c.max_position_embeddings)
    fail("max_model_len {} exceeds the model's max_position_embeddings {}", max_model_len, c.max_position_embeddings);
  if (std::filesystem::exists(loaded_.dir / "tokenizer.json")) tokenizer_.emplace(Tokenizer::load(loaded_.dir));

  const int tp = o.tensor_parallel_size;
  if (const std::string why = tensor_parallel_unsupported(c, tp); !why.empty()) fail("{}", why);
  // What every rank sees: the whole model, or its slice of it.
  const ModelConfig rank_c = tp > 1 ? rank_config(c, tp) : c;

  SchedulerConfig sc;
  sc.block_size = 64;
  sc.max_num_batched_tokens = o.max_num_batched_tokens;
  sc.max_waiting = o.max_waiting;
  sc.max_model_len = max_model_len;
  TensorParallelRunner::MakeRank make_rank;
  std::function<void()> abort_ranks;
#if DI_HAVE_CUDA
  if (device_ == "cuda") {
    std::shared_ptr<DeviceGroup> group;
    if (tp > 1) {
      group = std::make_shared<DeviceGroup>(tp);
      device_group_ = group;
      abort_ranks = [group] { group->abort(); };
    }
    const cuda::DeviceInfo gpu = cuda::current_device();
    MemoryBudget budget;
    budget.device_total_bytes = gpu.total_memory;
    budget.utilization = o.gpu_memory_utilization;
    budget.resident_bytes = checkpoint_bytes(loaded_.dir) / uint64_t(tp);  // each rank's slice (norms are small)
    budget.activation_reserve_bytes = o.activation_reserve_bytes;
    budget.max_num_seqs = o.max_num_seqs;
    budget.max_model_len = max_model_len;
    budget.block_size = sc.block_size;
    budget.conv_columns = c.linear_conv_kernel_dim;  // CudaOps keeps the conv state kernel-wide
    const MemoryPlan plan = plan_memory(rank_c, budget);
    sc.num_state_slots = plan.num_state_slots;
    sc.num_kv_blocks = plan.num_kv_blocks;
    const CudaOpsOptions ops_options{.max_slots = int(plan.num_state_slots),
                                     .kv_cache_tokens = plan.kv_tokens(),
                                     .kv_block_size = int(sc.block_size),
                                     .gdn_prefill_backend = o.gdn_prefill_backend};
    if (tp == 1) {
      ops_ = std::make_unique<CudaOps>(c, loaded_.weights, ops_options);
    } else {
      make_rank = [this, tp, ops_options, group](int rank) {
        DI_CUDA_CHECK(cudaSetDevice(rank));
        TensorParallelRunner::Rank r;
        r.weights = std::make_unique<RankWeights>(shard_weights(loaded_.config, loaded_.weights, tp, rank));
        CudaOpsOptions ro = ops_options;
        ro.group = group.get();
        ro.rank = rank;
        auto ops = std::make_unique<CudaOps>(r.weights->config, r.weights->weights, ro);
        OpsModelRunner::DeviceSampler sampler = device_sampler(*ops);
        r.ops = std::move(ops);
        finish_rank(r, std::move(sampler));
        return r;
      };
    }
    description_ = fmt::format("engine on {}{}: {}{}", cuda::describe(gpu), tp > 1 ? fmt::format(" x{}", tp) : "",
                               plan.describe(), tp > 1 ? " per rank" : "");
  }
#endif
  if (device_ == "cpu") {
    const int64_t kv_tokens = o.kv_cache_tokens > 0 ? o.kv_cache_tokens : o.max_num_seqs * max_model_len;
    sc.num_state_slots = o.max_num_seqs;
    sc.num_kv_blocks = (kv_tokens + sc.block_size - 1) / sc.block_size;
    if (sc.num_kv_blocks * sc.block_size < max_model_len)
      fail("kv_cache_tokens {} is less than max_model_len {}: not one full-length request would fit", kv_tokens,
           max_model_len);
    if (tp == 1) {
      ops_ = std::make_unique<CpuOps>(c, o.cpu_precision);
    } else {
      host_group_ = std::make_unique<HostCollectives>(tp);
      abort_ranks = [g = host_group_.get()] { g->abort(); };
      make_rank = [this, tp, precision = o.cpu_precision](int rank) {
        TensorParallelRunner::Rank r;
        r.weights = std::make_unique<RankWeights>(shard_weights(loaded_.config, loaded_.weights, tp, rank));
        r.ops = std::make_unique<CpuOps>(r.weights->config, precision, host_group_.get(), rank);
        finish_rank(r, {});
        return r;
      };
    }
    description_ = fmt::format("engine on the CPU ({}{}): {} sequences, {} tokens of KV cache, max_model_len {}",
                               o.cpu_precision == Precision::bf16 ? "bf16" : "f32",
                               tp > 1 ? fmt::format(", {} ranks", tp) : "", sc.num_state_slots,
                               sc.num_kv_blocks * sc.block_size, max_model_len);
  }
  sc.max_num_seqs = sc.num_state_slots;
  if (tp == 1) {
    model_ = std::make_unique<Qwen35Model>(c, loaded_.weights);
    OpsModelRunner::DeviceSampler sampler;
#if DI_HAVE_CUDA
    if (auto* cuda_ops = dynamic_cast<CudaOps*>(ops_.get())) sampler = device_sampler(*cuda_ops);
#endif
    runner_ = std::make_unique<OpsModelRunner>(*model_, *ops_, std::move(sampler));
  } else {
    runner_ = std::make_unique<TensorParallelRunner>(tp, make_rank, abort_ranks);
  }
  EngineOptions eo{.scheduler = sc};
  for (int64_t id : model_stop_ids(loaded_, tokenizer())) eo.eos_ids.push_back(int32_t(id));
  engine_ = std::make_unique<Engine>(*runner_, c.vocab_size, eo, tokenizer());
  spdlog::info("{}", description_);
}

EngineHost::~EngineHost() {
  engine_.reset();  // the worker stops before the runner and the ops go
  runner_.reset();
}

EngineHost::MemoryUse EngineHost::memory_use() const {
  MemoryUse m;
#if DI_HAVE_CUDA
  if (const auto* cuda_ops = dynamic_cast<const CudaOps*>(ops_.get())) {
    m.gdn_prefill_backend = cuda_ops->gdn_prefill_backend().name;
    m.gdn_scratch_bytes = int64_t(cuda_ops->gdn_scratch_bytes());
    size_t free = 0, total = 0;
    if (cudaMemGetInfo(&free, &total) == cudaSuccess) m.device_used_bytes = int64_t(total - free);
  }
#endif
  return m;
}

}  // namespace di
