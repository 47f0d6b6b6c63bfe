#pragma once
// The CPU reference implementation of Ops: plain loops over float32 activations, rounding to bf16
// exactly where transformers' bf16 run does when Precision::bf16 is chosen.
//
// With a HostCollectives group it is one rank of a tensor-parallel run (model/tensor_parallel.h):
// the config and weights it is given are the rank's, and the collectives join the ranks.
#include <vector>

#include "kernels/host_collectives.h"
#include "kernels/numerics.h"
#include "kernels/ops.h"

namespace di {

class CpuOps final : public Ops {
 public:
  CpuOps(const ModelConfig& config, Precision precision, HostCollectives* group = nullptr, int rank = 0);

  Precision precision() const { return precision_; }

  int alloc_slot() override;
  void free_slot(int slot) override;

  Tensor embed(const TensorView& table, const BatchPlan& plan) override;
  Tensor rms_norm(const Tensor& x, const TensorView& weight, double eps) override;
  Tensor add(const Tensor& a, const Tensor& b) override;
  Tensor linear(const Tensor& x, const TensorView& weight) override;
  Tensor gather_rows(const Tensor& x, const std::vector<int64_t>& rows) override;
  Tensor swiglu(const Tensor& gate, const Tensor& up) override;

  Tensor gdn_conv1d_silu(const Tensor& mixed_qkv, const TensorView& conv_weight, const BatchPlan& plan,
                         int64_t gdn_layer) override;
  Tensor gdn_delta_rule(const Tensor& qkv, const Tensor& a, const Tensor& b, const TensorView& A_log,
                        const TensorView& dt_bias, const BatchPlan& plan, int64_t gdn_layer) override;
  Tensor gated_rms_norm(const Tensor& o, const Tensor& z, const TensorView& weight, double eps) override;

  void split_q_gate(const Tensor& q_and_gate, int64_t head_dim, Tensor& q, Tensor& gate) override;
  void rope(Tensor& q, Tensor& k, const BatchPlan& plan, int64_t head_dim, int64_t rotary_dim,
            double theta) override;
  Tensor attention(const Tensor& q, const Tensor& k, const Tensor& v, const BatchPlan& plan,
                   int64_t attn_layer) override;
  Tensor sigmoid_gate(const Tensor& x, const Tensor& gate) override;

  Tensor linear_all_reduce(const Tensor& x, const TensorView& weight) override;
  Tensor all_gather_columns(const Tensor& x) override;

  std::vector<float> to_host(const Tensor& x) override;

  // A slot's state, for tests that compare states: conv [conv_dim, K] and recurrent [Hv, dk, dv]
  // of a GDN layer; the KV cache [n_past, Hkv*D] of an attention layer.
  struct SlotState {
    bool live = false;
    std::vector<std::vector<float>> conv;       // per GDN layer
    std::vector<std::vector<float>> recurrent;  // per GDN layer
    std::vector<std::vector<float>> keys;       // per attention layer, grows with the sequence
    std::vector<std::vector<float>> values;
  };
  const SlotState& slot_state(int slot) const;

 private:
  SlotState& live_slot(int slot);
  Tensor new_f32(Shape shape) const { return Tensor::empty(std::move(shape), DType::f32); }

  ModelConfig config_;
  Precision precision_;
  HostCollectives* group_ = nullptr;  // null: the whole model on this rank
  int rank_ = 0;
  std::vector<SlotState> slots_;
};

}  // namespace di
