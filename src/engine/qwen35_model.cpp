#include "engine/qwen35_model.h"

#include <fmt/format.h>

#include <tuple>

namespace di {

// Shapes: N = tokens in the step, H = hidden, Hk/Hv = GDN key/value heads of dk/dv,
// Hq/Hkv = attention query/kv heads of D, I = intermediate. Under tensor parallelism every count is
// the rank's (model/tensor_parallel.h) and the three output projections sum over the ranks.

Tensor Qwen35Model::forward(const BatchPlan& plan, const std::vector<int64_t>& logit_rows, Ops& ops) const {
  const ModelConfig& c = config_;
  const double eps = c.rms_norm_eps;
  ops.begin_step(plan);
  Tensor x = ops.embed(w_.embed_tokens, plan);                                // x = E[ids]          [N, H]
  trace("embed", x);
  // Each norm is handed to the projections that read it, and each output projection to the residual
  // add that takes its result (Ops::residual_projection): an implementation may fuse them.
  for (int64_t i = 0; i < c.num_layers; ++i) {
    const LayerWeights& L = w_.layers[i];
    const std::string name = fmt::format("layers.{}.", i);
    const ProjectionInput h = ProjectionInput::rms_normed(x, L.input_layernorm, eps);  // h = RMSNorm1p(x)
    trace(name + "input_norm", h, ops);
    const OutputProjection mixer = L.kind == LayerKind::linear_attention ? gdn_mixer(i, L.gdn, h, plan, ops)
                                                                         : attention_mixer(i, L.attn, h, plan, ops);
    trace(name + "mixer", mixer, ops);
    x = ops.residual_projection(x, mixer.input, *mixer.weight);              // x = x + mixer(h)
    const ProjectionInput h2 = ProjectionInput::rms_normed(x, L.post_attention_layernorm, eps);
    trace(name + "post_norm", h2, ops);
    const OutputProjection mlp_out = mlp(L.mlp, h2, ops);
    trace(name + "mlp", mlp_out, ops);
    x = ops.residual_projection(x, mlp_out.input, *mlp_out.weight);          // x = x + MLP(RMSNorm1p(x))
    trace(name + "out", x);
  }
  const ProjectionInput last =                                                // only the rows asked for
      ProjectionInput::rms_normed(ops.gather_rows(x, logit_rows), w_.final_norm, eps);
  trace("final_norm", last, ops);
  Tensor logits = ops.all_gather_columns(ops.linear_projections(last, {&w_.lm_head})[0]);  // [rows, vocab]
  trace("logits", logits);
  return logits;
}

Qwen35Model::OutputProjection Qwen35Model::gdn_mixer(int64_t layer, const GdnWeights& G, const ProjectionInput& h,
                                                     const BatchPlan& plan, Ops& ops) const {
  const ModelConfig& c = config_;
  const int64_t gdn_layer = c.index_within_kind(layer);
  const std::string name = fmt::format("layers.{}.gdn.", layer);
  const std::vector<Tensor> in = ops.linear_projections(h, {&G.in_proj_qkv, &G.in_proj_z, &G.in_proj_b, &G.in_proj_a});
  const Tensor& mixed = in[0];                                               // [N, 2*Hk*dk + Hv*dv] = [Q|K|V]
  const Tensor& z = in[1];                                                   // output gate          [N, Hv*dv]
  const Tensor& b = in[2];                                                   //                      [N, Hv]
  const Tensor& a = in[3];                                                   //                      [N, Hv]
  trace(name + "mixed", mixed);
  Tensor qkv = ops.gdn_conv1d_silu(mixed, G.conv1d, plan, gdn_layer);        // silu(causal_conv(mixed))
  trace(name + "qkv", qkv);
  // g = -exp(A_log) softplus(a + dt_bias), beta = sigmoid(b); q, k L2-normalised, q scaled by dk^-0.5
  auto [o, y] = ops.gdn_delta_rule_normed(qkv, a, b, G.A_log, G.dt_bias, z, G.norm, c.rms_norm_eps, plan, gdn_layer);
                                                                             // S_t = (I - b k k^T) e^g S + b k v^T
                                                                             // o_t = S_t^T q_t     [N, Hv*dv]
                                                                             // y = norm(o) * w * silu(z)
  if (o.defined()) trace(name + "core", o);                                 // (no o of its own when fused)
  trace(name + "normed", y, ops);
  return {std::move(y), &G.out_proj};                                        // out_proj(y)          [N, H]
}

Qwen35Model::OutputProjection Qwen35Model::attention_mixer(int64_t layer, const AttentionWeights& A,
                                                           const ProjectionInput& h, const BatchPlan& plan,
                                                           Ops& ops) const {
  const ModelConfig& c = config_;
  const int64_t D = c.head_dim;
  const std::string name = fmt::format("layers.{}.attn.", layer);
  const std::vector<Tensor> in = ops.linear_projections(h, {&A.q_proj, &A.k_proj, &A.v_proj});
  Tensor q, gate, k;  // q_proj's rows hold per head [q | gate]; q and k are RMSNorm1p-ed per head of D
  ops.attention_qk_norm(in[0], in[1], A.q_norm, A.k_norm, c.rms_norm_eps, D, q, gate, k);
  trace(name + "q_norm", q);
  trace(name + "k_norm", k);
  const Tensor& v = in[2];                                                   //                      [N, Hkv*D]
  ops.rope(q, k, plan, D, c.rotary_dim, c.rope_theta);                       // rotate dims [0, rotary_dim)
  Tensor o = ops.attention(q, k, v, plan, c.index_within_kind(layer));       // softmax(q k^T / sqrt(D)) v
  ProjectionInput gated = ProjectionInput::sigmoid_gated(o, gate);           // o * sigmoid(gate)
  trace(name + "gated", gated, ops);
  return {std::move(gated), &A.o_proj};                                      // o_proj(gated)        [N, H]
}

Qwen35Model::OutputProjection Qwen35Model::mlp(const MlpWeights& M, const ProjectionInput& h, Ops& ops) const {
  Tensor act = ops.swiglu_projection(h, M.gate_proj, M.up_proj);            // silu(h Wg^T) * (h Wu^T) [N, I]
  return {std::move(act), &M.down_proj};                                     // down(act)
}

void Qwen35Model::trace(const std::string& name, const ProjectionInput& value, Ops& ops) const {
  if (observer) observer(name, observer_reads_values ? ops.materialise(value) : value.x);
}

void Qwen35Model::trace(const std::string& name, const OutputProjection& value, Ops& ops) const {
  if (observer)
    observer(name, observer_reads_values ? ops.linear_all_reduce(ops.materialise(value.input), *value.weight)
                                         : value.input.x);
}

}  // namespace di
