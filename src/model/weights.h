#pragma once
// The Qwen3.5 text model's parameters as views into the mapped checkpoint (no copy). Loading checks
// every tensor's presence, dtype and shape against the config and rejects unexpected tensors; the
// parts of a checkpoint the text model does not use (mtp.*, model.visual.*) are skipped.
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "core/tensor.h"
#include "model/config.h"
#include "model/safetensors.h"

namespace di {

struct GdnWeights {                 // Gated DeltaNet mixer ("linear_attn")
  TensorView in_proj_qkv;           // [2*Hk*dk + Hv*dv, hidden], rows [Q | K | V], head-major
  TensorView in_proj_z;             // [Hv*dv, hidden]
  TensorView in_proj_b;             // [Hv, hidden]
  TensorView in_proj_a;             // [Hv, hidden]
  TensorView conv1d;                // [conv_dim, 1, kernel]
  TensorView A_log;                 // [Hv] (often f32 in official checkpoints)
  TensorView dt_bias;               // [Hv]
  TensorView norm;                  // [dv], plain weight shared by all heads (often f32)
  TensorView out_proj;              // [hidden, Hv*dv]
};

struct AttentionWeights {           // gated full attention ("self_attn")
  TensorView q_proj;                // [Hq*2*D, hidden], per head [q (D) | gate (D)]
  TensorView k_proj;                // [Hkv*D, hidden]
  TensorView v_proj;                // [Hkv*D, hidden]
  TensorView o_proj;                // [hidden, Hq*D]
  TensorView q_norm;                // [D], zero-centred (1 + w)
  TensorView k_norm;                // [D]
};

struct MlpWeights {
  TensorView gate_proj;             // [intermediate, hidden]
  TensorView up_proj;               // [intermediate, hidden]
  TensorView down_proj;             // [hidden, intermediate]
};

struct LayerWeights {
  LayerKind kind;
  TensorView input_layernorm;       // [hidden], zero-centred
  TensorView post_attention_layernorm;
  GdnWeights gdn;                   // set when kind == linear_attention
  AttentionWeights attn;            // set when kind == full_attention
  MlpWeights mlp;
};

struct ModelWeights {
  TensorView embed_tokens;          // [vocab, hidden]
  std::vector<LayerWeights> layers;
  TensorView final_norm;            // [hidden]
  TensorView lm_head;               // [vocab, hidden]; the embedding itself when tied
  std::string prefix;               // "model.language_model." or "model."
  int64_t parameter_count = 0;      // text-model parameters, the tied head counted once
  int64_t skipped_tensors = 0;      // mtp.* and model.visual.* tensors present but not used
};

// A loaded model: config, mapped checkpoint, and views into it.
struct LoadedModel {
  std::filesystem::path dir;
  ModelConfig config;
  std::unique_ptr<Checkpoint> checkpoint;
  ModelWeights weights;
};

struct LoadOptions {
  bool show_progress = false;  // read every page once with a progress bar on stderr
};

LoadedModel load_model(const std::filesystem::path& dir, const LoadOptions& options = {});

// Binds and checks the tensors of `checkpoint` against `config`. `source` names the directory.
ModelWeights bind_weights(const ModelConfig& config, const Checkpoint& checkpoint, const std::string& source);

// Every tensor name and shape the text model has under `prefix` (for make-tiny-model and inspect).
struct ExpectedTensor {
  std::string name;
  Shape shape;
};
std::vector<ExpectedTensor> expected_tensors(const ModelConfig& config, const std::string& prefix);

}  // namespace di
