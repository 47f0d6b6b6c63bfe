#include "model/config.h"

#include <fstream>
#include <set>

#include <nlohmann/json.hpp>

#include "core/error.h"

namespace di {

using nlohmann::json;

const char* layer_kind_name(LayerKind kind) {
  return kind == LayerKind::full_attention ? "full_attention" : "linear_attention";
}

int64_t ModelConfig::num_layers_of(LayerKind kind) const {
  int64_t n = 0;
  for (LayerKind k : layer_types) n += (k == kind);
  return n;
}

int64_t ModelConfig::index_within_kind(int64_t layer) const {
  int64_t n = 0;
  for (int64_t i = 0; i < layer; ++i) n += (layer_types.at(i) == layer_types.at(layer));
  return n;
}

namespace {

// Field readers that name the file and field on every type error.
struct Reader {
  const json& j;
  const std::string& source;
  std::string prefix;  // "text_config." in the nested form

  std::string where(const std::string& key) const { return fmt::format("{}: field '{}{}'", source, prefix, key); }

  bool has(const std::string& key) const { return j.contains(key) && !j.at(key).is_null(); }

  int64_t integer(const std::string& key, std::optional<int64_t> fallback = std::nullopt) const {
    if (!has(key)) {
      if (fallback) return *fallback;
      fail("{} is missing (a positive integer is required)", where(key));
    }
    const json& v = j.at(key);
    if (!v.is_number_integer()) fail("{} must be an integer, found {}", where(key), v.dump());
    if (v.is_number_unsigned() && v.get<uint64_t>() > uint64_t(INT64_MAX))
      fail("{} is out of range, found {}", where(key), v.dump());
    return v.get<int64_t>();
  }
  int64_t positive(const std::string& key, std::optional<int64_t> fallback = std::nullopt) const {
    int64_t v = integer(key, fallback);
    if (v <= 0) fail("{} must be positive, found {}", where(key), v);
    return v;
  }
  double number(const json& obj, const std::string& key, double fallback) const {
    if (!obj.contains(key) || obj.at(key).is_null()) return fallback;
    const json& v = obj.at(key);
    if (!v.is_number()) fail("{} must be a number, found {}", where(key), v.dump());
    return v.get<double>();
  }
  bool boolean(const std::string& key, bool fallback) const {
    if (!has(key)) return fallback;
    const json& v = j.at(key);
    if (!v.is_boolean()) fail("{} must be true or false, found {}", where(key), v.dump());
    return v.get<bool>();
  }
  std::string string(const std::string& key, const std::string& fallback) const {
    if (!has(key)) return fallback;
    const json& v = j.at(key);
    if (!v.is_string()) fail("{} must be a string, found {}", where(key), v.dump());
    return v.get<std::string>();
  }
};

std::vector<int64_t> read_token_ids(const json& v, const std::string& where) {
  std::vector<int64_t> ids;
  if (v.is_null()) return ids;
  if (v.is_number_integer()) return {v.get<int64_t>()};
  if (!v.is_array()) fail("{} must be an integer or a list of integers, found {}", where, v.dump());
  for (const json& e : v) {
    if (!e.is_number_integer()) fail("{} must hold integers, found {}", where, e.dump());
    ids.push_back(e.get<int64_t>());
  }
  return ids;
}

}  // namespace

ModelConfig parse_model_config(const json& root, const std::string& source) {
  if (!root.is_object()) fail("{}: a config must be a JSON object, found {}", source, root.type_name());
  ModelConfig c;
  if (root.contains("architectures") && root["architectures"].is_array() && !root["architectures"].empty() &&
      root["architectures"][0].is_string())
    c.architecture = root["architectures"][0].get<std::string>();

  if (root.contains("model_type") && !root["model_type"].is_null() && !root["model_type"].is_string())
    fail("{}: field 'model_type' must be a string, found {}", source, root["model_type"].dump());
  const std::string top_type = root.value("model_type", std::string());
  const json* text = &root;
  if (root.contains("text_config")) {
    if (!root["text_config"].is_object())
      fail("{}: field 'text_config' must be an object, found {}", source, root["text_config"].type_name());
    if (top_type != "qwen3_5")
      fail("{}: field 'model_type' is '{}', but a config with text_config must be 'qwen3_5' "
           "(Qwen3_5ForConditionalGeneration)", source, top_type);
    text = &root["text_config"];
    c.nested = true;
  }
  Reader r{*text, source, c.nested ? "text_config." : ""};
  c.model_type = r.string("model_type", c.nested ? "qwen3_5_text" : top_type);
  if (c.model_type != "qwen3_5_text")
    fail("{} is '{}'; deltainfer supports 'qwen3_5_text' (flat Qwen3_5ForCausalLM) or 'qwen3_5' with a "
         "text_config", r.where("model_type"), c.model_type);
  if (!c.architecture.empty() && c.architecture != "Qwen3_5ForCausalLM" &&
      c.architecture != "Qwen3_5ForConditionalGeneration")
    fail("{}: field 'architectures' names '{}'; supported: Qwen3_5ForCausalLM, Qwen3_5ForConditionalGeneration",
         source, c.architecture);

  // Mixture-of-experts sizes share the model_type family but not this engine's MLP.
  for (const char* moe_field : {"num_experts", "moe_intermediate_size", "num_experts_per_tok"}) {
    if (r.has(moe_field))
      fail("{} is {}: mixture-of-experts Qwen3.5 models are not supported (dense models only)", r.where(moe_field),
           r.j.at(moe_field).dump());
  }

  c.vocab_size = r.positive("vocab_size", 248320);
  c.hidden_size = r.positive("hidden_size");
  c.intermediate_size = r.positive("intermediate_size");
  c.num_layers = r.positive("num_hidden_layers");
  c.rms_norm_eps = r.number(r.j, "rms_norm_eps", 1e-6);
  if (!(c.rms_norm_eps > 0 && c.rms_norm_eps < 1)) fail("{} must be in (0, 1), found {}", r.where("rms_norm_eps"), c.rms_norm_eps);
  // The nested form keeps tie_word_embeddings at the top level; a value in text_config wins.
  Reader top{root, source, ""};
  c.tie_word_embeddings = r.has("tie_word_embeddings") ? r.boolean("tie_word_embeddings", false)
                                                       : top.boolean("tie_word_embeddings", false);
  c.max_position_embeddings = r.positive("max_position_embeddings", 32768);

  const std::string act = r.string("hidden_act", "silu");
  if (act != "silu") fail("{} is '{}'; only 'silu' is supported", r.where("hidden_act"), act);
  if (r.boolean("attention_bias", false)) fail("{} is true; Qwen3.5 has no attention bias and none is supported", r.where("attention_bias"));

  c.num_attention_heads = r.positive("num_attention_heads");
  c.num_kv_heads = r.positive("num_key_value_heads");
  c.head_dim = r.positive("head_dim", c.hidden_size / c.num_attention_heads);
  if (c.num_attention_heads % c.num_kv_heads != 0)
    fail("{}: num_attention_heads {} is not a multiple of num_key_value_heads {}", source, c.num_attention_heads,
         c.num_kv_heads);

  // Rotary: rope_parameters (transformers 5) or the legacy top-level rope_theta / rope_scaling.
  json rope = json::object();
  std::string rope_field = "rope_parameters";  // the field that holds them, for messages
  if (r.has("rope_parameters")) {
    rope = r.j.at("rope_parameters");
    if (!rope.is_object()) fail("{} must be an object, found {}", r.where("rope_parameters"), rope.dump());
  } else if (r.has("rope_scaling")) {
    rope_field = "rope_scaling";
    rope = r.j.at("rope_scaling");
    if (!rope.is_object()) fail("{} must be an object, found {}", r.where("rope_scaling"), rope.dump());
  }
  std::string rope_type = "default";
  for (const char* key : {"type", "rope_type"}) {  // rope_type wins when both are given
    if (!rope.contains(key) || rope.at(key).is_null()) continue;
    if (!rope.at(key).is_string())
      fail("{}: {} must be a string, found {}", r.where(rope_field), key, rope.at(key).dump());
    rope_type = rope.at(key).get<std::string>();
  }
  if (rope_type != "default")
    fail("{}: rope_type '{}' is not supported (only 'default')", r.where(rope_field), rope_type);
  c.rope_theta = r.number(rope, "rope_theta", r.number(r.j, "rope_theta", 10000.0));
  c.partial_rotary_factor = r.number(rope, "partial_rotary_factor", r.number(r.j, "partial_rotary_factor", 0.25));
  if (!(c.rope_theta > 0)) fail("{} must be positive, found {}", r.where("rope_theta"), c.rope_theta);
  if (!(c.partial_rotary_factor > 0 && c.partial_rotary_factor <= 1))
    fail("{} must be in (0, 1], found {}", r.where("partial_rotary_factor"), c.partial_rotary_factor);
  c.rotary_dim = int64_t(double(c.head_dim) * c.partial_rotary_factor);
  if (c.rotary_dim % 2 != 0 || c.rotary_dim == 0)
    fail("{}: head_dim {} x partial_rotary_factor {} gives rotary dim {}, which must be even and positive", source,
         c.head_dim, c.partial_rotary_factor, c.rotary_dim);

  c.linear_num_key_heads = r.positive("linear_num_key_heads", 16);
  c.linear_num_value_heads = r.positive("linear_num_value_heads", 32);
  c.linear_key_head_dim = r.positive("linear_key_head_dim", 128);
  c.linear_value_head_dim = r.positive("linear_value_head_dim", 128);
  c.linear_conv_kernel_dim = r.positive("linear_conv_kernel_dim", 4);
  if (c.linear_num_value_heads % c.linear_num_key_heads != 0)
    fail("{}: linear_num_value_heads {} is not a multiple of linear_num_key_heads {}", source,
         c.linear_num_value_heads, c.linear_num_key_heads);

  // Layer kinds: an explicit list, or every full_attention_interval-th layer is full attention.
  if (r.has("layer_types")) {
    const json& lt = r.j.at("layer_types");
    if (!lt.is_array()) fail("{} must be a list, found {}", r.where("layer_types"), lt.dump());
    if (int64_t(lt.size()) != c.num_layers)
      fail("{} has {} entries but num_hidden_layers is {}", r.where("layer_types"), lt.size(), c.num_layers);
    for (size_t i = 0; i < lt.size(); ++i) {
      const std::string kind = lt[i].is_string() ? lt[i].get<std::string>() : lt[i].dump();
      if (kind == "linear_attention") c.layer_types.push_back(LayerKind::linear_attention);
      else if (kind == "full_attention") c.layer_types.push_back(LayerKind::full_attention);
      else fail("{}[{}] is '{}'; supported: linear_attention, full_attention", r.where("layer_types"), i, kind);
    }
  } else {
    const int64_t interval = r.positive("full_attention_interval", 4);
    for (int64_t i = 0; i < c.num_layers; ++i)
      c.layer_types.push_back((i + 1) % interval == 0 ? LayerKind::full_attention : LayerKind::linear_attention);
  }

  if (r.has("eos_token_id")) c.eos_token_ids = read_token_ids(r.j.at("eos_token_id"), r.where("eos_token_id"));
  else if (top.has("eos_token_id")) c.eos_token_ids = read_token_ids(root.at("eos_token_id"), top.where("eos_token_id"));
  return c;
}

ModelConfig load_model_config(const std::filesystem::path& model_dir) {
  const auto path = model_dir / "config.json";
  std::ifstream in(path);
  if (!in) fail("cannot open {}: {}", path.string(), std::filesystem::exists(path) ? "unreadable" : "no such file");
  json j = json::parse(in, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) fail("{}: not valid JSON", path.string());
  return parse_model_config(j, path.string());
}

json model_config_to_hf_json(const ModelConfig& c, bool nested) {
  json types = json::array();
  for (LayerKind k : c.layer_types) types.push_back(layer_kind_name(k));
  json text = {
      {"model_type", "qwen3_5_text"},
      {"vocab_size", c.vocab_size},
      {"hidden_size", c.hidden_size},
      {"intermediate_size", c.intermediate_size},
      {"num_hidden_layers", c.num_layers},
      {"layer_types", types},
      {"num_attention_heads", c.num_attention_heads},
      {"num_key_value_heads", c.num_kv_heads},
      {"head_dim", c.head_dim},
      {"hidden_act", "silu"},
      {"attention_bias", false},
      {"attn_output_gate", true},
      {"rms_norm_eps", c.rms_norm_eps},
      {"max_position_embeddings", c.max_position_embeddings},
      {"linear_num_key_heads", c.linear_num_key_heads},
      {"linear_num_value_heads", c.linear_num_value_heads},
      {"linear_key_head_dim", c.linear_key_head_dim},
      {"linear_value_head_dim", c.linear_value_head_dim},
      {"linear_conv_kernel_dim", c.linear_conv_kernel_dim},
      {"tie_word_embeddings", c.tie_word_embeddings},
      {"rope_parameters",
       {{"rope_type", "default"},
        {"rope_theta", c.rope_theta},
        {"partial_rotary_factor", c.partial_rotary_factor},
        {"mrope_section", {11, 11, 10}},
        {"mrope_interleaved", true}}},
      {"dtype", "bfloat16"},
  };
  if (!c.eos_token_ids.empty()) text["eos_token_id"] = c.eos_token_ids.size() == 1 ? json(c.eos_token_ids[0]) : json(c.eos_token_ids);
  if (!nested) {
    text["architectures"] = {"Qwen3_5ForCausalLM"};
    return text;
  }
  return {{"architectures", {"Qwen3_5ForConditionalGeneration"}},
          {"model_type", "qwen3_5"},
          {"tie_word_embeddings", c.tie_word_embeddings},
          {"text_config", text},
          {"dtype", "bfloat16"}};
}

}  // namespace di
