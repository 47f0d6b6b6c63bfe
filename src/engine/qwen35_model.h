#pragma once
// The Qwen3.5 text model's forward pass, written once against Ops (kernels/ops.h).
#include <functional>
#include <string>
#include <vector>

#include "kernels/ops.h"
#include "model/weights.h"

namespace di {

class Qwen35Model {
 public:
  Qwen35Model(const ModelConfig& config, const ModelWeights& weights) : config_(config), w_(weights) {}

  // One step over a batch of sequences (prefill pieces and decode tokens alike). Returns the
  // logits [logit_rows.size(), vocab] of the requested token rows.
  Tensor forward(const BatchPlan& plan, const std::vector<int64_t>& logit_rows, Ops& ops) const;

  // Called with every named intermediate ("layers.3.attn.q", ...) when set: the hook that lets a
  // debug run compare two Ops implementations layer by layer.
  std::function<void(const std::string& name, const Tensor& value)> observer;

  const ModelConfig& config() const { return config_; }

 private:
  Tensor gdn_mixer(int64_t layer, const GdnWeights& G, const Tensor& h, const BatchPlan& plan, Ops& ops) const;
  Tensor attention_mixer(int64_t layer, const AttentionWeights& A, const Tensor& h, const BatchPlan& plan,
                         Ops& ops) const;
  Tensor mlp(const MlpWeights& M, const Tensor& h, Ops& ops) const;
  void trace(const std::string& name, const Tensor& value) const {
    if (observer) observer(name, value);
  }

  const ModelConfig& config_;
  const ModelWeights& w_;
};

}  // namespace di
