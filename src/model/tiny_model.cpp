#include "model/tiny_model.h"

#include <algorithm>
#include <cmath>
#include <iterator>
#include <fstream>

#include <nlohmann/json.hpp>

#include "core/bf16.h"
#include "core/error.h"
#include "model/safetensors.h"
#include "model/weights.h"

namespace di {

namespace {

// SplitMix64 and Box-Muller: fully specified, so a seed gives the same bytes on every machine.
class Rng {
 public:
  explicit Rng(uint64_t seed) : state_(seed) {}
  // The generator `draws` steps ahead (SplitMix64's state advances by a constant per draw), which
  // lets each element of a tensor be drawn independently, in parallel, with the same bytes.
  Rng ahead(uint64_t draws) const { return Rng(state_ + draws * 0x9e3779b97f4a7c15ull); }
  void skip(uint64_t draws) { state_ += draws * 0x9e3779b97f4a7c15ull; }
  uint64_t next() {
    uint64_t z = (state_ += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
  }
  double uniform() { return double(next() >> 11) * (1.0 / 9007199254740992.0); }  // [0, 1)
  double normal() {
    const double u1 = 1.0 - uniform(), u2 = uniform();
    return std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2);
  }

 private:
  uint64_t state_;
};

// How each parameter is drawn. Scales keep activations O(1) through the layers and give the
// logits a spread of several units, so that greedy top-two margins are large as a rule (the
// golden gates compare tokens only where the margin exceeds the logit tolerance).
struct Init {
  enum Kind { normal, uniform_log } kind = normal;
  double mean = 0, stddev = 0;  // normal
  double lo = 0, hi = 0;        // uniform_log: log(U(lo, hi))
  DType dtype = DType::bf16;
};

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

Init init_for(const std::string& name, const Shape& shape) {
  const double fan_in = shape.size() >= 2 ? double(shape.back()) : 1.0;
  // Logits spread by about 8 whatever the width (std 1 at hidden 64, 0.16 at hidden 2560).
  if (ends_with(name, "embed_tokens.weight") || name == "lm_head.weight")
    return {Init::normal, 0, 8.0 / std::sqrt(double(shape.back()))};
  if (ends_with(name, "linear_attn.A_log")) return {Init::uniform_log, 0, 0, 0.02, 0.6, DType::f32};
  if (ends_with(name, "linear_attn.dt_bias")) return {Init::normal, -1.5, 1.0};
  if (ends_with(name, "linear_attn.norm.weight")) return {Init::normal, 1.0, 0.1, 0, 0, DType::f32};
  if (ends_with(name, "norm.weight")) return {Init::normal, 0.0, 0.1};           // zero-centred norms
  if (ends_with(name, "conv1d.weight")) return {Init::normal, 0.0, 0.5};
  // Mixer and MLP outputs outweigh the embedding in the residual stream, so that with tied
  // embeddings the model does not simply predict the token it was given.
  if (ends_with(name, "out_proj.weight") || ends_with(name, "o_proj.weight") || ends_with(name, "down_proj.weight"))
    return {Init::normal, 0.0, 3.0 / std::sqrt(fan_in)};
  return {Init::normal, 0.0, 1.0 / std::sqrt(fan_in)};                          // input projections
}

TensorToWrite make_tensor(const std::string& name, const Shape& shape, Rng& rng) {
  const Init init = init_for(name, shape);
  TensorToWrite t{name, init.dtype, shape, {}};
  const int64_t n = shape_numel(shape);
  t.bytes.resize(size_t(n) * dtype_size(init.dtype));
  const uint64_t draws_per_element = init.kind == Init::normal ? 2 : 1;  // Box-Muller takes two uniforms
#pragma omp parallel for schedule(static) if (n > (1 << 16))
  for (int64_t i = 0; i < n; ++i) {
    Rng r = rng.ahead(uint64_t(i) * draws_per_element);
    const double x = init.kind == Init::normal ? init.mean + init.stddev * r.normal()
                                               : std::log(init.lo + (init.hi - init.lo) * r.uniform());
    if (init.dtype == DType::f32) {
      reinterpret_cast<float*>(t.bytes.data())[i] = float(x);
    } else {
      reinterpret_cast<uint16_t*>(t.bytes.data())[i] = f32_to_bf16(float(x));
    }
  }
  rng.skip(uint64_t(n) * draws_per_element);
  return t;
}

// The presets' geometries; everything else (head sizes, vocabulary, rope) is Qwen3.5's, below.
struct Preset {
  const char* name;
  int64_t hidden, intermediate, layers, q_heads, kv_heads, gdn_key_heads, gdn_value_heads;
  bool tied;
};
constexpr Preset kPresets[] = {
    {"tiny", 64, 160, 8, 4, 2, 2, 4, true},
    // tiny with eight attention and GDN value heads: every tensor-parallel size up to 8 splits it.
    {"tiny-wide", 64, 256, 8, 8, 2, 4, 8, true},
    {"4b-geometry", 2560, 9216, 32, 16, 4, 16, 32, true},
    {"27b-geometry", 5120, 17408, 64, 24, 4, 16, 48, false},
};

}  // namespace

ModelConfig tiny_model_config(const TinyModelOptions& o) {
  ModelConfig c;
  c.model_type = "qwen3_5_text";
  c.vocab_size = 248320;
  c.rms_norm_eps = 1e-6;
  c.rope_theta = 1e7;
  c.partial_rotary_factor = 0.25;
  c.head_dim = 256;
  c.linear_key_head_dim = 128;
  c.linear_value_head_dim = 128;
  c.linear_conv_kernel_dim = 4;
  c.max_position_embeddings = 262144;
  const auto preset = std::find_if(std::begin(kPresets), std::end(kPresets),
                                   [&](const Preset& p) { return o.preset == p.name; });
  if (preset == std::end(kPresets))
    fail("make-tiny-model: unknown preset '{}' (known: tiny, tiny-wide, 4b-geometry, 27b-geometry)", o.preset);
  c.hidden_size = preset->hidden;
  c.intermediate_size = preset->intermediate;
  c.num_layers = preset->layers;
  c.num_attention_heads = preset->q_heads;
  c.num_kv_heads = preset->kv_heads;
  c.linear_num_key_heads = preset->gdn_key_heads;
  c.linear_num_value_heads = preset->gdn_value_heads;
  c.tie_word_embeddings = preset->tied;
  if (o.layers < 0) fail("make-tiny-model: --layers must be positive, found {}", o.layers);
  if (o.layers > 0) c.num_layers = o.layers;
  c.rotary_dim = int64_t(double(c.head_dim) * c.partial_rotary_factor);
  // Every fourth layer is full attention, as in every Qwen3.5 size.
  for (int64_t i = 0; i < c.num_layers; ++i)
    c.layer_types.push_back((i + 1) % 4 == 0 ? LayerKind::full_attention : LayerKind::linear_attention);
  return c;
}

void write_tiny_model(const std::filesystem::path& dir, const TinyModelOptions& o) {
  const ModelConfig c = tiny_model_config(o);
  std::filesystem::create_directories(dir);
  Rng rng(o.seed * 0x9e3779b97f4a7c15ull + 0x2545f4914f6cdd1dull);
  std::vector<TensorToWrite> tensors;
  for (const ExpectedTensor& e : expected_tensors(c, o.nested ? "model.language_model." : "model."))
    tensors.push_back(make_tensor(e.name, e.shape, rng));
  if (!c.tie_word_embeddings) tensors.push_back(make_tensor("lm_head.weight", {c.vocab_size, c.hidden_size}, rng));
  if (o.nested) {
    // Parts of a real composite checkpoint that the text model ignores.
    tensors.push_back(make_tensor("mtp.fc.weight", {c.hidden_size, 2 * c.hidden_size}, rng));
    tensors.push_back(make_tensor("model.visual.patch_embed.proj.weight", {16, 3, 2, 2, 2}, rng));
  }
  write_safetensors(dir / "model.safetensors", tensors);
  if (!o.tokenizer_dir.empty()) {
    if (!std::filesystem::exists(o.tokenizer_dir / "tokenizer.json"))
      fail("make-tiny-model: no tokenizer.json in {} (scripts/setup.sh builds the Qwen3.5 tokenizer files there)",
           o.tokenizer_dir.string());
    for (const char* name : {"tokenizer.json", "tokenizer_config.json", "chat_template.jinja"})
      if (std::filesystem::exists(o.tokenizer_dir / name))
        std::filesystem::copy_file(o.tokenizer_dir / name, dir / name,
                                   std::filesystem::copy_options::overwrite_existing);
  }
  const std::string text = model_config_to_hf_json(c, o.nested).dump(2) + "\n";
  std::ofstream out(dir / "config.json");
  out << text;
  if (!out) fail("cannot write {}", (dir / "config.json").string());
}

}  // namespace di
