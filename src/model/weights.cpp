#include "model/weights.h"

#include <unistd.h>

#include <cstdio>
#include <map>
#include <set>

#include <spdlog/spdlog.h>

#include "core/error.h"

namespace di {

namespace {

bool starts_with(const std::string& s, const std::string& p) { return s.rfind(p, 0) == 0; }

// Which of the known checkpoint prefixes holds the embedding.
std::string detect_prefix(const Checkpoint& ckpt, const std::string& source) {
  for (const char* p : {"model.language_model.", "model.", "language_model.model."})
    if (ckpt.tensors().count(std::string(p) + "embed_tokens.weight")) return p;
  fail("{}: no embedding tensor found (looked for model.language_model.embed_tokens.weight, "
       "model.embed_tokens.weight, language_model.model.embed_tokens.weight)", source);
}

// Parts of the checkpoint the text model does not use.
bool is_skipped(const std::string& name) {
  return starts_with(name, "mtp.") || starts_with(name, "model.visual.") || starts_with(name, "visual.");
}

}  // namespace

std::vector<ExpectedTensor> expected_tensors(const ModelConfig& c, const std::string& prefix) {
  const int64_t H = c.hidden_size;
  std::vector<ExpectedTensor> out;
  auto add = [&](const std::string& name, Shape shape) { out.push_back({prefix + name, std::move(shape)}); };
  add("embed_tokens.weight", {c.vocab_size, H});
  for (int64_t i = 0; i < c.num_layers; ++i) {
    const std::string l = fmt::format("layers.{}.", i);
    add(l + "input_layernorm.weight", {H});
    add(l + "post_attention_layernorm.weight", {H});
    if (c.layer_types[i] == LayerKind::linear_attention) {
      const std::string g = l + "linear_attn.";
      add(g + "in_proj_qkv.weight", {c.gdn_conv_dim(), H});
      add(g + "in_proj_z.weight", {c.gdn_value_dim(), H});
      add(g + "in_proj_b.weight", {c.linear_num_value_heads, H});
      add(g + "in_proj_a.weight", {c.linear_num_value_heads, H});
      add(g + "conv1d.weight", {c.gdn_conv_dim(), 1, c.linear_conv_kernel_dim});
      add(g + "A_log", {c.linear_num_value_heads});
      add(g + "dt_bias", {c.linear_num_value_heads});
      add(g + "norm.weight", {c.linear_value_head_dim});
      add(g + "out_proj.weight", {H, c.gdn_value_dim()});
    } else {
      const std::string a = l + "self_attn.";
      add(a + "q_proj.weight", {c.num_attention_heads * 2 * c.head_dim, H});
      add(a + "k_proj.weight", {c.num_kv_heads * c.head_dim, H});
      add(a + "v_proj.weight", {c.num_kv_heads * c.head_dim, H});
      add(a + "o_proj.weight", {H, c.num_attention_heads * c.head_dim});
      add(a + "q_norm.weight", {c.head_dim});
      add(a + "k_norm.weight", {c.head_dim});
    }
    add(l + "mlp.gate_proj.weight", {c.intermediate_size, H});
    add(l + "mlp.up_proj.weight", {c.intermediate_size, H});
    add(l + "mlp.down_proj.weight", {H, c.intermediate_size});
  }
  add("norm.weight", {H});
  return out;
}

ModelWeights bind_weights(const ModelConfig& c, const Checkpoint& ckpt, const std::string& source) {
  ModelWeights w;
  w.prefix = detect_prefix(ckpt, source);
  std::set<std::string> used;

  auto get = [&](const std::string& short_name, const Shape& shape, bool allow_f32) -> TensorView {
    const std::string name = w.prefix + short_name;
    auto it = ckpt.tensors().find(name);
    if (it == ckpt.tensors().end()) fail("{}: missing tensor '{}' (expected shape {})", source, name, shape_str(shape));
    const auto& [file, entry] = it->second;
    const TensorView& v = entry->view;
    if (v.shape != shape)
      fail("{}: tensor '{}' has shape {}, expected {}", file->path().string(), name, shape_str(v.shape), shape_str(shape));
    const bool dtype_ok = v.dtype == DType::bf16 || (allow_f32 && v.dtype == DType::f32);
    if (!dtype_ok)
      fail("{}: tensor '{}' has dtype {}, expected BF16{}", file->path().string(), name, dtype_name(v.dtype),
           allow_f32 ? " or F32" : "");
    used.insert(name);
    w.parameter_count += v.numel();
    return v;
  };
  // Every tensor may be f32 as well as bf16: official checkpoints store A_log and the GDN norm in
  // f32, and an f32 export of the whole model is valid too.
  const bool f32_ok = true;
  const int64_t H = c.hidden_size;
  w.embed_tokens = get("embed_tokens.weight", {c.vocab_size, H}, f32_ok);
  for (int64_t i = 0; i < c.num_layers; ++i) {
    const std::string l = fmt::format("layers.{}.", i);
    LayerWeights L;
    L.kind = c.layer_types[i];
    L.input_layernorm = get(l + "input_layernorm.weight", {H}, f32_ok);
    L.post_attention_layernorm = get(l + "post_attention_layernorm.weight", {H}, f32_ok);
    if (L.kind == LayerKind::linear_attention) {
      const std::string g = l + "linear_attn.";
      GdnWeights& G = L.gdn;
      G.in_proj_qkv = get(g + "in_proj_qkv.weight", {c.gdn_conv_dim(), H}, f32_ok);
      G.in_proj_z = get(g + "in_proj_z.weight", {c.gdn_value_dim(), H}, f32_ok);
      G.in_proj_b = get(g + "in_proj_b.weight", {c.linear_num_value_heads, H}, f32_ok);
      G.in_proj_a = get(g + "in_proj_a.weight", {c.linear_num_value_heads, H}, f32_ok);
      G.conv1d = get(g + "conv1d.weight", {c.gdn_conv_dim(), 1, c.linear_conv_kernel_dim}, f32_ok);
      G.A_log = get(g + "A_log", {c.linear_num_value_heads}, f32_ok);
      G.dt_bias = get(g + "dt_bias", {c.linear_num_value_heads}, f32_ok);
      G.norm = get(g + "norm.weight", {c.linear_value_head_dim}, f32_ok);
      G.out_proj = get(g + "out_proj.weight", {H, c.gdn_value_dim()}, f32_ok);
    } else {
      const std::string a = l + "self_attn.";
      AttentionWeights& A = L.attn;
      A.q_proj = get(a + "q_proj.weight", {c.num_attention_heads * 2 * c.head_dim, H}, f32_ok);
      A.k_proj = get(a + "k_proj.weight", {c.num_kv_heads * c.head_dim, H}, f32_ok);
      A.v_proj = get(a + "v_proj.weight", {c.num_kv_heads * c.head_dim, H}, f32_ok);
      A.o_proj = get(a + "o_proj.weight", {H, c.num_attention_heads * c.head_dim}, f32_ok);
      A.q_norm = get(a + "q_norm.weight", {c.head_dim}, f32_ok);
      A.k_norm = get(a + "k_norm.weight", {c.head_dim}, f32_ok);
    }
    L.mlp.gate_proj = get(l + "mlp.gate_proj.weight", {c.intermediate_size, H}, f32_ok);
    L.mlp.up_proj = get(l + "mlp.up_proj.weight", {c.intermediate_size, H}, f32_ok);
    L.mlp.down_proj = get(l + "mlp.down_proj.weight", {H, c.intermediate_size}, f32_ok);
    w.layers.push_back(std::move(L));
  }
  w.final_norm = get("norm.weight", {H}, f32_ok);

  // The output head: lm_head.weight at the top level, or the embedding when tied.
  auto head = ckpt.tensors().find("lm_head.weight");
  if (c.tie_word_embeddings) {
    w.lm_head = w.embed_tokens;
    if (head != ckpt.tensors().end()) used.insert("lm_head.weight");  // a tied export may still carry a copy
  } else {
    if (head == ckpt.tensors().end())
      fail("{}: missing tensor 'lm_head.weight' (expected shape {}; tie_word_embeddings is false)", source,
           shape_str({c.vocab_size, H}));
    const TensorView& v = head->second.entry->view;
    if (v.shape != Shape{c.vocab_size, H})
      fail("{}: tensor 'lm_head.weight' has shape {}, expected {}", head->second.file->path().string(),
           shape_str(v.shape), shape_str({c.vocab_size, H}));
    if (v.dtype != DType::bf16 && v.dtype != DType::f32)
      fail("{}: tensor 'lm_head.weight' has dtype {}, expected BF16 or F32", head->second.file->path().string(),
           dtype_name(v.dtype));
    w.lm_head = v;
    used.insert("lm_head.weight");
    w.parameter_count += v.numel();
  }

  for (const auto& [name, loc] : ckpt.tensors()) {
    if (used.count(name)) continue;
    if (is_skipped(name)) {
      ++w.skipped_tensors;
      continue;
    }
    fail("{}: unexpected tensor '{}' of shape {} in {} (not part of the Qwen3.5 text model with this config)",
         source, name, shape_str(loc.entry->view.shape), loc.file->path().string());
  }
  return w;
}

LoadedModel load_model(const std::filesystem::path& dir, const LoadOptions& options) {
  LoadedModel m;
  m.dir = dir;
  m.config = load_model_config(dir);
  m.checkpoint = std::make_unique<Checkpoint>(dir);
  m.weights = bind_weights(m.config, *m.checkpoint, dir.string());
  if (options.show_progress) {
    const bool tty = isatty(fileno(stderr));
    int last_percent = -1;
    m.checkpoint->prefault([&](size_t done, size_t total) {
      const int percent = total ? int(done * 100 / total) : 100;
      if (!tty || percent == last_percent) return;
      last_percent = percent;
      std::fprintf(stderr, "\rloading %s: %3d%% (%.1f / %.1f GiB)", dir.filename().c_str(), percent,
                   done / 1073741824.0, total / 1073741824.0);
      if (done == total) std::fputc('\n', stderr);
    });
  }
  spdlog::info("loaded {}: {} layers ({} GDN, {} attention), {:.3f}B parameters, {} skipped tensors", dir.string(),
               m.config.num_layers, m.config.num_layers_of(LayerKind::linear_attention),
               m.config.num_layers_of(LayerKind::full_attention), m.weights.parameter_count / 1e9,
               m.weights.skipped_tensors);
  return m;
}

}  // namespace di
