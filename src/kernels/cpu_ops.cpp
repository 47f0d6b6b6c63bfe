#include "kernels/cpu_ops.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "core/error.h"
#include "kernels/attention/ref.h"
#include "kernels/gdn/prep_ref.h"
#include "kernels/gdn/ref.h"
#include "kernels/gemm/ref.h"
#include "kernels/mlp/ref.h"
#include "kernels/norm/ref.h"
#include "kernels/rope/ref.h"

namespace di {

namespace {
void check_f32_host(const Tensor& t, const char* what) {
  DI_CHECK(t.defined() && t.dtype() == DType::f32 && t.device() == Device::cpu,
           "CpuOps: {} must be a float32 host tensor", what);
}
void check_same_shape(const Tensor& a, const Tensor& b, const char* op) {
  DI_CHECK(a.shape() == b.shape(), "{}: shapes {} and {} differ", op, shape_str(a.shape()), shape_str(b.shape()));
}
}  // namespace

CpuOps::CpuOps(const ModelConfig& config, Precision precision, HostCollectives* group, int rank)
    : config_(config), precision_(precision), group_(group), rank_(rank) {
  DI_CHECK(group == nullptr ? rank == 0 : rank >= 0 && rank < group->size(), "CpuOps: rank {} of {}", rank,
           group == nullptr ? 1 : group->size());
}

int CpuOps::alloc_slot() {
  int slot = 0;
  while (slot < int(slots_.size()) && slots_[slot].live) ++slot;
  if (slot == int(slots_.size())) slots_.emplace_back();
  SlotState& s = slots_[slot];
  const ModelConfig& c = config_;
  const int64_t n_gdn = c.num_layers_of(LayerKind::linear_attention);
  const int64_t n_attn = c.num_layers_of(LayerKind::full_attention);
  s.live = true;
  s.conv.assign(size_t(n_gdn), std::vector<float>(size_t(c.gdn_conv_dim() * c.linear_conv_kernel_dim), 0.0f));
  s.recurrent.assign(size_t(n_gdn), std::vector<float>(size_t(c.linear_num_value_heads * c.linear_key_head_dim *
                                                              c.linear_value_head_dim), 0.0f));
  s.keys.assign(size_t(n_attn), {});
  s.values.assign(size_t(n_attn), {});
  return slot;
}

void CpuOps::free_slot(int slot) {
  SlotState& s = live_slot(slot);
  s = SlotState{};
}

CpuOps::SlotState& CpuOps::live_slot(int slot) {
  DI_CHECK(slot >= 0 && slot < int(slots_.size()) && slots_[slot].live, "CpuOps: state slot {} is not allocated", slot);
  return slots_[slot];
}

const CpuOps::SlotState& CpuOps::slot_state(int slot) const {
  DI_CHECK(slot >= 0 && slot < int(slots_.size()) && slots_[slot].live, "CpuOps: state slot {} is not allocated", slot);
  return slots_[slot];
}

Tensor CpuOps::embed(const TensorView& table, const BatchPlan& plan) {
  const int64_t rows = table.dim(0), hidden = table.dim(1), first = rank_ * rows;
  const int64_t vocab = group_ ? rows * group_->size() : rows;
  Tensor x = new_f32({plan.n_tokens(), hidden});
  for (int64_t t = 0; t < plan.n_tokens(); ++t) {
    const int64_t id = plan.token_ids[t];
    DI_CHECK(id >= 0 && id < vocab, "token id {} at position {} is outside the vocabulary of {}", id, t, vocab);
    float* row = x.as<float>() + t * hidden;
    if (id >= first && id < first + rows) weight_to_f32(table, (id - first) * hidden, hidden, row, precision_);
    else std::fill_n(row, hidden, 0.0f);  // another rank's slice
  }
  if (group_) group_->all_reduce_sum(rank_, {x.as<float>(), size_t(x.numel())});  // one rank's row + zeros: exact
  return x;
}

Tensor CpuOps::rms_norm(const Tensor& x, const TensorView& weight, double eps) {
  check_f32_host(x, "rms_norm input");
  const int64_t dim = x.dim(-1);
  DI_CHECK(weight.numel() == dim, "rms_norm: weight of {} elements for rows of {}", weight.numel(), dim);
  Tensor y = new_f32(x.shape());
  ref::rms_norm(x.as<float>(), x.numel() / dim, dim, weight, eps, y.as<float>(), precision_);
  return y;
}

Tensor CpuOps::add(const Tensor& a, const Tensor& b) {
  check_same_shape(a, b, "add");
  Tensor y = new_f32(a.shape());
  for (int64_t i = 0; i < a.numel(); ++i) y.as<float>()[i] = rnd(a.as<float>()[i] + b.as<float>()[i], precision_);
  return y;
}

Tensor CpuOps::linear(const Tensor& x, const TensorView& weight) {
  check_f32_host(x, "linear input");
  const int64_t in = x.dim(-1), rows = x.numel() / in;
  Tensor y = new_f32({rows, weight.dim(0)});
  ref::linear(x.as<float>(), rows, in, weight, y.as<float>(), precision_);
  return y;
}

Tensor CpuOps::linear_all_reduce(const Tensor& x, const TensorView& weight) {
  if (!group_) return linear(x, weight);
  check_f32_host(x, "linear_all_reduce input");
  const int64_t in = x.dim(-1), rows = x.numel() / in;
  Tensor y = new_f32({rows, weight.dim(0)});
  ref::linear(x.as<float>(), rows, in, weight, y.as<float>(), precision_, /*round_output=*/false);
  group_->all_reduce_sum(rank_, {y.as<float>(), size_t(y.numel())});
  for (int64_t i = 0; i < y.numel(); ++i) y.as<float>()[i] = rnd(y.as<float>()[i], precision_);
  return y;
}

Tensor CpuOps::all_gather_columns(const Tensor& x) {
  if (!group_) return x;
  check_f32_host(x, "all_gather_columns input");
  const int64_t n = x.dim(-1), rows = x.numel() / n, ranks = group_->size();
  std::vector<float> gathered(size_t(x.numel() * ranks));  // [ranks, rows, n]
  group_->all_gather(rank_, {x.as<float>(), size_t(x.numel())}, gathered);
  Tensor y = new_f32({rows, ranks * n});
  for (int64_t r = 0; r < ranks; ++r)
    for (int64_t i = 0; i < rows; ++i)
      std::copy_n(gathered.data() + (r * rows + i) * n, n, y.as<float>() + i * ranks * n + r * n);
  return y;
}

Tensor CpuOps::gather_rows(const Tensor& x, const std::vector<int64_t>& rows) {
  const int64_t width = x.dim(-1), n = x.numel() / width;
  Tensor y = new_f32({int64_t(rows.size()), width});
  for (size_t i = 0; i < rows.size(); ++i) {
    DI_CHECK(rows[i] >= 0 && rows[i] < n, "gather_rows: row {} outside [0, {})", rows[i], n);
    std::memcpy(y.as<float>() + i * width, x.as<float>() + rows[i] * width, size_t(width) * sizeof(float));
  }
  return y;
}

Tensor CpuOps::swiglu(const Tensor& gate, const Tensor& up) {
  check_same_shape(gate, up, "swiglu");
  Tensor y = new_f32(gate.shape());
  ref::swiglu(gate.as<float>(), up.as<float>(), gate.numel(), y.as<float>(), precision_);
  return y;
}

Tensor CpuOps::gdn_conv1d_silu(const Tensor& mixed_qkv, const TensorView& conv_weight, const BatchPlan& plan,
                               int64_t gdn_layer) {
  const int64_t C = mixed_qkv.dim(-1), K = config_.linear_conv_kernel_dim;
  DI_CHECK(C == config_.gdn_conv_dim(), "gdn_conv1d_silu: {} channels, the config has {}", C, config_.gdn_conv_dim());
  Tensor y = new_f32(mixed_qkv.shape());
  for (const SequenceSpan& s : plan.seqs) {
    float* state = live_slot(s.slot).conv.at(gdn_layer).data();
    ref::causal_conv1d_silu(mixed_qkv.as<float>() + s.first_token * C, s.n_tokens, C, K, conv_weight, state,
                            y.as<float>() + s.first_token * C, precision_);
  }
  return y;
}

Tensor CpuOps::gdn_delta_rule(const Tensor& qkv, const Tensor& a, const Tensor& b, const TensorView& A_log,
                              const TensorView& dt_bias, const BatchPlan& plan, int64_t gdn_layer) {
  const ModelConfig& c = config_;
  check_same_shape(a, b, "gdn_delta_rule gates");
  // g = -exp(A_log) * softplus(a + dt_bias) (float32), beta = sigmoid(b)    each [N, Hv]
  Tensor g = new_f32(a.shape()), beta = new_f32(a.shape());
  ref::gdn_gates(a.as<float>(), b.as<float>(), a.numel() / a.dim(-1), a.dim(-1), A_log, dt_bias, g.as<float>(),
                 beta.as<float>(), precision_);
  const int64_t Hk = c.linear_num_key_heads, Hv = c.linear_num_value_heads;
  const int64_t dk = c.linear_key_head_dim, dv = c.linear_value_head_dim;
  const int64_t C = c.gdn_conv_dim(), N = plan.n_tokens();
  DI_CHECK(qkv.dim(-1) == C && qkv.numel() == N * C, "gdn_delta_rule: qkv of shape {} for {} tokens of {} channels",
           shape_str(qkv.shape()), N, C);
  // Split [Q | K | V] and normalise: q = l2norm(q) * dk^-0.5, k = l2norm(k) (float32).
  std::vector<float> q(size_t(N * Hk * dk)), k(size_t(N * Hk * dk)), v(size_t(N * Hv * dv));
  const float* src = qkv.as<float>();
  for (int64_t t = 0; t < N; ++t) {
    const float* row = src + t * C;
    ref::l2_normalize(row, Hk, dk, 1.0f / std::sqrt(float(dk)), q.data() + t * Hk * dk);
    ref::l2_normalize(row + Hk * dk, Hk, dk, 1.0f, k.data() + t * Hk * dk);
    std::memcpy(v.data() + t * Hv * dv, row + 2 * Hk * dk, size_t(Hv * dv) * sizeof(float));
  }
  Tensor out = new_f32({N, Hv * dv});
  for (const SequenceSpan& s : plan.seqs) {
    float* state = live_slot(s.slot).recurrent.at(gdn_layer).data();
    const gdn_ref::DeltaRuleShape shape{s.n_tokens, Hk, Hv, dk, dv};
    const int64_t t0 = s.first_token;
    float* o = out.as<float>() + t0 * Hv * dv;
    // transformers runs the recurrent form for one token on a populated cache, the chunked form
    // otherwise; the two agree to float32 rounding.
    if (s.n_tokens == 1 && s.n_past > 0)
      gdn_ref::delta_rule_recurrent<float>(shape, q.data() + t0 * Hk * dk, k.data() + t0 * Hk * dk,
                                           v.data() + t0 * Hv * dv, g.as<float>() + t0 * Hv,
                                           beta.as<float>() + t0 * Hv, state, o);
    else
      gdn_ref::delta_rule_chunked<float>(shape, q.data() + t0 * Hk * dk, k.data() + t0 * Hk * dk,
                                         v.data() + t0 * Hv * dv, g.as<float>() + t0 * Hv,
                                         beta.as<float>() + t0 * Hv, state, o);
    for (int64_t i = 0; i < s.n_tokens * Hv * dv; ++i) o[i] = rnd(o[i], precision_);
  }
  return out;
}

Tensor CpuOps::gated_rms_norm(const Tensor& o, const Tensor& z, const TensorView& weight, double eps) {
  check_same_shape(o, z, "gated_rms_norm");
  const int64_t dim = weight.numel();
  Tensor y = new_f32(o.shape());
  ref::gated_rms_norm(o.as<float>(), z.as<float>(), o.numel() / dim, dim, weight, eps, y.as<float>(), precision_);
  return y;
}

void CpuOps::split_q_gate(const Tensor& q_and_gate, int64_t head_dim, Tensor& q, Tensor& gate) {
  const int64_t width = q_and_gate.dim(-1), N = q_and_gate.numel() / width, heads = width / (2 * head_dim);
  DI_CHECK(heads * 2 * head_dim == width, "split_q_gate: width {} is not heads x 2 x {}", width, head_dim);
  q = new_f32({N, heads * head_dim});
  gate = new_f32({N, heads * head_dim});
  for (int64_t t = 0; t < N; ++t)
    for (int64_t h = 0; h < heads; ++h) {
      const float* src = q_and_gate.as<float>() + t * width + h * 2 * head_dim;  // [q_h | gate_h]
      std::memcpy(q.as<float>() + (t * heads + h) * head_dim, src, size_t(head_dim) * sizeof(float));
      std::memcpy(gate.as<float>() + (t * heads + h) * head_dim, src + head_dim, size_t(head_dim) * sizeof(float));
    }
}

void CpuOps::rope(Tensor& q, Tensor& k, const BatchPlan& plan, int64_t head_dim, int64_t rotary_dim, double theta) {
  const int64_t N = plan.n_tokens();
  ref::rope(q.as<float>(), N, q.numel() / (N * head_dim), head_dim, rotary_dim, plan.positions.data(), theta, precision_);
  ref::rope(k.as<float>(), N, k.numel() / (N * head_dim), head_dim, rotary_dim, plan.positions.data(), theta, precision_);
}

Tensor CpuOps::attention(const Tensor& q, const Tensor& k, const Tensor& v, const BatchPlan& plan,
                         int64_t attn_layer) {
  const ModelConfig& c = config_;
  const int64_t D = c.head_dim, Hq = c.num_attention_heads, Hkv = c.num_kv_heads, N = plan.n_tokens();
  const int64_t kv_width = Hkv * D;
  Tensor out = new_f32({N, Hq * D});
  for (const SequenceSpan& s : plan.seqs) {
    SlotState& st = live_slot(s.slot);
    std::vector<float>& keys = st.keys.at(attn_layer);
    std::vector<float>& values = st.values.at(attn_layer);
    DI_CHECK(int64_t(keys.size()) == s.n_past * kv_width,
             "attention: slot {} holds {} cached tokens but the plan says {}", s.slot,
             int64_t(keys.size()) / kv_width, s.n_past);
    keys.insert(keys.end(), k.as<float>() + s.first_token * kv_width, k.as<float>() + (s.first_token + s.n_tokens) * kv_width);
    values.insert(values.end(), v.as<float>() + s.first_token * kv_width,
                  v.as<float>() + (s.first_token + s.n_tokens) * kv_width);
    ref::causal_attention(q.as<float>() + s.first_token * Hq * D, keys.data(), values.data(), s.n_tokens,
                          s.n_past + s.n_tokens, Hq, Hkv, D, 1.0 / std::sqrt(double(D)),
                          out.as<float>() + s.first_token * Hq * D, precision_);
  }
  return out;
}

Tensor CpuOps::sigmoid_gate(const Tensor& x, const Tensor& gate) {
  check_same_shape(x, gate, "sigmoid_gate");
  Tensor y = new_f32(x.shape());
  for (int64_t i = 0; i < x.numel(); ++i)
    y.as<float>()[i] = rnd(x.as<float>()[i] * rnd(sigmoid(gate.as<float>()[i]), precision_), precision_);
  return y;
}

std::vector<float> CpuOps::to_host(const Tensor& x) {
  check_f32_host(x, "to_host input");
  return std::vector<float>(x.as<float>(), x.as<float>() + x.numel());
}

}  // namespace di
