#include "engine/qwen35_model.h"

#include <fmt/format.h>

namespace di {

// Shapes: N = tokens in the step, H = hidden, Hk/Hv = GDN key/value heads of dk/dv,
// Hq/Hkv = attention query/kv heads of D, I = intermediate. Under tensor parallelism every count is
// the rank's (model/tensor_parallel.h) and the three output projections sum over the ranks.

Tensor Qwen35Model::forward(const BatchPlan& plan, const std::vector<int64_t>& logit_rows, Ops& ops) const {
  const ModelConfig& c = config_;
  ops.begin_step(plan);
  Tensor x = ops.embed(w_.embed_tokens, plan);                                // x = E[ids]          [N, H]
  trace("embed", x);
  for (int64_t i = 0; i < c.num_layers; ++i) {
    const LayerWeights& L = w_.layers[i];
    const std::string name = fmt::format("layers.{}.", i);
    Tensor h = ops.rms_norm(x, L.input_layernorm, c.rms_norm_eps);          // h = RMSNorm1p(x)     [N, H]
    trace(name + "input_norm", h);
    h = L.kind == LayerKind::linear_attention ? gdn_mixer(i, L.gdn, h, plan, ops)
                                              : attention_mixer(i, L.attn, h, plan, ops);
    trace(name + "mixer", h);
    x = ops.add(x, h);                                                        // x = x + mixer(h)
    h = ops.rms_norm(x, L.post_attention_layernorm, c.rms_norm_eps);
    trace(name + "post_norm", h);
    h = mlp(L.mlp, h, ops);
    trace(name + "mlp", h);
    x = ops.add(x, h);                                                        // x = x + MLP(h)
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
  Tensor mixed = ops.linear(h, G.in_proj_qkv);                               // [N, 2*Hk*dk + Hv*dv] = [Q|K|V]
  trace(name + "mixed", mixed);
  Tensor z = ops.linear(h, G.in_proj_z);                                     // output gate          [N, Hv*dv]
  Tensor b = ops.linear(h, G.in_proj_b);                                     //                      [N, Hv]
  Tensor a = ops.linear(h, G.in_proj_a);                                     //                      [N, Hv]
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
  Tensor q, gate;
  ops.split_q_gate(ops.linear(h, A.q_proj), D, q, gate);                     // per head [q | gate]  [N, Hq*D] each
  q = ops.rms_norm(q.reshaped({N * c.num_attention_heads, D}), A.q_norm, c.rms_norm_eps);
  Tensor k = ops.rms_norm(ops.linear(h, A.k_proj).reshaped({N * c.num_kv_heads, D}), A.k_norm, c.rms_norm_eps);
  trace(name + "q_norm", q);
  trace(name + "k_norm", k);
  Tensor v = ops.linear(h, A.v_proj);                                        //                      [N, Hkv*D]
  ops.rope(q, k, plan, D, c.rotary_dim, c.rope_theta);                       // rotate dims [0, rotary_dim)
  Tensor o = ops.attention(q, k, v, plan, c.index_within_kind(layer));       // softmax(q k^T / sqrt(D)) v
  o = ops.sigmoid_gate(o, gate);                                             // o * sigmoid(gate)
  trace(name + "gated", o);
  return ops.linear_all_reduce(o, A.o_proj);                                 // summed over ranks    [N, H]
}

Tensor Qwen35Model::mlp(const MlpWeights& M, const Tensor& h, Ops& ops) const {
  Tensor gate = ops.linear(h, M.gate_proj);                                  //                      [N, I]
  Tensor up = ops.linear(h, M.up_proj);
  return ops.linear_all_reduce(ops.swiglu(gate, up), M.down_proj);           // down(silu(gate) * up)
}

}  // namespace di
