#include "cli/commands.h"

#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <fstream>
#include <functional>
#include <memory>
#include <sstream>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>
#include <spdlog/spdlog.h>

#include "core/error.h"
#include "core/provenance.h"
#include "engine/qwen35_model.h"
#include "engine/sequence.h"
#include "kernels/cpu_ops.h"
#include "model/tiny_model.h"
#include "model/weights.h"

namespace di::cli {

namespace {

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

void check_ids_in_vocab(const std::vector<int32_t>& ids, int64_t vocab) {
  for (size_t i = 0; i < ids.size(); ++i)
    if (ids[i] >= vocab) fail("--prompt-ids: id {} at index {} is outside the vocabulary of {}", ids[i], i, vocab);
}

Precision parse_precision(const std::string& s) {
  if (s == "f32") return Precision::f32;
  if (s == "bf16") return Precision::bf16;
  fail("--precision must be f32 or bf16, found '{}'", s);
}

// Options every model-running command shares.
struct ModelOptions {
  std::string model_dir;
  std::string device = "cpu";
  std::string precision = "bf16";

  void add_to(CLI::App* cmd) {
    cmd->add_option("--model", model_dir, "model directory (config.json + safetensors)")->required();
    cmd->add_option("--device", device, "cpu (cuda arrives with the GPU engine)")->capture_default_str();
    cmd->add_option("--precision", precision,
                    "CPU activations: bf16 rounds where transformers' bf16 run does, f32 rounds nowhere")
        ->capture_default_str();
  }
};

// A loaded model with the ops that run it.
struct Runner {
  LoadedModel loaded;
  std::unique_ptr<CpuOps> ops;
  std::unique_ptr<Qwen35Model> model;
};

Runner open_model(const ModelOptions& o) {
  if (o.device != "cpu")
    fail("--device {}: this build runs the CPU reference engine only (the CUDA engine is not built in)", o.device);
  const Precision precision = parse_precision(o.precision);
  Runner r;
  r.loaded = load_model(o.model_dir, {.show_progress = true});
  r.ops = std::make_unique<CpuOps>(r.loaded.config, precision);
  r.model = std::make_unique<Qwen35Model>(r.loaded.config, r.loaded.weights);
  return r;
}

Command add_generate(CLI::App& app) {
  auto* cmd = app.add_subcommand("generate", "continue a prompt, streaming token ids to stdout");
  struct Opts {
    ModelOptions model;
    std::string prompt_ids;
    int64_t max_tokens = 32;
    float temperature = 0, top_p = 1, min_p = 0;
    int64_t top_k = 0, prefill_chunk = 0;
    uint64_t seed = 0;
  };
  auto o = std::make_shared<Opts>();
  o->model.add_to(cmd);
  cmd->add_option("--prompt-ids", o->prompt_ids, "comma-separated token ids")->required();
  cmd->add_option("--max-tokens", o->max_tokens, "tokens to generate")->capture_default_str();
  cmd->add_option("--temperature", o->temperature, "0 is greedy")->capture_default_str();
  cmd->add_option("--top-k", o->top_k, "0 is off")->capture_default_str();
  cmd->add_option("--top-p", o->top_p, "1 is off")->capture_default_str();
  cmd->add_option("--min-p", o->min_p, "0 is off")->capture_default_str();
  cmd->add_option("--seed", o->seed, "sampling seed")->capture_default_str();
  cmd->add_option("--prefill-chunk", o->prefill_chunk, "prefill the prompt in pieces of this many tokens (0: whole)")
      ->capture_default_str();
  return Command{cmd, [o] {
    const std::vector<int32_t> prompt = parse_ids(o->prompt_ids, "--prompt-ids");
    GenerateOptions g;
    g.max_tokens = o->max_tokens;
    g.sampling = {o->temperature, o->top_k, o->top_p, o->min_p, o->seed};
    g.prefill_chunk = o->prefill_chunk;
    validate(g.sampling);
    if (g.max_tokens < 1) fail("--max-tokens must be at least 1, found {}", g.max_tokens);
    Runner r = open_model(o->model);
    check_ids_in_vocab(prompt, r.loaded.config.vocab_size);
    g.stop_ids = r.loaded.config.eos_token_ids;
    bool first = true;
    generate(*r.model, *r.ops, prompt, g, [&](int32_t token) {
      std::printf(first ? "%d" : ",%d", token);
      std::fflush(stdout);
      first = false;
    });
    std::printf("\n");
  }};
}

double log_softmax_at(const float* logits, int64_t vocab, int64_t index) {
  double best = logits[0];
  for (int64_t i = 1; i < vocab; ++i) best = std::max(best, double(logits[i]));
  double sum = 0;
  for (int64_t i = 0; i < vocab; ++i) sum += std::exp(double(logits[i]) - best);
  return double(logits[index]) - best - std::log(sum);
}

Command add_score(CLI::App& app) {
  auto* cmd = app.add_subcommand("score", "log-probabilities of a token sequence, and full logits of chosen positions");
  struct Opts {
    ModelOptions model;
    std::string prompt_ids, out, trace_out;
    std::vector<int64_t> logit_positions;
  };
  auto o = std::make_shared<Opts>();
  o->model.add_to(cmd);
  cmd->add_option("--prompt-ids", o->prompt_ids, "comma-separated token ids")->required();
  cmd->add_option("--out", o->out, "output JSON file (format in docs/score-format.md)")->required();
  cmd->add_option("--logits-at", o->logit_positions, "positions whose full logits are written (negative counts from the end)")
      ->delimiter(',');
  cmd->add_option("--trace-out", o->trace_out,
                  "also write every named intermediate of the forward pass to this JSON file (debugging)");
  return Command{cmd, [o] {
    const std::vector<int32_t> ids = parse_ids(o->prompt_ids, "--prompt-ids");
    Runner r = open_model(o->model);
    const int64_t vocab = r.loaded.config.vocab_size, n = int64_t(ids.size());
    check_ids_in_vocab(ids, vocab);
    std::vector<int64_t> positions;
    for (int64_t p : o->logit_positions) {
      const int64_t q = p < 0 ? n + p : p;
      if (q < 0 || q >= n) fail("--logits-at: position {} is outside the {} prompt positions", p, n);
      positions.push_back(q);
    }
    nlohmann::json trace = nlohmann::json::object();
    if (!o->trace_out.empty()) {
      r.model->observer = [&](const std::string& name, const Tensor& value) {
        if (name == "logits") return;  // written below at the chosen positions
        trace[name] = {{"shape", value.shape()}, {"values", r.ops->to_host(value)}};
      };
    }
    Sequence seq(*r.model, *r.ops);
    const std::vector<float> logits = seq.feed(ids, /*all_logits=*/true);
    if (!o->trace_out.empty()) {
      std::ofstream tout(o->trace_out);
      tout << trace.dump() << "\n";
      if (!tout) fail("cannot write {}", o->trace_out);
    }
    nlohmann::json j;
    j["format"] = "deltainfer-score-v1";
    j["model"] = o->model.model_dir;
    j["precision"] = o->model.precision;
    j["build"] = nlohmann::json::parse(build_info_json());
    j["prompt_ids"] = ids;
    nlohmann::json logprobs = nlohmann::json::array(), argmax_ids = nlohmann::json::array();
    logprobs.push_back(nullptr);  // nothing predicts the first token
    for (int64_t t = 0; t < n; ++t) {
      const float* row = logits.data() + t * vocab;
      if (t + 1 < n) logprobs.push_back(log_softmax_at(row, vocab, ids[t + 1]));
      argmax_ids.push_back(argmax(row, vocab));
    }
    j["logprobs"] = logprobs;
    j["argmax"] = argmax_ids;
    nlohmann::json full = nlohmann::json::array();
    for (int64_t p : positions)
      full.push_back({{"position", p}, {"values", std::vector<float>(logits.begin() + p * vocab, logits.begin() + (p + 1) * vocab)}});
    j["logits"] = full;
    std::ofstream out(o->out);
    out << j.dump() << "\n";
    if (!out) fail("cannot write {}", o->out);
    spdlog::info("wrote {} ({} positions, {} full logit rows)", o->out, n, positions.size());
  }};
}

Command add_inspect(CLI::App& app) {
  auto* cmd = app.add_subcommand("inspect", "configuration summary, parameter count and tensor table of a model directory");
  auto dir = std::make_shared<std::string>();
  auto json_out = std::make_shared<bool>(false);
  cmd->add_option("dir", *dir, "model directory")->required();
  cmd->add_flag("--json", *json_out, "print the summary as JSON");
  return Command{cmd, [dir, json_out] {
    LoadedModel m = load_model(*dir);
    const ModelConfig& c = m.config;
    if (*json_out) {
      nlohmann::json j = {{"form", c.nested ? "nested" : "flat"},
                          {"hidden_size", c.hidden_size},
                          {"layers", c.num_layers},
                          {"gdn_layers", c.num_layers_of(LayerKind::linear_attention)},
                          {"attention_layers", c.num_layers_of(LayerKind::full_attention)},
                          {"parameters", m.weights.parameter_count},
                          {"tied_embeddings", c.tie_word_embeddings},
                          {"skipped_tensors", m.weights.skipped_tensors},
                          {"tensors", m.checkpoint->tensors().size()}};
      std::printf("%s\n", j.dump(2).c_str());
      return;
    }
    std::string kinds;
    for (LayerKind k : c.layer_types) kinds += k == LayerKind::full_attention ? 'A' : 'G';
    std::printf("model        %s (%s config, %s)\n", dir->c_str(), c.nested ? "nested text_config" : "flat",
                c.architecture.empty() ? "no architectures field" : c.architecture.c_str());
    std::printf("layers       %lld: %s (G = Gated DeltaNet, A = gated attention)\n", (long long)c.num_layers, kinds.c_str());
    std::printf("hidden       %lld, intermediate %lld, vocab %lld, tied embeddings %s\n", (long long)c.hidden_size,
                (long long)c.intermediate_size, (long long)c.vocab_size, c.tie_word_embeddings ? "yes" : "no");
    std::printf("attention    %lld q heads / %lld kv heads of %lld, rotary dim %lld, theta %g\n",
                (long long)c.num_attention_heads, (long long)c.num_kv_heads, (long long)c.head_dim,
                (long long)c.rotary_dim, c.rope_theta);
    std::printf("gdn          %lld key heads / %lld value heads, dk %lld dv %lld, conv kernel %lld\n",
                (long long)c.linear_num_key_heads, (long long)c.linear_num_value_heads, (long long)c.linear_key_head_dim,
                (long long)c.linear_value_head_dim, (long long)c.linear_conv_kernel_dim);
    std::printf("parameters   %lld (%.3f B); %lld tensors skipped (mtp.*, model.visual.*)\n\n",
                (long long)m.weights.parameter_count, m.weights.parameter_count / 1e9, (long long)m.weights.skipped_tensors);
    std::printf("%-72s %-6s %s\n", "tensor", "dtype", "shape");
    for (const auto& [name, loc] : m.checkpoint->tensors())
      std::printf("%-72s %-6s %s\n", name.c_str(), std::string(dtype_name(loc.entry->view.dtype)).c_str(),
                  shape_str(loc.entry->view.shape).c_str());
  }};
}

Command add_make_tiny_model(CLI::App& app) {
  auto* cmd = app.add_subcommand("make-tiny-model", "write a deterministic random-weight Qwen3.5 checkpoint in Hugging Face layout");
  auto o = std::make_shared<TinyModelOptions>();
  auto dir = std::make_shared<std::string>();
  cmd->add_option("dir", *dir, "output directory")->required();
  cmd->add_option("--seed", o->seed, "weight seed")->capture_default_str();
  cmd->add_option("--preset", o->preset, "tiny or 4b-geometry")->capture_default_str();
  cmd->add_option("--layers", o->layers, "layer count (default: the preset's)");
  cmd->add_flag("--nested", o->nested, "write the Qwen3_5ForConditionalGeneration form (model.language_model.*)");
  return Command{cmd, [o, dir] {
    write_tiny_model(*dir, *o);
    spdlog::info("wrote {} (preset {}, seed {})", *dir, o->preset, o->seed);
  }};
}

Command add_version(CLI::App& app) {
  auto* cmd = app.add_subcommand("version", "build provenance");
  auto json_out = std::make_shared<bool>(false);
  cmd->add_flag("--json", *json_out, "print as JSON");
  return Command{cmd, [json_out] {
    const BuildInfo& b = build_info();
    if (*json_out) {
      std::printf("%s\n", build_info_json().c_str());
      return;
    }
    std::printf("deltainfer %s\ncommit %s%s\ncuda %s (archs %s, nvcc %s)\ncompiler %s\n", DI_VERSION, b.commit,
                b.dirty ? " (dirty)" : "", b.cuda ? "yes" : "no", b.cuda_archs, b.nvcc_version, b.cxx_compiler);
  }};
}

}  // namespace

std::vector<Command> register_commands(CLI::App& app) {
  return {add_generate(app), add_score(app), add_inspect(app), add_make_tiny_model(app), add_version(app)};
}

}  // namespace di::cli
