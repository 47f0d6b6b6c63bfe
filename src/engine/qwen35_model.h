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
  // False when the observer only marks where the step is (a timing) and reads no value: a fused
  // value is then not computed for it, and it receives that value's input instead.
  bool observer_reads_values = true;

  const ModelConfig& config() const { return config_; }

 private:
  // A mixer's or the MLP's last linear layer, applied by the caller together with the residual add
  // that takes its result (Ops::residual_projection).
  struct OutputProjection {
    ProjectionInput input;
    const TensorView* weight;
  };

  OutputProjection gdn_mixer(int64_t layer, const GdnWeights& G, const ProjectionInput& h, const BatchPlan& plan,
                             Ops& ops) const;
  OutputProjection attention_mixer(int64_t layer, const AttentionWeights& A, const ProjectionInput& h,
                                   const BatchPlan& plan, Ops& ops) const;
  OutputProjection mlp(const MlpWeights& M, const ProjectionInput& h, Ops& ops) const;
  void trace(const std::string& name, const Tensor& value) const {
    if (observer) observer(name, value);
  }
  // Values the step itself may never write out (a fused norm, a projection added straight into the
  // residual stream): computed on their own, only when observed.
  void trace(const std::string& name, const ProjectionInput& value, Ops& ops) const;
  void trace(const std::string& name, const OutputProjection& value, Ops& ops) const;

  const ModelConfig& config_;
  const ModelWeights& w_;
};

}  // namespace di
