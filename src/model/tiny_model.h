#pragma once
// Deterministic Qwen3.5 checkpoints with random weights in exactly the Hugging Face layout
// (config.json + model.safetensors), so that transformers loads them unmodified.
#include <cstdint>
#include <filesystem>
#include <string>

#include "model/config.h"

namespace di {

struct TinyModelOptions {
  std::string preset = "tiny";  // "tiny", "tiny-wide", "4b-geometry" or "27b-geometry"
  uint64_t seed = 0;
  int64_t layers = 0;           // 0: the preset's count
  bool nested = false;          // Qwen3_5ForConditionalGeneration form, model.language_model.* names,
                                // plus mtp.* and model.visual.* tensors the text model must skip
  std::filesystem::path tokenizer_dir;  // when set, its tokenizer files are copied into the model
};

// The preset's configuration (vocabulary 248320, Qwen3.5's).
ModelConfig tiny_model_config(const TinyModelOptions& options);

// Writes config.json and model.safetensors into dir (created if missing), and copies
// tokenizer.json, tokenizer_config.json and chat_template.jinja from options.tokenizer_dir.
void write_tiny_model(const std::filesystem::path& dir, const TinyModelOptions& options);

}  // namespace di
