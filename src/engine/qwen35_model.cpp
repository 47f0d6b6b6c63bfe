#include "engine/qwen35_model.h"

#include <fmt/format.h>

#include <tuple>

namespace di {

// Shapes: N = tokens in the step, H = hidden, Hk/Hv = GDN key/value heads of dk/dv,
// Hq/Hkv = attention query/kv heads of D, I = intermediate. Under tensor parallelism every count is
// the rank's (model/tensor_parallel.h) and the three output projections sum over the ranks.

Tensor Qwen35Model::forward(const BatchPlan& plan, const std::vector<int64_t>& logit_rows, Ops& ops) const {
  const ModelConfig& c = config_;
  ops.begin_step(plan);
  Tensor x = ops.embed(w_.embed_tokens, plan);                                // x = E[ids]          [N, H]
  trace("embed", x);
  // Each residual add is fused with the norm that reads its sum: the mixer's with the post-attention
  // norm, the MLP's with the next layer's input norm (the last layer's with nothing).
  Tensor h = ops.rms_norm(x, w_.layers[0].input_layernorm, c.rms_norm_eps);  // h = RMSNorm1p(x)     [N, H]
  for (int64_t i = 0; i < c.num_layers; ++i) {
    const LayerWeights& L = w_.layers[i];
    const std::string name = fmt::format("layers.{}.", i);
    trace(name + "input_norm", h);
    h = L.kind == LayerKind::linear_attention ? gdn_mixer(i, L.gdn, h, plan, ops)
                                              : attention_mixer(i, L.attn, h, plan, ops);
    trace(name + "mixer", h);
    std::tie(x, h) = ops.add_rms_norm(x, h, L.post_attention_layernorm, c.rms_norm_eps);
                                                                              // x = x + mixer(h); h = RMSNorm1p(x)
    trace(name + "post_norm", h);
    h = mlp(L.mlp, h, ops);
    trace(name + "mlp", h);
    if (i + 1 < c.num_layers)                                                 // x = x + MLP(h); h = the next
      std::tie(x, h) = ops.add_rms_norm(x, h, w_.layers[i + 1].input_layernorm, c.rms_norm_eps);  // layer's norm
    else
      x = ops.add(x, h);
    trace(name + "out", x);
  }
  Tensor last = ops.gather_rows(x, logit_rows);                               // only the rows asked for
  last = ops.rms_norm(last, w_.final_norm, c.rms_norm_eps);
  trace("final_norm", last);
  Tensor logits = ops.all_gather_columns(ops.linear(last, w_.lm_head));       // [rows, vocab]
  trace("logits", logits);
  return logits;
}

Tensor Qwen35Model::gdn_mixer(int64_t layer, const GdnWeights& G, const Tensor& h, const BatchPlan& plan,
                              Ops& ops) const {
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
  Tensor o = ops.gdn_delta_rule(qkv, a, b, G.A_log, G.dt_bias, plan, gdn_layer);
                                                                             // S_t = (I - b k k^T) e^g S + b k v^T
                                                                             // o_t = S_t^T q_t     [N, Hv*dv]
  trace(name + "core", o);
  Tensor y = ops.gated_rms_norm(o, z, G.norm, c.rms_norm_eps);               // norm(o) * w * silu(z)
  trace(name + "normed", y);
  return ops.linear_all_reduce(y, G.out_proj);                               // summed over ranks    [N, H]
}

Tensor Qwen35Model::attention_mixer(int64_t layer, const AttentionWeights& A, const Tensor& h, const BatchPlan& plan,
                                    Ops& ops) const {
  const ModelConfig& c = config_;
  const int64_t D = c.head_dim, N = plan.n_tokens();
  const std::string name = fmt::format("layers.{}.attn.", layer);
  const std::vector<Tensor> in = ops.linear_projections(h, {&A.q_proj, &A.k_proj, &A.v_proj});
  Tensor q, gate;
  ops.split_q_gate(in[0], D, q, gate);                                       // per head [q | gate]  [N, Hq*D] each
  q = ops.rms_norm(q.reshaped({N * c.num_attention_heads, D}), A.q_norm, c.rms_norm_eps);
  Tensor k = ops.rms_norm(in[1].reshaped({N * c.num_kv_heads, D}), A.k_norm, c.rms_norm_eps);
  trace(name + "q_norm", q);
  trace(name + "k_norm", k);
  const Tensor& v = in[2];                                                   //                      [N, Hkv*D]
  ops.rope(q, k, plan, D, c.rotary_dim, c.rope_theta);                       // rotate dims [0, rotary_dim)
  Tensor o = ops.attention(q, k, v, plan, c.index_within_kind(layer));       // softmax(q k^T / sqrt(D)) v
  o = ops.sigmoid_gate(o, gate);                                             // o * sigmoid(gate)
  trace(name + "gated", o);
  return ops.linear_all_reduce(o, A.o_proj);                                 // summed over ranks    [N, H]
}

Tensor Qwen35Model::mlp(const MlpWeights& M, const Tensor& h, Ops& ops) const {
  Tensor act = ops.swiglu_projection(h, M.gate_proj, M.up_proj);            // silu(h Wg^T) * (h Wu^T) [N, I]
  return ops.linear_all_reduce(act, M.down_proj);                            // down(act)
}

}  // namespace di
