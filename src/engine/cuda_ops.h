#pragma once
// The CUDA implementation of Ops: bf16 activations on the GPU, rounded where transformers' bf16 run
// rounds (as CpuOps in Precision::bf16), so that the two can be compared op by op.
//
// It owns the model's weights on the device (uploaded once; small parameters as float32), the
// state of every slot (the conv state and float32 recurrent state of each GDN layer, and a paged KV
// cache for the attention layers), and the per-step batch metadata, built once in begin_step and
// read by every layer. It lives in engine/ rather than kernels/ because it composes the kernels
// layer and the gdn layer (the GDN prefill dispatch).
#include <cuda_runtime.h>

#include <map>
#include <set>
#include <optional>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include <deltainfer/gdn.h>

#include "core/cuda.h"
#include "engine/device_group.h"
#include "gdn/decode_step.h"
#include "kernels/gemm/cuda_gemm.h"
#include "kernels/gemm/small_batch_linear.h"
#include "kernels/ops.h"
#include "kernels/sampling/sampling.h"
#include "model/weights.h"

namespace di {

struct CudaOpsOptions {
  int max_slots = 8;                 // sequences that can be live at once
  int64_t kv_cache_tokens = 0;       // KV cache capacity in tokens, all slots together (0: 32768 per slot)
  int kv_block_size = 64;            // tokens per KV block
  std::string gdn_prefill_backend;   // empty: production dispatch; otherwise a backend name (forced)
  bool decode_graphs = true;         // replay decode steps as CUDA graphs, one per batch size
  di_gdn_state_layout state_layout = DI_GDN_STATE_KV;
  // One rank of a tensor-parallel run (model/tensor_parallel.h): the config and weights given are
  // the rank's, the current device is its GPU, and the group joins the ranks. Null: the whole model.
  const DeviceGroup* group = nullptr;
  int rank = 0;
};

class CudaOps final : public Ops {
 public:
  CudaOps(const ModelConfig& config, const ModelWeights& weights, const CudaOpsOptions& options = {});
  ~CudaOps() override;
  CudaOps(const CudaOps&) = delete;
  CudaOps& operator=(const CudaOps&) = delete;

  int alloc_slot() override;
  void free_slot(int slot) override;
  void begin_step(const BatchPlan& plan) override;
  // Decode steps (every sequence one token on a populated state, logits of every row in order) run
  // eagerly the first time a batch size is seen, are captured as a CUDA graph the second time, and
  // replayed from then on (one graph per batch size and block-table width, graph_block_width);
  // other steps run eagerly. The graph's logits live in its batch size's arena.
  Tensor run_forward(const BatchPlan& plan, const std::vector<int64_t>& rows, bool graphable,
                     const std::function<Tensor()>& forward) override;
  size_t captured_graphs() const;
  // Decode steps seen (as run_forward above defines them, graphs on or off), their distinct batch
  // sizes, and how many ran from a graph (a capture's first launch included): with graphs on, every
  // decode step but each batch size's first, which a caller checks to know graphs were used, not
  // merely allowed.
  struct DecodeStepCounts {
    size_t steps = 0, batch_sizes = 0, graphed = 0;
  };
  DecodeStepCounts decode_step_counts() const {
    return {decode_steps_, decode_batch_sizes_.size(), graphed_steps_};
  }

  Tensor embed(const TensorView& table, const BatchPlan& plan) override;
  Tensor rms_norm(const Tensor& x, const TensorView& weight, double eps) override;
  Tensor add(const Tensor& a, const Tensor& b) override;
  Tensor linear(const Tensor& x, const TensorView& weight) override;
  Tensor gather_rows(const Tensor& x, const std::vector<int64_t>& rows) override;
  Tensor swiglu(const Tensor& gate, const Tensor& up) override;
  // Decode-sized steps run the projections of one input in one small-batch launch
  // (kernels/gemm/small_batch_linear.h), with the input's norm or gate applied on the way in and
  // SwiGLU, the residual add or the partial sums of linear_all_reduce on the way out: any weight up
  // to 8 rows but the lm_head, fused groups up to 16. Other steps compute the input op on its own and
  // run a cuBLASLt GEMM per weight.
  std::vector<Tensor> linear_projections(const ProjectionInput& in,
                                         const std::vector<const TensorView*>& weights) override;
  Tensor swiglu_projection(const ProjectionInput& in, const TensorView& gate, const TensorView& up) override;
  Tensor residual_projection(const Tensor& residual, const ProjectionInput& in, const TensorView& weight) override;

  Tensor gdn_conv1d_silu(const Tensor& mixed_qkv, const TensorView& conv_weight, const BatchPlan& plan,
                         int64_t gdn_layer) override;
  Tensor gdn_delta_rule(const Tensor& qkv, const Tensor& a, const Tensor& b, const TensorView& A_log,
                        const TensorView& dt_bias, const BatchPlan& plan, int64_t gdn_layer) override;
  Tensor gated_rms_norm(const Tensor& o, const Tensor& z, const TensorView& weight, double eps) override;
  // In a decode step the output norm runs inside the recurrent step (gdn/decode_step.h): no o.
  NormedGdnOutput gdn_delta_rule_normed(const Tensor& qkv, const Tensor& a, const Tensor& b, const TensorView& A_log,
                                        const TensorView& dt_bias, const Tensor& z, const TensorView& norm_weight,
                                        double eps, const BatchPlan& plan, int64_t gdn_layer) override;

  void split_q_gate(const Tensor& q_and_gate, int64_t head_dim, Tensor& q, Tensor& gate) override;
  void attention_qk_norm(const Tensor& q_and_gate, const Tensor& k_proj, const TensorView& q_norm,
                         const TensorView& k_norm, double eps, int64_t head_dim, Tensor& q, Tensor& gate,
                         Tensor& k) override;
  void rope(Tensor& q, Tensor& k, const BatchPlan& plan, int64_t head_dim, int64_t rotary_dim,
            double theta) override;
  Tensor attention(const Tensor& q, const Tensor& k, const Tensor& v, const BatchPlan& plan,
                   int64_t attn_layer) override;
  Tensor sigmoid_gate(const Tensor& x, const Tensor& gate) override;

  Tensor linear_all_reduce(const Tensor& x, const TensorView& weight) override;
  Tensor all_gather_columns(const Tensor& x) override;

  std::vector<float> to_host(const Tensor& x) override;

  // One token per row of logits [rows, vocab] drawn on the GPU (kernels/sampling): only the ids
  // cross to the host. Rows come from sampling::make_sampling_row, which validates them.
  std::vector<int32_t> sample(const Tensor& logits, const std::vector<sampling::SamplingRow>& rows);

  // A host float32 tensor as a device bf16 tensor (tests and tools feed ops this way).
  Tensor upload_bf16(const std::vector<float>& values, Shape shape);
  // A slot's state as float32: conv [C, K] and recurrent [Hv, dk, dv] of one GDN layer.
  std::vector<float> conv_state(int slot, int64_t gdn_layer);
  std::vector<float> recurrent_state(int slot, int64_t gdn_layer);

  cudaStream_t stream() const;
  const di_gdn_prefill_backend& gdn_prefill_backend() const { return *gdn_backend_; }
  // The GDN prefill backend's scratch, grown to the largest prefill step so far.
  size_t gdn_scratch_bytes() const { return gdn_scratch_.size(); }
  const cuda::DeviceInfo& device() const { return device_; }
  // Device bytes held for weights, states and the KV cache (activations come and go).
  size_t resident_bytes() const { return resident_bytes_; }

 private:
  struct Stream;
  struct Slot {
    bool live = false;
    int64_t n_cached = 0;          // tokens in its state and KV cache
    std::vector<int32_t> blocks;   // KV blocks in order
  };
  struct Step;         // the device metadata of the current step
  struct DecodeGraph;  // a captured decode step of one batch size

  Tensor new_tensor(Shape shape, DType dtype);
  // The input times each weight, as bf16 (rounded once, plus `residual` when given) or float32
  // (partial sums) outputs.
  std::vector<Tensor> project(const ProjectionInput& in, const std::vector<const TensorView*>& weights, DType out,
                              const Tensor* residual = nullptr);
  // The input as the small-batch kernel can take it: its op, or computed on its own where the kernel
  // cannot apply it (more rows than it takes, rows too wide to stage, an RMS norm of rows whose sums
  // of squares no residual projection left).
  ProjectionInput fusable(const ProjectionInput& in);
  // The small-batch kernel's parameters for a fusable input (its op included).
  kernels::SmallBatchLinearParams small_batch_params(const ProjectionInput& in, const char* what) const;
  // Partial sums over this rank's input features, added over the ranks and rounded once.
  Tensor project_all_reduce(const ProjectionInput& in, const TensorView& weight);
  // out = op(a, b) element by element on two bf16 device tensors of one shape.
  using BinaryLaunch = cudaError_t (*)(const void*, const void*, int64_t, void*, cudaStream_t);
  Tensor elementwise(const Tensor& a, const Tensor& b, const char* op, BinaryLaunch launch);
  const void* device_weight(const TensorView& w, const char* what) const;
  const float* device_param_f32(const TensorView& w, const char* what) const;
  void upload_weights(const ModelWeights& weights);
  void check_step(const BatchPlan& plan, const char* op) const;
  void check_gdn_inputs(const Tensor& qkv, const Tensor& a, const Tensor& b, const BatchPlan& plan,
                        int64_t gdn_layer, const char* op) const;
  // The decode step's parameters for this step's GDN layer, writing `out`.
  gdn::GdnDecodeParams gdn_decode_params(const Tensor& qkv, const Tensor& a, const Tensor& b,
                                         const TensorView& A_log, const TensorView& dt_bias, int64_t gdn_layer,
                                         const Tensor& out);
  bool step_is_decode() const;
  std::unique_ptr<Step> plan_step(const BatchPlan& plan, int32_t block_width, int decode_splits);
  void upload_step_metadata(Step& step, int32_t* pinned, int32_t* device);
  int32_t graph_block_width(const BatchPlan& plan) const;
  DecodeGraph& capture_decode_graph(int batch, int32_t block_width, const std::function<Tensor()>& forward);
  float* recurrent_pool(int64_t gdn_layer) const;
  void* conv_pool(int64_t gdn_layer) const;

  ModelConfig config_;
  CudaOpsOptions options_;
  cuda::DeviceInfo device_;
  std::shared_ptr<Stream> stream_;
  kernels::CublasLtGemm gemm_;
  const di_gdn_prefill_backend* gdn_backend_ = nullptr;

  // Weights by host address (a TensorView of the mapped checkpoint) -> device copy.
  std::unordered_map<const void*, cuda::DeviceBuffer<uint16_t>> weights_bf16_;
  std::unordered_map<const void*, cuda::DeviceBuffer<float>> params_f32_;

  int64_t gdn_layers_ = 0, attn_layers_ = 0;
  cuda::DeviceBuffer<uint16_t> conv_states_;      // bf16 [gdn_layers, slots, C, K]
  cuda::DeviceBuffer<float> recurrent_states_;    // f32 [gdn_layers, slots, Hv, dk, dv] (or [.., dv, dk])
  cuda::DeviceBuffer<uint16_t> k_cache_, v_cache_;  // bf16 [attn_layers, blocks, block_size, Hkv, D]
  int64_t kv_blocks_ = 0;
  std::vector<int32_t> free_blocks_;
  std::vector<Slot> slots_;
  std::unique_ptr<Step> step_;
  cuda::DeviceBuffer<uint8_t> gdn_scratch_;
  size_t resident_bytes_ = 0;
  // Decode graphs by (batch size, block-table width); a batch size's first step runs eagerly and
  // measures its activation bytes; the graphs of a batch size share one activation arena.
  std::map<std::pair<int, int32_t>, std::unique_ptr<DecodeGraph>> graphs_;
  std::unordered_map<int, size_t> eager_step_bytes_;
  std::unordered_map<int, std::shared_ptr<cuda::DeviceBuffer<uint8_t>>> graph_arenas_;
  DecodeGraph* graph_ = nullptr;  // set while capturing: new_tensor takes from its arena
  size_t decode_steps_ = 0, graphed_steps_ = 0;
  std::set<int> decode_batch_sizes_;
  // The residual stream as the last small-batch residual projection of the step wrote it, with its
  // rows' partial sums of squares (for the RMS norm that reads it next).
  struct ResidualSumSq {
    Tensor x, sum_sq;
  };
  std::optional<ResidualSumSq> residual_sum_sq_;
  size_t step_bytes_ = 0;         // bytes new_tensor handed out since the step began
};

}  // namespace di
