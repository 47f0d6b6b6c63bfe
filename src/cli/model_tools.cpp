// deltainfer inspect, make-tiny-model, version and artifacts verify.
#include <cmath>
#include <cstdio>
#include <fstream>
#include <memory>

#include <nlohmann/json.hpp>
#include <spdlog/spdlog.h>

#include "cli/commands.h"
#include "cli/common.h"
#include "core/error.h"
#include "core/provenance.h"
#include "core/sha256.h"
#include "gdn/artifact_bundle.h"
#include "model/tiny_model.h"
#include "model/weights.h"

namespace di::cli {

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
  cmd->add_option("--preset", o->preset, "tiny, tiny-wide, 4b-geometry or 27b-geometry")->capture_default_str();
  cmd->add_option("--layers", o->layers, "layer count (default: the preset's)");
  cmd->add_flag("--nested", o->nested, "write the Qwen3_5ForConditionalGeneration form (model.language_model.*)");
  auto tokenizer = std::make_shared<std::string>(DI_TOKENIZER_DIR);
  auto no_tokenizer = std::make_shared<bool>(false);
  cmd->add_option("--tokenizer", *tokenizer, "copy the tokenizer files from this directory")->capture_default_str();
  cmd->add_flag("--no-tokenizer", *no_tokenizer, "write the weights and config only");
  return Command{cmd, [o, dir, tokenizer, no_tokenizer] {
    if (!*no_tokenizer) o->tokenizer_dir = *tokenizer;
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

Command add_artifacts_verify(CLI::App& app) {
  auto* artifacts = app.add_subcommand("artifacts", "kernel bundles compiled ahead of time (tools/artifacts/)");
  artifacts->require_subcommand(1);
  auto* cmd = artifacts->add_subcommand(
      "verify", "check a bundle against the SHA-256 this build pins for every file (its manifest included)");
  auto dir = std::make_shared<std::string>();
  cmd->add_option("DIR", *dir, "the bundle's directory (e.g. build-artifacts/flashinfer-gdn-sm90)")->required();
  return Command{cmd, [dir] {
    const gdn::BundlePin& pin = gdn::flashinfer_gdn_sm90_pin();
    const std::vector<std::string> problems = gdn::bundle_problems(*dir, pin);
    if (!problems.empty()) fail("{}", gdn::describe_problems(*dir, pin, problems));
    std::printf("%s at %s: every file matches this build's pin\n", pin.name.c_str(), dir->c_str());
    for (const auto& [name, sha] : pin.sha256) std::printf("  %s  %s\n", sha.c_str(), name.c_str());
  }};
}

}  // namespace di::cli
