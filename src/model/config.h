#pragma once
// The Qwen3.5 text model's configuration, read from a Hugging Face config.json in either form that
// exists: flat (Qwen3_5ForCausalLM, model_type "qwen3_5_text") or nested (the text_config of
// Qwen3_5ForConditionalGeneration, model_type "qwen3_5"). Everything is validated up front: a value
// the engine does not support is an error naming the field and the value.
#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

namespace di {

enum class LayerKind : uint8_t { linear_attention, full_attention };

struct ModelConfig {
  bool nested = false;          // read from text_config of a composite config
  std::string architecture;     // architectures[0] as written, or "" when absent
  std::string model_type;       // of the text part: "qwen3_5_text"

  int64_t vocab_size = 248320;
  int64_t hidden_size = 0;
  int64_t intermediate_size = 0;
  int64_t num_layers = 0;
  std::vector<LayerKind> layer_types;  // one per layer
  double rms_norm_eps = 1e-6;
  bool tie_word_embeddings = false;
  int64_t max_position_embeddings = 0;

  // Gated full attention.
  int64_t num_attention_heads = 0;
  int64_t num_kv_heads = 0;
  int64_t head_dim = 0;
  double rope_theta = 0;
  double partial_rotary_factor = 0.25;
  int64_t rotary_dim = 0;  // int(head_dim * partial_rotary_factor)

  // Gated DeltaNet.
  int64_t linear_num_key_heads = 0;
  int64_t linear_num_value_heads = 0;
  int64_t linear_key_head_dim = 0;
  int64_t linear_value_head_dim = 0;
  int64_t linear_conv_kernel_dim = 4;

  std::vector<int64_t> eos_token_ids;  // may be empty

  int64_t gdn_key_dim() const { return linear_num_key_heads * linear_key_head_dim; }
  int64_t gdn_value_dim() const { return linear_num_value_heads * linear_value_head_dim; }
  int64_t gdn_conv_dim() const { return 2 * gdn_key_dim() + gdn_value_dim(); }
  int64_t num_layers_of(LayerKind kind) const;
  // Index of layer `layer` among the layers of its kind (its slot in per-kind caches).
  int64_t index_within_kind(int64_t layer) const;
};

// Parses and validates; `source` names the file in error messages.
ModelConfig parse_model_config(const nlohmann::json& j, const std::string& source);
ModelConfig load_model_config(const std::filesystem::path& model_dir);

// The flat Hugging Face form (what transformers writes for Qwen3_5ForCausalLM), or the nested
// Qwen3_5ForConditionalGeneration form with the text part under text_config.
nlohmann::json model_config_to_hf_json(const ModelConfig& config, bool nested);

const char* layer_kind_name(LayerKind kind);

}  // namespace di
