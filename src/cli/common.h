#pragma once
// What the subcommands share: option groups, parsing helpers, and a loaded model with its ops and
// (when the model directory has one) its tokenizer.
#include <CLI/CLI.hpp>

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "engine/engine_host.h"
#include "engine/qwen35_model.h"
#include "kernels/cpu_ops.h"
#include "model/weights.h"
#include "tokenizer/tokenizer.h"

namespace di::cli {

// "1,2,3" -> ids; `option` names the flag in errors.
std::vector<int32_t> parse_ids(const std::string& text, const char* option);
void check_ids_in_vocab(const std::vector<int32_t>& ids, int64_t vocab, const char* option);
Precision parse_precision(const std::string& s);

// Options every model-running command shares.
struct ModelOptions {
  std::string model_dir;
  std::string device = "auto";
  std::string precision = "bf16";
  std::string gdn_prefill_backend;
  std::string gdn_artifacts;
  void add_to(CLI::App* cmd);
};

// Options of the commands that run the serving engine (bench-offline, serve): the engine host's
// sizing on top of the model options.
struct EngineCliOptions {
  ModelOptions model;
  int64_t max_num_seqs = 64;
  int64_t max_num_batched_tokens = EngineHostOptions{}.max_num_batched_tokens;
  int64_t max_model_len = 0;
  double gpu_memory_utilization = 0.9;
  int tensor_parallel_size = 1;
  void add_to(CLI::App* cmd, bool with_max_model_len);
  // The engine host's options; the caller sets the queue bound and anything else of its own.
  EngineHostOptions host_options() const;
};

// A loaded model, the ops that run it, and its tokenizer when the directory has tokenizer.json.
struct Runner {
  LoadedModel loaded;
  std::string device;  // "cpu" or "cuda": what --device resolved to
  std::unique_ptr<Ops> ops;
  std::unique_ptr<Qwen35Model> model;
  std::optional<Tokenizer> tokenizer;

  const Tokenizer& require_tokenizer(const char* why) const;
  // Ids that end generation: config.json, generation_config.json and the tokenizer's eos.
  std::vector<int64_t> stop_ids() const;
};

Runner open_model(const ModelOptions& options);

}  // namespace di::cli
