#pragma once
// The operations the Qwen3.5 forward pass is written against. The model file (engine/qwen35_model)
// calls only these, so the same layer loop runs on the CPU reference ops and on the CUDA ops, and a
// debug switch can compare every named intermediate between the two.
//
// Activations are [tokens, features] row-major tensors. A batch is several sequences laid end to
// end (variable length, cu_seqlens style); each sequence owns a state slot that holds its
// per-layer memory: the KV cache of the full-attention layers, and the conv state and recurrent
// state of the GDN layers.
#include <cstdint>
#include <functional>
#include <utility>
#include <vector>

#include "core/tensor.h"
#include "model/config.h"

namespace di {

struct SequenceSpan {
  int64_t first_token = 0;  // row of its first token in the batch
  int64_t n_tokens = 0;     // tokens of this sequence in this step
  int64_t n_past = 0;       // tokens already in its state (0 for a fresh prefill)
  int slot = -1;            // its state slot
};

struct BatchPlan {
  std::vector<int32_t> token_ids;    // [N]
  std::vector<int64_t> positions;    // [N], n_past + index within the sequence
  std::vector<SequenceSpan> seqs;
  int64_t n_tokens() const { return int64_t(token_ids.size()); }
};

// The input rows of a projection: a tensor, or a row-wise op on one that an implementation may apply
// inside the projection, to each row on the way in, rather than write out (CudaOps does for
// decode-sized steps). Ops::materialise computes it with the plain op.
struct ProjectionInput {
  enum class Op {
    none,            // x
    rms_norm,        // rms_norm(x, weight, eps)
    gated_rms_norm,  // gated_rms_norm(x, gate, weight, eps): gate is z
    sigmoid_gate,    // sigmoid_gate(x, gate)
  };
  ProjectionInput(Tensor x) : x(std::move(x)) {}  // NOLINT(google-explicit-constructor): a plain input
  static ProjectionInput rms_normed(Tensor x, const TensorView& weight, double eps) {
    ProjectionInput in(std::move(x));
    in.op = Op::rms_norm, in.weight = &weight, in.eps = eps;
    return in;
  }
  static ProjectionInput gated_rms_normed(Tensor o, Tensor z, const TensorView& weight, double eps) {
    ProjectionInput in(std::move(o));
    in.op = Op::gated_rms_norm, in.gate = std::move(z), in.weight = &weight, in.eps = eps;
    return in;
  }
  static ProjectionInput sigmoid_gated(Tensor x, Tensor gate) {
    ProjectionInput in(std::move(x));
    in.op = Op::sigmoid_gate, in.gate = std::move(gate);
    return in;
  }

  Tensor x;
  Op op = Op::none;
  Tensor gate;
  const TensorView* weight = nullptr;  // the norm's
  double eps = 0;
};

class Ops {
 public:
  virtual ~Ops() = default;

  // State slots: one per live sequence, zeroed on allocation.
  virtual int alloc_slot() = 0;
  virtual void free_slot(int slot) = 0;

  // Runs one forward step: `forward` calls the model's forward pass on `plan` and returns the logits
  // of `rows`. An implementation may run it eagerly (the default) or, for steps that repeat with
  // the same shape, replay a captured CUDA graph of it (CudaOps, for decode steps). `graphable` is
  // false when the caller observes intermediates (the trace needs every op to run on the host).
  // The returned logits stay valid until the next step.
  virtual Tensor run_forward(const BatchPlan& plan, const std::vector<int64_t>& rows, bool graphable,
                             const std::function<Tensor()>& forward) {
    (void)plan, (void)rows, (void)graphable;
    return forward();
  }

  // Called once per forward step before any op: the plan (token ids, positions, sequences, slots)
  // is then fixed for every op of the step, so an implementation may prepare it once (the CUDA ops
  // upload the batch metadata and grow the KV cache here).
  virtual void begin_step(const BatchPlan& plan) { (void)plan; }

  // x[t] = table[token_ids[t]]                                            -> [N, hidden]
  // Under tensor parallelism the table is the rank's slice of the vocabulary (rows [rank*V/size,
  // (rank+1)*V/size)): ids of other slices read as zero and an all-reduce joins the ranks' rows.
  virtual Tensor embed(const TensorView& table, const BatchPlan& plan) = 0;
  // Zero-centred RMSNorm over the last dim: x / rms(x) * (1 + w)           -> shape of x
  virtual Tensor rms_norm(const Tensor& x, const TensorView& weight, double eps) = 0;
  // a + b (the residual stream)
  virtual Tensor add(const Tensor& a, const Tensor& b) = 0;
  // x @ W^T with W [out, in]                                              -> [N, out]
  virtual Tensor linear(const Tensor& x, const TensorView& weight) = 0;
  // rows of x in the given order                                           -> [rows, features]
  virtual Tensor gather_rows(const Tensor& x, const std::vector<int64_t>& rows) = 0;
  // silu(gate) * up
  virtual Tensor swiglu(const Tensor& gate, const Tensor& up) = 0;

  // --- Projections of one input, in the fused forms an implementation may run in one pass: the same
  // values as the plain ops they stand for -------------------------------------------------------
  // The input op computed on its own (a plain input is returned as it is).
  Tensor materialise(const ProjectionInput& in) {
    switch (in.op) {
      case ProjectionInput::Op::rms_norm: return rms_norm(in.x, *in.weight, in.eps);
      case ProjectionInput::Op::gated_rms_norm: return gated_rms_norm(in.x, in.gate, *in.weight, in.eps);
      case ProjectionInput::Op::sigmoid_gate: return sigmoid_gate(in.x, in.gate);
      case ProjectionInput::Op::none: break;
    }
    return in.x;
  }
  // [x W_0^T, x W_1^T, ...]: the projections of one input (a layer's input projections).
  virtual std::vector<Tensor> linear_projections(const ProjectionInput& in,
                                                 const std::vector<const TensorView*>& weights) {
    const Tensor x = materialise(in);
    std::vector<Tensor> out;
    out.reserve(weights.size());
    for (const TensorView* w : weights) out.push_back(linear(x, *w));
    return out;
  }
  // swiglu(x W_gate^T, x W_up^T): the MLP's first half.
  virtual Tensor swiglu_projection(const ProjectionInput& in, const TensorView& gate, const TensorView& up) {
    const Tensor x = materialise(in);
    return swiglu(linear(x, gate), linear(x, up));
  }
  // residual + x W^T, W's input features split over the ranks (linear_all_reduce): an output
  // projection (o_proj, out_proj, down_proj) and the residual add that takes its result.
  virtual Tensor residual_projection(const Tensor& residual, const ProjectionInput& in, const TensorView& weight) {
    return add(residual, linear_all_reduce(materialise(in), weight));
  }

  // --- Gated DeltaNet -----------------------------------------------------------------------
  // Causal depthwise conv over time per channel, left context from the slot's conv state (the last
  // `kernel` pre-conv inputs), then SiLU; the state is updated to the newest inputs.
  virtual Tensor gdn_conv1d_silu(const Tensor& mixed_qkv, const TensorView& conv_weight, const BatchPlan& plan,
                                 int64_t gdn_layer) = 0;
  // The gates, g = -exp(A_log) * softplus(a + dt_bias) (float32) and beta = sigmoid(b) from a, b
  // [N, Hv]; then splits [Q|K|V], L2-normalises q and k, scales q by dk^-0.5, and runs the gated
  // delta rule from the slot's recurrent state [Hv, dk, dv] (updated to the final state). One op, so
  // that an implementation can fuse the gates and norms into the recurrence.  -> [N, Hv*dv]
  virtual Tensor gdn_delta_rule(const Tensor& qkv, const Tensor& a, const Tensor& b, const TensorView& A_log,
                                const TensorView& dt_bias, const BatchPlan& plan, int64_t gdn_layer) = 0;
  // Per value head: norm(o) * w (plain weight) * silu(z)                   -> [N, Hv*dv]
  virtual Tensor gated_rms_norm(const Tensor& o, const Tensor& z, const TensorView& weight, double eps) = 0;
  // gdn_delta_rule, then its output through the gated norm above: y, the output projection's input.
  // One op, so that an implementation can fuse the norm into the recurrence (the CUDA decode step
  // does); o is the recurrence's output where it exists on its own, else an undefined tensor.
  struct NormedGdnOutput {
    Tensor o;
    ProjectionInput y;
  };
  virtual NormedGdnOutput gdn_delta_rule_normed(const Tensor& qkv, const Tensor& a, const Tensor& b,
                                                const TensorView& A_log, const TensorView& dt_bias, const Tensor& z,
                                                const TensorView& norm_weight, double eps, const BatchPlan& plan,
                                                int64_t gdn_layer) {
    Tensor o = gdn_delta_rule(qkv, a, b, A_log, dt_bias, plan, gdn_layer);
    ProjectionInput y = ProjectionInput::gated_rms_normed(o, z, norm_weight, eps);
    return {std::move(o), std::move(y)};
  }

  // --- Gated full attention -----------------------------------------------------------------
  // q_proj output [N, Hq*2*D] (per head [q | gate]) -> q [N, Hq*D], gate [N, Hq*D]
  virtual void split_q_gate(const Tensor& q_and_gate, int64_t head_dim, Tensor& q, Tensor& gate) = 0;
  // q_proj's output split per head into q and gate, and q and k RMSNorm1p-ed per head (weights of
  // head_dim): q [N * Hq, D], gate [N, Hq * D], k [N * Hkv, D]. One op, so that an implementation
  // can do it in one pass.
  virtual void attention_qk_norm(const Tensor& q_and_gate, const Tensor& k_proj, const TensorView& q_norm,
                                 const TensorView& k_norm, double eps, int64_t head_dim, Tensor& q, Tensor& gate,
                                 Tensor& k) {
    split_q_gate(q_and_gate, head_dim, q, gate);
    const int64_t q_rows = q.numel() / head_dim, k_rows = k_proj.numel() / head_dim;
    q = rms_norm(q.reshaped({q_rows, head_dim}), q_norm, eps);
    k = rms_norm(k_proj.reshaped({k_rows, head_dim}), k_norm, eps);
  }
  // Rotary embedding on the first rotary_dim dims of each head (NeoX halves), in place of q and k.
  virtual void rope(Tensor& q, Tensor& k, const BatchPlan& plan, int64_t head_dim, int64_t rotary_dim,
                    double theta) = 0;
  // Appends k, v to the slot's KV cache and attends causally over it (GQA) -> [N, Hq*D]
  virtual Tensor attention(const Tensor& q, const Tensor& k, const Tensor& v, const BatchPlan& plan,
                           int64_t attn_layer) = 0;
  // x * sigmoid(gate)
  virtual Tensor sigmoid_gate(const Tensor& x, const Tensor& gate) = 0;

  // --- Tensor parallelism (model/tensor_parallel.h); on one rank these are plain ops ----------
  // x @ W^T where the rank holds a slice of W's input features (o_proj, out_proj, down_proj): the
  // ranks' float32 partial sums are added, then rounded once, as the unsplit GEMM rounds once.
  virtual Tensor linear_all_reduce(const Tensor& x, const TensorView& weight) { return linear(x, weight); }
  // [rows, n] on every rank -> [rows, size*n], the ranks' columns side by side in rank order (the
  // logits of the vocabulary-parallel lm_head).
  virtual Tensor all_gather_columns(const Tensor& x) { return x; }

  // Host copy of a tensor as float32 (for logits and debugging).
  virtual std::vector<float> to_host(const Tensor& x) = 0;
};

}  // namespace di
