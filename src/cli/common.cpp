#include "cli/common.h"

#include <algorithm>
#include <cstdlib>
#include <sstream>

#include "core/error.h"
#include "engine/engine_host.h"
#if DI_HAVE_CUDA
#include "core/cuda.h"
#include "engine/cuda_ops.h"
#endif

namespace di::cli {

std::vector<int32_t> parse_ids(const std::string& text, const char* option) {
  std::vector<int32_t> ids;
  std::stringstream in(text);
  std::string item;
  while (std::getline(in, item, ',')) {
    size_t used = 0;
    long long v = 0;
    try {
      v = std::stoll(item, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    while (used < item.size() && item[used] == ' ') ++used;
    if (item.empty() || used != item.size()) fail("{}: '{}' is not an integer token id", option, item);
    if (v < 0 || v > INT32_MAX) fail("{}: token id {} is out of range", option, v);
    ids.push_back(int32_t(v));
  }
  if (ids.empty()) fail("{}: no token ids given", option);
  return ids;
}

void check_ids_in_vocab(const std::vector<int32_t>& ids, int64_t vocab, const char* option) {
  for (size_t i = 0; i < ids.size(); ++i)
    if (ids[i] >= vocab) fail("{}: id {} at index {} is outside the vocabulary of {}", option, ids[i], i, vocab);
}

Precision parse_precision(const std::string& s) {
  if (s == "f32") return Precision::f32;
  if (s == "bf16") return Precision::bf16;
  fail("--precision must be f32 or bf16, found '{}'", s);
}

void ModelOptions::add_to(CLI::App* cmd) {
  cmd->add_option("--model", model_dir, "model directory (config.json + safetensors)")->required();
  cmd->add_option("--device", device, "cpu, cuda, or auto (cuda when a GPU is visible)")
      ->check(CLI::IsMember({"auto", "cpu", "cuda"}))
      ->capture_default_str();
  cmd->add_option("--precision", precision,
                  "CPU activations: bf16 rounds where transformers' bf16 run does, f32 rounds nowhere "
                  "(the GPU runs bf16)")
      ->capture_default_str();
  cmd->add_option("--gdn-prefill-backend", gdn_prefill_backend,
                  "force a GDN prefill backend by name instead of the production dispatch (GPU only)");
  cmd->add_option("--gdn-artifacts", gdn_artifacts,
                  "the flashinfer-sm90 backend's bundle directory (sets DI_GDN_ARTIFACTS; "
                  "tools/artifacts/flashinfer_gdn_sm90/generate.sh writes it)")
      ->check(CLI::ExistingDirectory)
      ->each([](const std::string& dir) { setenv("DI_GDN_ARTIFACTS", dir.c_str(), 1); });
}

void EngineCliOptions::add_to(CLI::App* cmd, bool with_max_model_len) {
  model.add_to(cmd);
  cmd->add_option("--max-num-seqs", max_num_seqs, "sequences the engine runs at once")->capture_default_str();
  cmd->add_option("--max-num-batched-tokens", max_num_batched_tokens, "token budget of one step")
      ->capture_default_str();
  if (with_max_model_len)
    cmd->add_option("--max-model-len", max_model_len, "prompt + output of one request (0: min(32768, the model's))")
        ->capture_default_str();
  cmd->add_option("--gpu-memory-utilization", gpu_memory_utilization,
                  "fraction of the GPU's memory for weights, state pool and KV cache")
      ->capture_default_str();
  cmd->add_option("--tensor-parallel-size", tensor_parallel_size,
                  "ranks: GPUs 0..N-1 (or CPU threads) that each hold a slice of the model")
      ->capture_default_str();
}

EngineHostOptions EngineCliOptions::host_options() const {
  EngineHostOptions h;
  h.model_dir = model.model_dir;
  h.device = model.device;
  h.cpu_precision = parse_precision(model.precision);
  h.gdn_prefill_backend = model.gdn_prefill_backend;
  h.max_num_seqs = max_num_seqs;
  h.max_num_batched_tokens = max_num_batched_tokens;
  h.max_model_len = max_model_len;
  h.gpu_memory_utilization = gpu_memory_utilization;
  h.tensor_parallel_size = tensor_parallel_size;
  h.show_progress = true;
  return h;
}

const Tokenizer& Runner::require_tokenizer(const char* why) const {
  if (!tokenizer)
    fail("{} needs a tokenizer, and the model directory has no tokenizer.json (make-tiny-model copies one; "
         "scripts/setup.sh builds it)", why);
  return *tokenizer;
}

std::vector<int64_t> Runner::stop_ids() const { return model_stop_ids(loaded, tokenizer ? &*tokenizer : nullptr); }

Runner open_model(const ModelOptions& o) {
  const Precision precision = parse_precision(o.precision);
  Runner r;
  r.device = o.device == "auto" ? (gpu_visible() && precision == Precision::bf16 ? "cuda" : "cpu") : o.device;
  if (r.device == "cuda") {
    if (precision != Precision::bf16) fail("--precision {}: the GPU engine runs bf16 only", o.precision);
    if (!DI_HAVE_CUDA) fail("--device cuda: this binary was built without CUDA (nvcc was not found at build time)");
    if (!gpu_visible()) fail("--device cuda: no CUDA device is visible");
  } else if (!o.gdn_prefill_backend.empty()) {
    fail("--gdn-prefill-backend {}: GDN prefill backends run on the GPU (--device cuda)", o.gdn_prefill_backend);
  }
  r.loaded = load_model(o.model_dir, {.show_progress = true});
#if DI_HAVE_CUDA
  if (r.device == "cuda")
    r.ops = std::make_unique<CudaOps>(r.loaded.config, r.loaded.weights,
                                      CudaOpsOptions{.max_slots = 2, .gdn_prefill_backend = o.gdn_prefill_backend});
#endif
  if (!r.ops) r.ops = std::make_unique<CpuOps>(r.loaded.config, precision);
  r.model = std::make_unique<Qwen35Model>(r.loaded.config, r.loaded.weights);
  if (std::filesystem::exists(std::filesystem::path(o.model_dir) / "tokenizer.json"))
    r.tokenizer.emplace(Tokenizer::load(o.model_dir));
  return r;
}

}  // namespace di::cli
