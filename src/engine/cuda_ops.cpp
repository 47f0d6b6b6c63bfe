#include "engine/cuda_ops.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include <spdlog/spdlog.h>

#include "core/bf16.h"
#include "core/error.h"
#include "gdn/decode_step.h"
#include "gdn/dispatch.h"
#include "gdn/prep.h"
#include "kernels/attention/attention.h"
#include "kernels/elementwise/elementwise.h"
#include "kernels/gemm/small_batch_linear.h"
#include "kernels/norm/norm.h"
#include "kernels/numerics.h"
#include "kernels/rope/rope.h"

namespace di {

namespace {
// Every block of a projection applies the op ahead to all the rows it reads. For one or two rows that
// costs less than a kernel of its own; from 8 rows it costs the step more than it saves, the GDN
// output norm (an exp per element) most (docs/benchmarks/decode.md).
constexpr int64_t kFusedInputMaxRows = 2;
}  // namespace

// The stream every op runs on, shared with the deleters of the activations allocated on it (their
// memory is returned to the stream-ordered pool when the last Tensor copy goes).
struct CudaOps::Stream {
  cudaStream_t stream = nullptr;
  // While a graph is being captured on the stream, a pool allocation whose last Tensor goes cannot
  // be freed (the free would enter the graph): it waits here until the capture ends.
  bool capturing = false;
  std::vector<void*> deferred_frees;
  void free(void* p) {
    if (capturing) deferred_frees.push_back(p);
    else cudaFreeAsync(p, stream);
  }
  void end_capture() {
    capturing = false;
    for (void* p : deferred_frees) cudaFreeAsync(p, stream);
    deferred_frees.clear();
  }
  Stream() { DI_CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking)); }
  ~Stream() {
    cudaStreamSynchronize(stream);
    cudaStreamDestroy(stream);
  }
};

// The batch metadata of one step, uploaded once in begin_step (one int32 array with sections).
struct CudaOps::Step {
  int64_t n_tokens = 0;
  int32_t num_seqs = 0;
  int64_t longest = 0;  // the most tokens one sequence brings: the GDN prefill's planning hint
  bool decode = false;              // every sequence brings one token onto a populated state
  std::vector<SequenceSpan> seqs;   // as planned, to check that every op sees the same plan
  Tensor metadata;                  // int32 device array holding the sections below
  const int32_t* token_ids = nullptr;   // [N]
  const int32_t* positions = nullptr;   // [N] absolute positions
  const int32_t* token_seq = nullptr;   // [N] sequence of each row
  const int32_t* cu_seqlens = nullptr;  // [S + 1]
  const int32_t* seq_slot = nullptr;    // [S]
  const int32_t* kv_lens = nullptr;     // [S] n_past + n_tokens
  const int32_t* block_table = nullptr; // [S, max_blocks]
  int32_t max_blocks = 0;
  attention::PrefillPlan attention_plan;  // tiles of the prefill attention
  int decode_splits = 1;                  // key splits of the decode attention
  size_t decode_workspace_bytes = 0;
  std::vector<int32_t> host_metadata;     // the int32 array before upload
  std::vector<size_t> sections;           // offset of each section in it
  const int32_t* tile_seq = nullptr;
  const int32_t* tile_q_start = nullptr;
  Tensor attention_workspace;           // decode split-KV partials
};

// A decode step captured as a CUDA graph: its activations live in a fixed arena (the graph bakes
// their addresses), its metadata enters through a pinned host buffer that the graph's first node
// copies to the device, so a replay needs only that buffer refilled.
struct CudaOps::DecodeGraph {
  int batch = 0;
  int32_t block_width = 0;  // block-table width (the most blocks a sequence of its steps holds)
  int decode_splits = 1;
  std::shared_ptr<cuda::DeviceBuffer<uint8_t>> arena;  // shared by the graphs of one batch size
  size_t arena_used = 0;
  int32_t* pinned = nullptr;             // host, metadata_capacity int32, then the logit rows
  int32_t* pinned_rows = nullptr;        // host [batch]: the rows gather_rows copies (0 .. batch-1)
  cuda::DeviceBuffer<int32_t> metadata;  // device, metadata_capacity int32
  cudaGraphExec_t exec = nullptr;
  Tensor logits;                          // in the arena
  ~DecodeGraph() {
    if (exec) cudaGraphExecDestroy(exec);
    if (pinned) cudaFreeHost(pinned);
  }
};

namespace {

// Key splits of the decode attention at most (its workspace grows with them).
constexpr int kMaxDecodeSplits = 32;

void check_cuda_tensor(const Tensor& t, DType dtype, const char* what) {
  DI_CHECK(t.defined() && t.device() == Device::cuda && t.dtype() == dtype, "CudaOps: {} must be a {} device tensor",
           what, dtype_name(dtype));
}
void check_same_shape(const Tensor& a, const Tensor& b, const char* op) {
  DI_CHECK(a.shape() == b.shape(), "{}: shapes {} and {} differ", op, shape_str(a.shape()), shape_str(b.shape()));
}
void check_launch(cudaError_t status, const char* kernel) {
  if (status != cudaSuccess)
    fail("CUDA kernel {} failed to launch: {} ({})", kernel, cudaGetErrorString(status), cudaGetErrorName(status));
}

// The values a bf16 run gives a parameter: bf16 weights as they are, f32 ones rounded to bf16
// (transformers loads every parameter in the run's dtype).
std::vector<float> param_values(const TensorView& w) {
  std::vector<float> v(size_t(w.numel()));
  weight_to_f32(w, 0, w.numel(), v.data(), Precision::bf16);
  return v;
}

di_gdn_geometry gdn_geometry(const ModelConfig& c) {
  return {int32_t(c.linear_num_key_heads), int32_t(c.linear_num_value_heads), int32_t(c.linear_key_head_dim),
          int32_t(c.linear_value_head_dim)};
}

}  // namespace

CudaOps::CudaOps(const ModelConfig& config, const ModelWeights& weights, const CudaOpsOptions& options)
    : config_(config), options_(options) {
  DI_CHECK(cuda::device_count() > 0, "--device cuda: no CUDA device is visible");
  device_ = cuda::current_device();
  stream_ = std::make_shared<Stream>();
  // Activations come from the stream-ordered pool; keep freed memory in the pool rather than
  // returning it to the driver after every synchronisation.
  cudaMemPool_t pool = nullptr;
  DI_CUDA_CHECK(cudaDeviceGetDefaultMemPool(&pool, device_.ordinal));
  uint64_t keep_everything = std::numeric_limits<uint64_t>::max();
  DI_CUDA_CHECK(cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &keep_everything));

  DI_CHECK(options_.max_slots > 0, "CudaOps: max_slots must be positive, found {}", options_.max_slots);
  DI_CHECK(!options_.group || device_.ordinal == options_.rank,
           "CudaOps: tensor-parallel rank {} runs on GPU {}, the current device is {}", options_.rank, options_.rank,
           device_.ordinal);
  DI_CHECK(options_.kv_block_size == 16 || options_.kv_block_size == 32 || options_.kv_block_size == 64,
           "CudaOps: KV block size must be 16, 32 or 64, found {}", options_.kv_block_size);
  upload_weights(weights);

  const ModelConfig& c = config_;
  gdn_layers_ = c.num_layers_of(LayerKind::linear_attention);
  attn_layers_ = c.num_layers_of(LayerKind::full_attention);
  const int64_t slots = options_.max_slots;
  conv_states_ = cuda::DeviceBuffer<uint16_t>(size_t(gdn_layers_ * slots * c.gdn_conv_dim() * c.linear_conv_kernel_dim));
  recurrent_states_ = cuda::DeviceBuffer<float>(size_t(gdn_layers_ * slots * c.linear_num_value_heads *
                                                       c.linear_key_head_dim * c.linear_value_head_dim));
  const int64_t kv_tokens = options_.kv_cache_tokens > 0 ? options_.kv_cache_tokens : slots * 32768;
  kv_blocks_ = (kv_tokens + options_.kv_block_size - 1) / options_.kv_block_size;
  const size_t kv_elems = size_t(attn_layers_ * kv_blocks_ * options_.kv_block_size * c.num_kv_heads * c.head_dim);
  k_cache_ = cuda::DeviceBuffer<uint16_t>(kv_elems);
  v_cache_ = cuda::DeviceBuffer<uint16_t>(kv_elems);
  free_blocks_.resize(size_t(kv_blocks_));
  for (int64_t i = 0; i < kv_blocks_; ++i) free_blocks_[size_t(i)] = int32_t(kv_blocks_ - 1 - i);  // pop_back gives 0 first
  slots_.resize(size_t(slots));
  resident_bytes_ += conv_states_.bytes() + recurrent_states_.bytes() + k_cache_.bytes() + v_cache_.bytes();

  di_gdn_device dev{device_.sm_major, device_.sm_minor, device_.num_sms, device_.shared_memory_per_block_optin};
  gdn_backend_ = &gdn::choose_prefill_backend(gdn_geometry(c), dev, options_.state_layout, options_.gdn_prefill_backend);
  spdlog::info("CUDA ops on {}: {:.2f} GiB resident ({} state slots, KV cache {} blocks of {} tokens)",
               cuda::describe(device_), double(resident_bytes_) / (1 << 30), slots, kv_blocks_, options_.kv_block_size);
}

CudaOps::~CudaOps() {
  cudaStreamSynchronize(stream_->stream);
  graphs_.clear();
}

size_t CudaOps::captured_graphs() const {
  size_t n = 0;
  for (const auto& [key, g] : graphs_) n += g != nullptr;
  return n;
}

Tensor CudaOps::run_forward(const BatchPlan& plan, const std::vector<int64_t>& rows, bool graphable,
                            const std::function<Tensor()>& forward) {
  const int batch = int(plan.seqs.size());
  bool decode = graphable && int64_t(rows.size()) == batch;
  for (int i = 0; decode && i < batch; ++i) {
    const SequenceSpan& s = plan.seqs[size_t(i)];
    decode = s.n_tokens == 1 && s.n_past > 0 && rows[size_t(i)] == i;
  }
  if (decode) ++decode_steps_, decode_batch_sizes_.insert(batch);
  if (!decode || !options_.decode_graphs) return forward();
  const auto seen = eager_step_bytes_.find(batch);
  if (seen == eager_step_bytes_.end()) {
    // The first decode step of this size runs eagerly: it creates the GEMM plans (which cannot be
    // made during a capture) and measures the activations the arena must hold.
    step_bytes_ = 0;
    Tensor logits = forward();
    eager_step_bytes_[batch] = step_bytes_;
    return logits;
  }
  const int32_t width = graph_block_width(plan);
  auto it = graphs_.find({batch, width});
  if (it == graphs_.end()) {
    DecodeGraph& g = capture_decode_graph(batch, width, forward);
    DI_CUDA_CHECK(cudaGraphLaunch(g.exec, stream()));
    ++graphed_steps_;
    return g.logits;
  }
  DecodeGraph& g = *it->second;
  std::unique_ptr<Step> step = plan_step(plan, g.block_width, g.decode_splits);
  DI_CHECK(step->host_metadata.size() <= g.metadata.size(), "decode graph of batch {}: metadata of {} entries for a "
           "buffer of {}", batch, step->host_metadata.size(), g.metadata.size());
  DI_CUDA_CHECK(cudaStreamSynchronize(stream()));  // the previous replay has read the pinned buffer
  std::memcpy(g.pinned, step->host_metadata.data(), step->host_metadata.size() * 4);
  step_ = std::move(step);
  DI_CUDA_CHECK(cudaGraphLaunch(g.exec, stream()));
  ++graphed_steps_;
  return g.logits;
}

// Graphs are keyed by batch size and block-table width: a power of two of blocks (at least 16), the
// next one up from the most blocks a sequence of the step holds, at most the whole KV cache. A
// graph's table, metadata upload and attention split plan are then those of contexts up to its
// width, not of the whole cache (which can be millions of tokens: a table of that width per
// sequence, copied every step, costs more than the step).
int32_t CudaOps::graph_block_width(const BatchPlan& plan) const {
  int64_t need = 1;
  for (const SequenceSpan& s : plan.seqs)
    need = std::max(need, (s.n_past + s.n_tokens + options_.kv_block_size - 1) / options_.kv_block_size);
  int64_t width = 16;
  while (width < need) width *= 2;
  return int32_t(std::min<int64_t>(width, kv_blocks_));
}

CudaOps::DecodeGraph& CudaOps::capture_decode_graph(int batch, int32_t block_width,
                                                    const std::function<Tensor()>& forward) {
  auto g = std::make_unique<DecodeGraph>();
  g->batch = batch;
  // The graph serves every later step of its batch whose sequences fit its block table; its split
  // count is planned for the longest such context.
  g->block_width = block_width;
  const int Hq = int(config_.num_attention_heads), Hkv = int(config_.num_kv_heads), D = int(config_.head_dim);
  g->decode_splits = attn_layers_ > 0 ? attention::plan_decode_splits(batch, Hq, Hkv,
                                                                      int(block_width * options_.kv_block_size),
                                                                      device_.num_sms, kMaxDecodeSplits)
                                      : 1;
  // One arena per batch size, shared by its graphs (they replay one at a time on this stream, and a
  // step's logits are read before the next step): the eager step's activations plus the largest
  // attention workspace any split count needs.
  std::shared_ptr<cuda::DeviceBuffer<uint8_t>>& arena = graph_arenas_[batch];
  if (!arena) {
    const size_t workspace = attn_layers_ > 0 ? attention::decode_workspace_bytes(batch, Hq, D, kMaxDecodeSplits) : 0;
    arena = std::make_shared<cuda::DeviceBuffer<uint8_t>>(eager_step_bytes_.at(batch) + workspace + (size_t(4) << 20));
  }
  g->arena = arena;
  // ids, positions, token_seq, cu_seqlens, slots, kv_lens (6 B + 1), the block table, two tiles per row.
  const size_t capacity = size_t(8 * batch + 1) + size_t(batch) * size_t(g->block_width);
  DI_CUDA_CHECK(cudaMallocHost(&g->pinned, (capacity + size_t(batch)) * 4));
  g->pinned_rows = g->pinned + capacity;
  g->metadata = cuda::DeviceBuffer<int32_t>(capacity);

  step_.reset();  // the previous step's metadata goes back to the pool now, not inside the capture
  DI_CUDA_CHECK(cudaStreamSynchronize(stream()));
  cudaGraph_t graph = nullptr;
  graph_ = g.get();
  stream_->capturing = true;
  DI_CUDA_CHECK(cudaStreamBeginCapture(stream(), cudaStreamCaptureModeThreadLocal));
  try {
    g->logits = forward();  // begin_step fills g->pinned and captures its copy
  } catch (...) {
    graph_ = nullptr;
    cudaStreamEndCapture(stream(), &graph);
    stream_->end_capture();
    if (graph) cudaGraphDestroy(graph);
    throw;
  }
  graph_ = nullptr;
  const cudaError_t ended = cudaStreamEndCapture(stream(), &graph);
  stream_->end_capture();
  DI_CUDA_CHECK(ended);
  const cudaError_t status = cudaGraphInstantiate(&g->exec, graph, 0);
  cudaGraphDestroy(graph);
  DI_CUDA_CHECK(status);
  spdlog::debug("captured the decode step of batch {}, {} blocks a sequence, as a CUDA graph ({} MiB arena, {} "
                "attention splits)", batch, block_width, g->arena->size() >> 20, g->decode_splits);
  return *graphs_.emplace(std::make_pair(batch, block_width), std::move(g)).first->second;
}

cudaStream_t CudaOps::stream() const { return stream_->stream; }

namespace {

// Copies host weights to the device through two pinned staging buffers: while one buffer's bytes
// cross PCIe, threads fill the other from the mapped checkpoint (page cache), converting float32
// matrices to bf16 on the way. Pageable copies would run at a fraction of the link's speed.
class StagedUpload {
 public:
  explicit StagedUpload(cudaStream_t stream) : stream_(stream) {
    for (Stage& s : stages_) {
      DI_CUDA_CHECK(cudaMallocHost(&s.host, kStageBytes));
      DI_CUDA_CHECK(cudaEventCreateWithFlags(&s.done, cudaEventDisableTiming));
    }
  }
  ~StagedUpload() {
    cudaStreamSynchronize(stream_);
    for (Stage& s : stages_) cudaFreeHost(s.host), cudaEventDestroy(s.done);
  }
  // dst (device, bf16) <- the weight's elements as bf16.
  void matrix(uint16_t* dst, const TensorView& w) {
    const int64_t n = w.numel(), per_stage = int64_t(kStageBytes / 2);
    for (int64_t first = 0; first < n; first += per_stage) {
      const int64_t count = std::min(per_stage, n - first);
      Stage& s = stages_[next_];
      next_ ^= 1;
      DI_CUDA_CHECK(cudaEventSynchronize(s.done));  // its previous copy has left the buffer
      uint16_t* out = static_cast<uint16_t*>(s.host);
      constexpr int64_t kBlock = 1 << 18;
#pragma omp parallel for schedule(static)
      for (int64_t b = 0; b < count; b += kBlock) {
        const int64_t m = std::min(kBlock, count - b);
        if (w.dtype == DType::bf16)
          std::memcpy(out + b, w.as<uint16_t>() + first + b, size_t(m) * 2);
        else
          for (int64_t i = 0; i < m; ++i) out[b + i] = f32_to_bf16(w.as<float>()[first + b + i]);
      }
      DI_CUDA_CHECK(cudaMemcpyAsync(dst + first, out, size_t(count) * 2, cudaMemcpyHostToDevice, stream_));
      DI_CUDA_CHECK(cudaEventRecord(s.done, stream_));
    }
  }

 private:
  static constexpr size_t kStageBytes = size_t(64) << 20;
  struct Stage {
    void* host = nullptr;
    cudaEvent_t done = nullptr;
  };
  cudaStream_t stream_;
  Stage stages_[2];
  int next_ = 0;
};

}  // namespace

void CudaOps::upload_weights(const ModelWeights& w) {
  StagedUpload upload(stream_->stream);
  auto matrix = [&](const TensorView& t) {
    if (t.empty() || weights_bf16_.count(t.data)) return;
    DI_CHECK(t.dtype == DType::bf16 || t.dtype == DType::f32, "CudaOps: weight {} of dtype {} cannot be uploaded",
             shape_str(t.shape), dtype_name(t.dtype));
    cuda::DeviceBuffer<uint16_t> dev(size_t(t.numel()));
    upload.matrix(dev.data(), t);
    resident_bytes_ += dev.bytes();
    weights_bf16_.emplace(t.data, std::move(dev));
  };
  auto param = [&](const TensorView& t) {
    if (t.empty() || params_f32_.count(t.data)) return;
    const std::vector<float> v = param_values(t);
    cuda::DeviceBuffer<float> dev(std::span<const float>(v.data(), v.size()));
    resident_bytes_ += dev.bytes();
    params_f32_.emplace(t.data, std::move(dev));
  };
  matrix(w.embed_tokens);
  matrix(w.lm_head);
  param(w.final_norm);
  for (const LayerWeights& L : w.layers) {
    param(L.input_layernorm);
    param(L.post_attention_layernorm);
    for (const TensorView* m : {&L.mlp.gate_proj, &L.mlp.up_proj, &L.mlp.down_proj}) matrix(*m);
    if (L.kind == LayerKind::linear_attention) {
      const GdnWeights& G = L.gdn;
      for (const TensorView* m : {&G.in_proj_qkv, &G.in_proj_z, &G.in_proj_b, &G.in_proj_a, &G.out_proj}) matrix(*m);
      for (const TensorView* p : {&G.conv1d, &G.A_log, &G.dt_bias, &G.norm}) param(*p);
    } else {
      const AttentionWeights& A = L.attn;
      for (const TensorView* m : {&A.q_proj, &A.k_proj, &A.v_proj, &A.o_proj}) matrix(*m);
      for (const TensorView* p : {&A.q_norm, &A.k_norm}) param(*p);
    }
  }
}

const void* CudaOps::device_weight(const TensorView& w, const char* what) const {
  const auto it = weights_bf16_.find(w.data);
  DI_CHECK(it != weights_bf16_.end(), "CudaOps: the {} weight {} is not one of the model's uploaded matrices", what,
           shape_str(w.shape));
  return it->second.data();
}

const float* CudaOps::device_param_f32(const TensorView& w, const char* what) const {
  const auto it = params_f32_.find(w.data);
  DI_CHECK(it != params_f32_.end(), "CudaOps: the {} parameter {} is not one of the model's uploaded parameters",
           what, shape_str(w.shape));
  return it->second.data();
}

Tensor CudaOps::new_tensor(Shape shape, DType dtype) {
  const size_t bytes = std::max<size_t>(size_t(shape_numel(shape)) * dtype_size(dtype), 16);
  step_bytes_ += (bytes + 255) / 256 * 256;
  if (graph_ != nullptr) {  // capturing: a bump allocation in the graph's arena, never freed
    const size_t at = (graph_->arena_used + 255) / 256 * 256;
    DI_CHECK(at + bytes <= graph_->arena->size(), "decode graph of batch {}: its activation arena of {} bytes is "
             "full", graph_->batch, graph_->arena->size());
    graph_->arena_used = at + bytes;
    return Tensor::from_storage(nullptr, graph_->arena->data() + at, std::move(shape), dtype, Device::cuda);
  }
  void* p = nullptr;
  DI_CUDA_CHECK(cudaMallocAsync(&p, bytes, stream_->stream));
  std::shared_ptr<Stream> owner = stream_;
  std::shared_ptr<void> storage(p, [owner](void* ptr) { owner->free(ptr); });
  return Tensor::from_storage(std::move(storage), p, std::move(shape), dtype, Device::cuda);
}

Tensor CudaOps::upload_bf16(const std::vector<float>& values, Shape shape) {
  DI_CHECK(int64_t(values.size()) == shape_numel(shape), "upload_bf16: {} values for shape {}", values.size(),
           shape_str(shape));
  std::vector<uint16_t> bits(values.size());
  for (size_t i = 0; i < bits.size(); ++i) bits[i] = f32_to_bf16(values[i]);
  Tensor t = new_tensor(std::move(shape), DType::bf16);
  DI_CUDA_CHECK(cudaMemcpyAsync(t.data(), bits.data(), bits.size() * 2, cudaMemcpyHostToDevice, stream_->stream));
  DI_CUDA_CHECK(cudaStreamSynchronize(stream_->stream));  // `bits` goes out of scope
  return t;
}

// --- slots and steps ---------------------------------------------------------------------------

float* CudaOps::recurrent_pool(int64_t gdn_layer) const {
  const ModelConfig& c = config_;
  return recurrent_states_.data() + size_t(gdn_layer * options_.max_slots * c.linear_num_value_heads *
                                           c.linear_key_head_dim * c.linear_value_head_dim);
}

void* CudaOps::conv_pool(int64_t gdn_layer) const {
  return conv_states_.data() +
         size_t(gdn_layer * options_.max_slots * config_.gdn_conv_dim() * config_.linear_conv_kernel_dim);
}

int CudaOps::alloc_slot() {
  const auto it = std::find_if(slots_.begin(), slots_.end(), [](const Slot& s) { return !s.live; });
  DI_CHECK(it != slots_.end(), "CudaOps: all {} state slots are in use (raise max_slots)", options_.max_slots);
  const int slot = int(it - slots_.begin());
  *it = Slot{.live = true};
  const ModelConfig& c = config_;
  const size_t conv = size_t(c.gdn_conv_dim() * c.linear_conv_kernel_dim);
  const size_t rec = size_t(c.linear_num_value_heads * c.linear_key_head_dim * c.linear_value_head_dim);
  for (int64_t l = 0; l < gdn_layers_; ++l) {  // a fresh sequence starts from zero state
    DI_CUDA_CHECK(cudaMemsetAsync(static_cast<uint16_t*>(conv_pool(l)) + slot * conv, 0, conv * 2, stream_->stream));
    DI_CUDA_CHECK(cudaMemsetAsync(recurrent_pool(l) + slot * rec, 0, rec * 4, stream_->stream));
  }
  return slot;
}

void CudaOps::free_slot(int slot) {
  DI_CHECK(slot >= 0 && slot < int(slots_.size()) && slots_[size_t(slot)].live,
           "CudaOps: state slot {} is not allocated", slot);
  Slot& s = slots_[size_t(slot)];
  free_blocks_.insert(free_blocks_.end(), s.blocks.rbegin(), s.blocks.rend());
  s = Slot{};
}

void CudaOps::begin_step(const BatchPlan& plan) {
  residual_sum_sq_.reset();
  if (graph_ != nullptr) {  // capturing: the metadata goes through the graph's pinned buffer
    step_ = plan_step(plan, graph_->block_width, graph_->decode_splits);
    upload_step_metadata(*step_, graph_->pinned, graph_->metadata.data());
    return;
  }
  step_ = plan_step(plan, 0, 0);
  Tensor metadata = new_tensor({int64_t(step_->host_metadata.size())}, DType::i32);
  // From pageable memory the copy is staged before the call returns.
  upload_step_metadata(*step_, nullptr, metadata.as<int32_t>());
  step_->metadata = metadata;
}

// Host side of a step: checks the plan against the slots, grows each sequence's KV blocks, plans
// the attention, and lays out the metadata (section pointers are set by upload_step_metadata).
// block_width > 0 fixes the block-table width and decode_splits > 0 the decode split count (a graph
// replays with the layout it was captured with).
std::unique_ptr<CudaOps::Step> CudaOps::plan_step(const BatchPlan& plan, int32_t block_width, int decode_splits) {
  const int64_t N = plan.n_tokens();
  DI_CHECK(int64_t(plan.positions.size()) == N, "batch plan: {} positions for {} tokens", plan.positions.size(), N);
  DI_CHECK(N > 0 && !plan.seqs.empty(), "batch plan: empty step");
  const int32_t S = int32_t(plan.seqs.size());
  auto step = std::make_unique<Step>();
  step->n_tokens = N;
  step->num_seqs = S;
  step->seqs = plan.seqs;
  step->decode = std::all_of(plan.seqs.begin(), plan.seqs.end(),
                             [](const SequenceSpan& s) { return s.n_tokens == 1 && s.n_past > 0; });

  // Check the plan against the slots and grow each sequence's KV blocks to hold the new tokens.
  int64_t next_row = 0;
  int32_t max_blocks = 1;
  std::vector<attention::SequenceShape> shapes;
  for (const SequenceSpan& s : plan.seqs) {
    DI_CHECK(s.slot >= 0 && s.slot < int(slots_.size()) && slots_[size_t(s.slot)].live,
             "batch plan: state slot {} is not allocated", s.slot);
    Slot& slot = slots_[size_t(s.slot)];
    DI_CHECK(s.first_token == next_row && s.n_tokens > 0, "batch plan: sequences must tile the rows in order "
             "(slot {} starts at row {} with {} tokens, expected row {})", s.slot, s.first_token, s.n_tokens, next_row);
    DI_CHECK(s.n_past == slot.n_cached, "batch plan: slot {} holds {} tokens but the plan says {}", s.slot,
             slot.n_cached, s.n_past);
    next_row += s.n_tokens;
    step->longest = std::max(step->longest, s.n_tokens);
    const int64_t need = (s.n_past + s.n_tokens + options_.kv_block_size - 1) / options_.kv_block_size;
    if (attn_layers_ > 0) {
      DI_CHECK(need - int64_t(slot.blocks.size()) <= int64_t(free_blocks_.size()),
               "KV cache full: slot {} needs {} more blocks of {} tokens, {} are free", s.slot,
               need - int64_t(slot.blocks.size()), options_.kv_block_size, free_blocks_.size());
      DI_CHECK(block_width == 0 || need <= block_width, "KV cache: slot {} needs {} blocks, a captured decode graph "
               "holds {} per sequence", s.slot, need, block_width);
      while (int64_t(slot.blocks.size()) < need) {
        slot.blocks.push_back(free_blocks_.back());
        free_blocks_.pop_back();
      }
    }
    max_blocks = std::max(max_blocks, int32_t(slot.blocks.size()));
    shapes.push_back({int32_t(s.n_tokens), int32_t(s.n_past)});
  }
  DI_CHECK(next_row == N, "batch plan: sequences cover {} rows of {}", next_row, N);
  if (block_width > 0) max_blocks = block_width;
  step->max_blocks = max_blocks;
  step->attention_plan = attention::plan_prefill(shapes);

  // One int32 array: ids | positions | token_seq | cu_seqlens | seq_slot | kv_lens | block table | tiles.
  std::vector<int32_t>& meta = step->host_metadata;
  const size_t tiles = step->attention_plan.tile_seq.size();
  meta.reserve(size_t(3 * N + 3 * S + 1) + size_t(S) * size_t(max_blocks) + 2 * tiles);
  std::vector<size_t>& at = step->sections;
  at.push_back(meta.size());
  for (int64_t t = 0; t < N; ++t) meta.push_back(plan.token_ids[size_t(t)]);
  at.push_back(meta.size());
  for (int64_t t = 0; t < N; ++t) {
    const int64_t pos = plan.positions[size_t(t)];
    DI_CHECK(pos >= 0 && pos <= INT32_MAX, "batch plan: position {} out of range", pos);
    meta.push_back(int32_t(pos));
  }
  at.push_back(meta.size());
  for (int32_t i = 0; i < S; ++i)
    for (int64_t t = 0; t < plan.seqs[size_t(i)].n_tokens; ++t) meta.push_back(i);
  at.push_back(meta.size());
  meta.push_back(0);
  for (const SequenceSpan& s : plan.seqs) meta.push_back(int32_t(s.first_token + s.n_tokens));
  at.push_back(meta.size());
  for (const SequenceSpan& s : plan.seqs) meta.push_back(s.slot);
  at.push_back(meta.size());
  for (const SequenceSpan& s : plan.seqs) meta.push_back(int32_t(s.n_past + s.n_tokens));
  at.push_back(meta.size());
  for (const SequenceSpan& s : plan.seqs) {
    const std::vector<int32_t>& blocks = slots_[size_t(s.slot)].blocks;
    for (int32_t j = 0; j < max_blocks; ++j) meta.push_back(j < int32_t(blocks.size()) ? blocks[size_t(j)] : 0);
  }
  at.push_back(meta.size());
  meta.insert(meta.end(), step->attention_plan.tile_seq.begin(), step->attention_plan.tile_seq.end());
  at.push_back(meta.size());
  meta.insert(meta.end(), step->attention_plan.tile_q_start.begin(), step->attention_plan.tile_q_start.end());

  if (step->decode && attn_layers_ > 0) {
    int64_t max_kv = 0;
    for (const SequenceSpan& s : plan.seqs) max_kv = std::max(max_kv, s.n_past + 1);
    const int Hq = int(config_.num_attention_heads), Hkv = int(config_.num_kv_heads), D = int(config_.head_dim);
    step->decode_splits = decode_splits > 0 ? decode_splits
                                            : attention::plan_decode_splits(S, Hq, Hkv, int(max_kv), device_.num_sms,
                                                                            kMaxDecodeSplits);
    step->decode_workspace_bytes = attention::decode_workspace_bytes(S, Hq, D, step->decode_splits);
  }
  if (!step->decode) {  // the chunked prefill's scratch, grown to the largest step seen
    const di_gdn_prefill_shape shape{gdn_geometry(config_), S, N, step->longest};
    const size_t scratch = gdn_backend_->scratch_bytes(&shape);
    if (scratch > gdn_scratch_.size()) {
      DI_CUDA_CHECK(cudaStreamSynchronize(stream_->stream));
      gdn_scratch_ = cuda::DeviceBuffer<uint8_t>(scratch);
    }
  }
  // The step is planned: its tokens now count as cached (the KV blocks are reserved above).
  for (const SequenceSpan& s : plan.seqs) slots_[size_t(s.slot)].n_cached += s.n_tokens;
  return step;
}

// Copies the step's metadata to `device` (through `pinned` when given: a captured graph's copy node
// reads that buffer at every replay) and points the step's sections into it.
void CudaOps::upload_step_metadata(Step& step, int32_t* pinned, int32_t* device) {
  const std::vector<int32_t>& meta = step.host_metadata;
  const int32_t* src = meta.data();
  if (pinned != nullptr) {
    std::memcpy(pinned, meta.data(), meta.size() * 4);
    src = pinned;
  }
  DI_CUDA_CHECK(cudaMemcpyAsync(device, src, meta.size() * 4, cudaMemcpyHostToDevice, stream_->stream));
  const std::vector<size_t>& at = step.sections;
  step.token_ids = device + at[0];
  step.positions = device + at[1];
  step.token_seq = device + at[2];
  step.cu_seqlens = device + at[3];
  step.seq_slot = device + at[4];
  step.kv_lens = device + at[5];
  step.block_table = device + at[6];
  step.tile_seq = device + at[7];
  step.tile_q_start = device + at[8];
  if (step.decode_workspace_bytes > 0)
    step.attention_workspace = new_tensor({int64_t(step.decode_workspace_bytes)}, DType::u8);
}

void CudaOps::check_step(const BatchPlan& plan, const char* op) const {
  DI_CHECK(step_ && step_->n_tokens == plan.n_tokens() && step_->seqs.size() == plan.seqs.size(),
           "CudaOps::{}: called with a plan that begin_step did not see", op);
}

bool CudaOps::step_is_decode() const { return step_ && step_->decode; }

// --- ops ---------------------------------------------------------------------------------------

Tensor CudaOps::embed(const TensorView& table, const BatchPlan& plan) {
  check_step(plan, "embed");
  const int64_t rows = table.dim(0), hidden = table.dim(1);
  const int64_t vocab = options_.group ? rows * options_.group->size() : rows;
  for (int64_t t = 0; t < plan.n_tokens(); ++t) {
    const int64_t id = plan.token_ids[size_t(t)];
    DI_CHECK(id >= 0 && id < vocab, "token id {} at position {} is outside the vocabulary of {}", id, t, vocab);
  }
  Tensor x = new_tensor({plan.n_tokens(), hidden}, DType::bf16);
  if (!options_.group) {
    check_launch(kernels::launch_embed_rows(device_weight(table, "embedding"), step_->token_ids, plan.n_tokens(),
                                            hidden, x.data(), stream()),
                 "embed_rows");
    return x;
  }
  // The rank's vocabulary slice; other ids give zero rows, and the sum over ranks (one non-zero
  // row each) is exact in bf16.
  check_launch(kernels::launch_embed_rows_slice(device_weight(table, "embedding"), options_.rank * rows, rows,
                                                step_->token_ids, plan.n_tokens(), hidden, x.data(), stream()),
               "embed_rows_slice");
  options_.group->all_reduce_sum_bf16(options_.rank, x.data(), size_t(x.numel()), stream());
  return x;
}

Tensor CudaOps::rms_norm(const Tensor& x, const TensorView& weight, double eps) {
  check_cuda_tensor(x, DType::bf16, "rms_norm input");
  const int64_t dim = x.dim(-1);
  DI_CHECK(weight.numel() == dim, "rms_norm: weight of {} elements for rows of {}", weight.numel(), dim);
  Tensor y = new_tensor(x.shape(), DType::bf16);
  kernels::RmsNormParams p{.x = x.data(), .weight = device_param_f32(weight, "rms_norm"), .out = y.data(),
                           .rows = x.numel() / dim, .dim = dim, .eps = float(eps), .zero_centred = true};
  check_launch(kernels::launch_rms_norm(p, stream()), "rms_norm");
  return y;
}

Tensor CudaOps::elementwise(const Tensor& a, const Tensor& b, const char* op, BinaryLaunch launch) {
  check_same_shape(a, b, op);
  check_cuda_tensor(a, DType::bf16, op);
  check_cuda_tensor(b, DType::bf16, op);
  Tensor y = new_tensor(a.shape(), DType::bf16);
  check_launch(launch(a.data(), b.data(), a.numel(), y.data(), stream()), op);
  return y;
}

Tensor CudaOps::add(const Tensor& a, const Tensor& b) { return elementwise(a, b, "add", kernels::launch_add); }

Tensor CudaOps::linear(const Tensor& x, const TensorView& weight) { return project(x, {&weight}, DType::bf16)[0]; }

std::vector<Tensor> CudaOps::linear_projections(const ProjectionInput& in,
                                                const std::vector<const TensorView*>& weights) {
  return project(in, weights, DType::bf16);
}

ProjectionInput CudaOps::fusable(const ProjectionInput& in) {
  if (in.op == ProjectionInput::Op::none) return in;
  const int64_t K = in.x.dim(-1), rows = in.x.numel() / K;
  kernels::SmallBatchLinearParams staged{.rows = rows, .in_features = K, .input = kernels::SmallBatchInput::sigmoid_gate};
  if (rows > kFusedInputMaxRows || kernels::small_batch_staging_bytes(staged) > kernels::kMaxSmallBatchStagingBytes)
    return materialise(in);
  if (in.op != ProjectionInput::Op::rms_norm) return in;
  const bool sums_known = residual_sum_sq_ && residual_sum_sq_->x.data() == in.x.data() &&
                          residual_sum_sq_->x.shape() == in.x.shape();
  return sums_known ? in : ProjectionInput(materialise(in));
}

kernels::SmallBatchLinearParams CudaOps::small_batch_params(const ProjectionInput& in, const char* what) const {
  const Tensor& x = in.x;
  check_cuda_tensor(x, DType::bf16, what);
  const int64_t K = x.dim(-1), rows = x.numel() / K;
  kernels::SmallBatchLinearParams p{.x = x.data(), .rows = rows, .in_features = K};
  using Op = ProjectionInput::Op;
  if (in.op == Op::gated_rms_norm || in.op == Op::sigmoid_gate) {
    check_same_shape(x, in.gate, what);
    check_cuda_tensor(in.gate, DType::bf16, what);
    p.gate = in.gate.data();
  }
  switch (in.op) {
    case Op::none: break;
    case Op::rms_norm:
      DI_CHECK(in.weight->numel() == K, "{}: norm weight of {} elements for rows of {}", what, in.weight->numel(), K);
      DI_CHECK(residual_sum_sq_ && residual_sum_sq_->x.data() == x.data(), "{}: no sums of squares for the norm", what);
      p.input = kernels::SmallBatchInput::rms_norm;
      p.norm_weight = device_param_f32(*in.weight, "rms_norm");
      p.eps = float(in.eps);
      p.input_sum_sq = residual_sum_sq_->sum_sq.as<float>();
      p.input_sum_sq_parts = residual_sum_sq_->sum_sq.dim(1);
      break;
    case Op::gated_rms_norm:
      p.input = kernels::SmallBatchInput::gated_rms_norm;
      p.norm_weight = device_param_f32(*in.weight, "gated norm");
      p.group = in.weight->numel();
      p.eps = float(in.eps);
      break;
    case Op::sigmoid_gate: p.input = kernels::SmallBatchInput::sigmoid_gate; break;
  }
  return p;
}

std::vector<Tensor> CudaOps::project(const ProjectionInput& input, const std::vector<const TensorView*>& weights,
                                     DType out, const Tensor* residual) {
  const ProjectionInput in = fusable(input);
  kernels::SmallBatchLinearParams p = small_batch_params(in, "linear input");
  const int64_t K = p.in_features, rows = p.rows;
  std::vector<Tensor> y;
  y.reserve(weights.size());
  for (const TensorView* w : weights) {
    DI_CHECK(w->dim(1) == K, "linear: input width {} for a weight {}", K, shape_str(w->shape));
    y.push_back(new_tensor({rows, w->dim(0)}, out));
  }
  if (residual != nullptr) {
    DI_CHECK(weights.size() == 1 && out == DType::bf16, "linear: a residual takes one bf16 output");
    check_same_shape(*residual, y[0], "residual add");
    check_cuda_tensor(*residual, DType::bf16, "residual add");
  }
  // Decode-sized steps: every projection in one pass over the weights (kernels/gemm/small_batch_linear.h).
  // Up to 8 rows it streams any weight faster than cuBLASLt but the lm_head (whose many tiles
  // cuBLASLt streams at 94-96% of the bandwidth, against 90%). From 9 to 16 rows a lone weight
  // streams faster on cuBLASLt, so only fused groups (several weights, one launch) and residual
  // projections (whose add and next norm go with them) stay (docs/benchmarks/decode.md).
  constexpr int64_t kVocabSized = 65536;
  const bool lone = weights.size() == 1;
  const bool small_batch_wins = lone ? (rows <= 8 || residual != nullptr) && weights[0]->dim(0) < kVocabSized : true;
  p.epilogue = out == DType::f32 ? kernels::SmallBatchEpilogue::f32 : kernels::SmallBatchEpilogue::bf16;
  p.num_outputs = int(weights.size());
  for (size_t i = 0; i < weights.size() && i < size_t(p.kMaxOutputs); ++i)
    p.outputs[i] = {device_weight(*weights[i], "linear"), y[i].data(), weights[i]->dim(0)};
  // The rows' sums of squares only where the next projection can apply its RMS norm from them (up
  // to kFusedInputMaxRows; beyond, without them, the narrow residual projections take 8-row weight
  // tiles).
  Tensor sum_sq;
  const bool sums_out = residual != nullptr && rows <= kFusedInputMaxRows;
  if (residual != nullptr) p.residual = residual->data();
  if (sums_out) {
    sum_sq = new_tensor({rows, kernels::small_batch_sum_sq_parts(weights[0]->dim(0))}, DType::f32);
    p.out_sum_sq = sum_sq.as<float>();
  }
  if (small_batch_wins && kernels::small_batch_linear_error(p).empty()) {
    check_launch(kernels::launch_small_batch_linear(p, stream()), "small_batch_linear");
    if (residual != nullptr) {
      if (sums_out)
        residual_sum_sq_ = ResidualSumSq{y[0], sum_sq};
      else
        residual_sum_sq_.reset();
    }
    return y;
  }
  // Otherwise the input op on its own, a GEMM per weight, and the add.
  const Tensor x = materialise(in);
  for (size_t i = 0; i < weights.size(); ++i) {
    const void* w = device_weight(*weights[i], "linear");
    if (out == DType::f32)
      gemm_.linear_f32_out(x.data(), w, y[i].as<float>(), rows, weights[i]->dim(0), K, stream());
    else
      gemm_.linear(x.data(), w, y[i].data(), rows, weights[i]->dim(0), K, stream());
  }
  if (residual != nullptr) y[0] = add(*residual, y[0]);
  return y;
}

Tensor CudaOps::swiglu_projection(const ProjectionInput& input, const TensorView& gate, const TensorView& up) {
  const ProjectionInput in = fusable(input);
  kernels::SmallBatchLinearParams p = small_batch_params(in, "swiglu_projection input");
  DI_CHECK(gate.shape == up.shape, "swiglu_projection: gate {} and up {} differ", shape_str(gate.shape),
           shape_str(up.shape));
  const int64_t width = gate.dim(0);
  DI_CHECK(gate.dim(1) == p.in_features, "swiglu_projection: input width {} for a weight {}", p.in_features,
           shape_str(gate.shape));
  if (p.rows >= 1 && p.rows <= kernels::SmallBatchLinearParams::kMaxRows) {
    Tensor act = new_tensor({p.rows, width}, DType::bf16);
    p.epilogue = kernels::SmallBatchEpilogue::swiglu;
    p.num_outputs = 2;
    p.outputs[0] = {device_weight(gate, "linear"), act.data(), width};
    p.outputs[1] = {device_weight(up, "linear"), nullptr, width};
    if (kernels::small_batch_linear_error(p).empty()) {
      check_launch(kernels::launch_small_batch_linear(p, stream()), "small_batch_linear (swiglu)");
      return act;
    }
  }
  const Tensor x = materialise(in);
  return swiglu(linear(x, gate), linear(x, up));
}

Tensor CudaOps::residual_projection(const Tensor& residual, const ProjectionInput& in, const TensorView& weight) {
  if (options_.group) return add(residual, project_all_reduce(in, weight));
  return project(in, {&weight}, DType::bf16, &residual)[0];
}

Tensor CudaOps::linear_all_reduce(const Tensor& x, const TensorView& weight) {
  if (!options_.group) return linear(x, weight);
  return project_all_reduce(x, weight);
}

Tensor CudaOps::project_all_reduce(const ProjectionInput& in, const TensorView& weight) {
  Tensor partial = project(in, {&weight}, DType::f32)[0];
  options_.group->all_reduce_sum_f32(options_.rank, partial.as<float>(), size_t(partial.numel()), stream());
  Tensor y = new_tensor(partial.shape(), DType::bf16);
  check_launch(kernels::launch_f32_to_bf16(partial.as<float>(), partial.numel(), y.data(), stream()), "f32_to_bf16");
  return y;
}

Tensor CudaOps::all_gather_columns(const Tensor& x) {
  if (!options_.group) return x;
  check_cuda_tensor(x, DType::bf16, "all_gather_columns input");
  const int64_t n = x.dim(-1), rows = x.numel() / n, ranks = options_.group->size();
  Tensor gathered = new_tensor({ranks, rows, n}, DType::bf16);
  options_.group->all_gather_bf16(options_.rank, x.data(), gathered.data(), size_t(x.numel()), stream());
  Tensor y = new_tensor({rows, ranks * n}, DType::bf16);
  for (int64_t r = 0; r < ranks; ++r)  // rank r's [rows, n] block into columns [r*n, (r+1)*n)
    DI_CUDA_CHECK(cudaMemcpy2DAsync(static_cast<uint16_t*>(y.data()) + r * n, size_t(ranks * n) * 2,
                                    static_cast<const uint16_t*>(gathered.data()) + r * rows * n, size_t(n) * 2,
                                    size_t(n) * 2, size_t(rows), cudaMemcpyDeviceToDevice, stream()));
  return y;
}

Tensor CudaOps::gather_rows(const Tensor& x, const std::vector<int64_t>& rows) {
  check_cuda_tensor(x, DType::bf16, "gather_rows input");
  const int64_t width = x.dim(-1), n = x.numel() / width;
  // Every row in order (a decode step's logits): x as it is, no copy.
  bool every_row = int64_t(rows.size()) == n;
  for (size_t i = 0; every_row && i < rows.size(); ++i) every_row = rows[i] == int64_t(i);
  if (every_row) return x.reshaped({n, width});
  std::vector<int32_t> idx(rows.size());
  for (size_t i = 0; i < rows.size(); ++i) {
    DI_CHECK(rows[i] >= 0 && rows[i] < n, "gather_rows: row {} outside [0, {})", rows[i], n);
    idx[i] = int32_t(rows[i]);
  }
  Tensor dev_rows = new_tensor({int64_t(idx.size())}, DType::i32);
  // From pageable memory the copy is staged before the call returns, so `idx` may go right after.
  // A graph capture cannot copy from pageable memory: it copies from the graph's pinned buffer.
  const int32_t* src = idx.data();
  if (graph_ != nullptr) {
    DI_CHECK(int(idx.size()) <= graph_->batch, "decode graph of batch {}: {} logit rows", graph_->batch, idx.size());
    std::memcpy(graph_->pinned_rows, idx.data(), idx.size() * 4);
    src = graph_->pinned_rows;
  }
  DI_CUDA_CHECK(cudaMemcpyAsync(dev_rows.data(), src, idx.size() * 4, cudaMemcpyHostToDevice, stream()));
  Tensor y = new_tensor({int64_t(rows.size()), width}, DType::bf16);
  check_launch(kernels::launch_gather_rows(x.data(), dev_rows.as<int32_t>(), int64_t(rows.size()), width, y.data(),
                                           stream()),
               "gather_rows");
  return y;
}

Tensor CudaOps::swiglu(const Tensor& gate, const Tensor& up) {
  return elementwise(gate, up, "swiglu", kernels::launch_swiglu);
}

Tensor CudaOps::gdn_conv1d_silu(const Tensor& mixed_qkv, const TensorView& conv_weight, const BatchPlan& plan,
                                int64_t gdn_layer) {
  check_step(plan, "gdn_conv1d_silu");
  check_cuda_tensor(mixed_qkv, DType::bf16, "gdn_conv1d_silu input");
  const int64_t C = mixed_qkv.dim(-1);
  DI_CHECK(C == config_.gdn_conv_dim(), "gdn_conv1d_silu: {} channels, the config has {}", C, config_.gdn_conv_dim());
  DI_CHECK(gdn_layer >= 0 && gdn_layer < gdn_layers_, "gdn_conv1d_silu: GDN layer {} of {}", gdn_layer, gdn_layers_);
  Tensor y = new_tensor(mixed_qkv.shape(), DType::bf16);
  gdn::ConvParams p{.x = mixed_qkv.data(), .weight = device_param_f32(conv_weight, "conv1d"),
                    .conv_state = conv_pool(gdn_layer), .cu_seqlens = step_->cu_seqlens,
                    .token_seq = step_->token_seq, .seq_slot = step_->seq_slot, .out = y.data(),
                    .tokens = step_->n_tokens, .num_seqs = step_->num_seqs, .channels = int32_t(C),
                    .kernel = int32_t(config_.linear_conv_kernel_dim), .one_token_each = step_->decode};
  check_launch(gdn::launch_conv1d_silu(p, stream()), "conv1d_silu");
  return y;
}

gdn::GdnDecodeParams CudaOps::gdn_decode_params(const Tensor& qkv, const Tensor& a, const Tensor& b,
                                                const TensorView& A_log, const TensorView& dt_bias,
                                                int64_t gdn_layer, const Tensor& out) {
  gdn::GdnDecodeParams p{};
  p.geometry = gdn_geometry(config_);
  p.state_layout = options_.state_layout;
  p.num_seqs = step_->num_seqs;
  p.qkv = qkv.data();
  p.qkv_row_stride = config_.gdn_conv_dim();
  p.a = a.data();
  p.b = b.data();
  p.A_log = device_param_f32(A_log, "A_log");
  p.dt_bias = device_param_f32(dt_bias, "dt_bias");
  p.state = recurrent_pool(gdn_layer);
  p.state_indices = step_->seq_slot;
  p.out = out.data();
  p.scale = 1.0f / std::sqrt(float(config_.linear_key_head_dim));
  return p;
}

void CudaOps::check_gdn_inputs(const Tensor& qkv, const Tensor& a, const Tensor& b, const BatchPlan& plan,
                               int64_t gdn_layer, const char* op) const {
  check_step(plan, op);
  check_cuda_tensor(qkv, DType::bf16, op);
  check_same_shape(a, b, op);
  const int64_t N = step_->n_tokens;
  DI_CHECK(qkv.numel() == N * config_.gdn_conv_dim(), "{}: qkv of shape {} for {} tokens", op, shape_str(qkv.shape()), N);
  DI_CHECK(gdn_layer >= 0 && gdn_layer < gdn_layers_, "{}: GDN layer {} of {}", op, gdn_layer, gdn_layers_);
}

Ops::NormedGdnOutput CudaOps::gdn_delta_rule_normed(const Tensor& qkv, const Tensor& a, const Tensor& b,
                                                    const TensorView& A_log, const TensorView& dt_bias,
                                                    const Tensor& z, const TensorView& norm_weight, double eps,
                                                    const BatchPlan& plan, int64_t gdn_layer) {
  check_gdn_inputs(qkv, a, b, plan, gdn_layer, "gdn_delta_rule_normed");
  // The fused norm runs a head's two CTAs as a cluster (compute capability 9.0 and later).
  if (!step_->decode || !gdn::gdn_decode_step_fuses_output_norm())
    return Ops::gdn_delta_rule_normed(qkv, a, b, A_log, dt_bias, z, norm_weight, eps, plan, gdn_layer);
  const int64_t N = step_->n_tokens, Hv = config_.linear_num_value_heads, dv = config_.linear_value_head_dim;
  check_cuda_tensor(z, DType::bf16, "gdn_delta_rule_normed z");
  DI_CHECK(z.numel() == N * Hv * dv, "gdn_delta_rule_normed: z of shape {} for {} tokens", shape_str(z.shape()), N);
  DI_CHECK(norm_weight.numel() == dv, "gdn_delta_rule_normed: norm weight of {} elements for heads of {}",
           norm_weight.numel(), dv);
  Tensor y = new_tensor({N, Hv * dv}, DType::bf16);
  gdn::GdnDecodeParams p = gdn_decode_params(qkv, a, b, A_log, dt_bias, gdn_layer, y);
  p.z = z.data();
  p.norm_weight = device_param_f32(norm_weight, "gated norm");
  p.norm_eps = float(eps);
  check_launch(gdn::launch_gdn_decode_step(p, stream()), "gdn_decode_step (output norm fused)");
  return {Tensor(), ProjectionInput(std::move(y))};
}

Tensor CudaOps::gdn_delta_rule(const Tensor& qkv, const Tensor& a, const Tensor& b, const TensorView& A_log,
                               const TensorView& dt_bias, const BatchPlan& plan, int64_t gdn_layer) {
  check_gdn_inputs(qkv, a, b, plan, gdn_layer, "gdn_delta_rule");
  const ModelConfig& c = config_;
  const int64_t N = step_->n_tokens, Hk = c.linear_num_key_heads, Hv = c.linear_num_value_heads;
  const int64_t dk = c.linear_key_head_dim, dv = c.linear_value_head_dim;
  const float scale = 1.0f / std::sqrt(float(dk));
  Tensor out = new_tensor({N, Hv * dv}, DType::bf16);
  if (step_->decode) {
    // One token per sequence on a populated state: the recurrent step, gates and norms fused.
    check_launch(gdn::launch_gdn_decode_step(gdn_decode_params(qkv, a, b, A_log, dt_bias, gdn_layer, out), stream()),
                 "gdn_decode_step");
    return out;
  }
  // Prefill (and mixed steps): q, k, v packed and the gates, then the chunked delta rule through the
  // dispatched backend, reading and writing each sequence's slot state in place.
  Tensor q = new_tensor({N, Hk, dk}, DType::bf16), k = new_tensor({N, Hk, dk}, DType::bf16);
  Tensor v = new_tensor({N, Hv, dv}, DType::bf16);
  Tensor g = new_tensor({N, Hv}, DType::f32), beta = new_tensor({N, Hv}, DType::f32);
  gdn::PrefillInputParams prep{.qkv = qkv.data(), .a = a.data(), .b = b.data(),
                               .A_log = device_param_f32(A_log, "A_log"),
                               .dt_bias = device_param_f32(dt_bias, "dt_bias"), .q = q.data(), .k = k.data(),
                               .v = v.data(), .g = g.as<float>(), .beta = beta.as<float>(), .tokens = N,
                               .num_k_heads = int32_t(Hk), .num_v_heads = int32_t(Hv), .k_dim = int32_t(dk),
                               .v_dim = int32_t(dv), .normalize_qk = false};
  check_launch(gdn::launch_prefill_inputs(prep, stream()), "gdn_prefill_inputs");
  di_gdn_prefill_args args{};
  args.abi_version = DI_GDN_ABI_VERSION;
  args.geometry = gdn_geometry(c);
  args.state_layout = options_.state_layout;
  args.num_seqs = step_->num_seqs;
  args.total_tokens = N;
  args.max_seq_tokens = step_->longest;  // the value the scratch was sized with (plan_step)
  args.scale = scale;
  // The backend normalises q and k in float32, as transformers does and as the decode step does.
  args.flags = DI_GDN_QK_L2NORM;
  args.cu_seqlens = step_->cu_seqlens;
  args.q = q.data();
  args.k = k.data();
  args.v = v.data();
  args.g = g.as<float>();
  args.beta = beta.as<float>();
  args.initial_state = recurrent_pool(gdn_layer);
  args.final_state = recurrent_pool(gdn_layer);
  args.state_indices = step_->seq_slot;
  args.out = out.data();
  const int status = gdn_backend_->run(&args, gdn_scratch_.data(), gdn_scratch_.size(),
                                       reinterpret_cast<di_gdn_stream>(stream()));
  DI_CHECK(status == DI_GDN_OK, "GDN prefill backend '{}' failed with status {} on {} sequences of {} tokens",
           gdn_backend_->name, status, step_->num_seqs, N);
  return out;
}

Tensor CudaOps::gated_rms_norm(const Tensor& o, const Tensor& z, const TensorView& weight, double eps) {
  check_same_shape(o, z, "gated_rms_norm");
  const int64_t dim = weight.numel();
  Tensor y = new_tensor(o.shape(), DType::bf16);
  kernels::GatedRmsNormParams p{.x = o.data(), .z = z.data(), .weight = device_param_f32(weight, "gated norm"),
                                .out = y.data(), .rows = o.numel() / dim, .dim = dim, .eps = float(eps)};
  check_launch(kernels::launch_gated_rms_norm(p, stream()), "gated_rms_norm");
  return y;
}

void CudaOps::split_q_gate(const Tensor& q_and_gate, int64_t head_dim, Tensor& q, Tensor& gate) {
  const int64_t width = q_and_gate.dim(-1), N = q_and_gate.numel() / width, heads = width / (2 * head_dim);
  DI_CHECK(heads * 2 * head_dim == width, "split_q_gate: width {} is not heads x 2 x {}", width, head_dim);
  q = new_tensor({N, heads * head_dim}, DType::bf16);
  gate = new_tensor({N, heads * head_dim}, DType::bf16);
  check_launch(kernels::launch_split_q_gate(q_and_gate.data(), N, heads, head_dim, q.data(), gate.data(), stream()),
               "split_q_gate");
}

void CudaOps::attention_qk_norm(const Tensor& q_and_gate, const Tensor& k_proj, const TensorView& q_norm,
                                const TensorView& k_norm, double eps, int64_t head_dim, Tensor& q, Tensor& gate,
                                Tensor& k) {
  check_cuda_tensor(q_and_gate, DType::bf16, "attention_qk_norm input");
  check_cuda_tensor(k_proj, DType::bf16, "attention_qk_norm input");
  const int64_t width = q_and_gate.dim(-1), N = q_and_gate.numel() / width, Hq = width / (2 * head_dim);
  const int64_t Hkv = k_proj.numel() / (N * head_dim);
  DI_CHECK(Hq * 2 * head_dim == width, "attention_qk_norm: width {} is not heads x 2 x {}", width, head_dim);
  DI_CHECK(Hkv * N * head_dim == k_proj.numel(), "attention_qk_norm: k {} is not {} tokens of heads of {}",
           shape_str(k_proj.shape()), N, head_dim);
  DI_CHECK(q_norm.numel() == head_dim && k_norm.numel() == head_dim,
           "attention_qk_norm: norm weights of {} and {} elements for heads of {}", q_norm.numel(), k_norm.numel(),
           head_dim);
  q = new_tensor({N * Hq, head_dim}, DType::bf16);
  gate = new_tensor({N, Hq * head_dim}, DType::bf16);
  k = new_tensor({N * Hkv, head_dim}, DType::bf16);
  kernels::AttentionQkNormParams p{.q_and_gate = q_and_gate.data(), .k = k_proj.data(),
                                   .q_weight = device_param_f32(q_norm, "q_norm"),
                                   .k_weight = device_param_f32(k_norm, "k_norm"), .q_out = q.data(),
                                   .gate_out = gate.data(), .k_out = k.data(), .tokens = N, .q_heads = Hq,
                                   .k_heads = Hkv, .head_dim = head_dim, .eps = float(eps)};
  check_launch(kernels::launch_attention_qk_norm(p, stream()), "attention_qk_norm");
}

void CudaOps::rope(Tensor& q, Tensor& k, const BatchPlan& plan, int64_t head_dim, int64_t rotary_dim, double theta) {
  check_step(plan, "rope");
  const int64_t N = plan.n_tokens();
  kernels::RopeParams p{.x = q.data(), .positions = step_->positions, .tokens = N,
                        .heads = q.numel() / (N * head_dim), .x2 = k.data(), .heads2 = k.numel() / (N * head_dim),
                        .head_dim = head_dim, .rotary_dim = rotary_dim, .theta = float(theta)};
  check_launch(kernels::launch_rope(p, stream()), "rope");
}

Tensor CudaOps::attention(const Tensor& q, const Tensor& k, const Tensor& v, const BatchPlan& plan,
                          int64_t attn_layer) {
  check_step(plan, "attention");
  const ModelConfig& c = config_;
  const int64_t D = c.head_dim, Hq = c.num_attention_heads, Hkv = c.num_kv_heads, N = step_->n_tokens;
  DI_CHECK(attn_layer >= 0 && attn_layer < attn_layers_, "attention: layer {} of {}", attn_layer, attn_layers_);
  const size_t layer_elems = size_t(kv_blocks_ * options_.kv_block_size * Hkv * D);
  uint16_t* k_cache = k_cache_.data() + size_t(attn_layer) * layer_elems;
  uint16_t* v_cache = v_cache_.data() + size_t(attn_layer) * layer_elems;
  attention::PagedKvCache kv{.k = k_cache, .v = v_cache, .block_table = step_->block_table,
                             .block_size = options_.kv_block_size, .max_blocks_per_seq = step_->max_blocks,
                             .num_kv_heads = int(Hkv), .head_dim = int(D)};
  // Append this step's keys and values, then attend over the cache.
  attention::KvAppendParams append{.cache = kv, .k = static_cast<const uint16_t*>(k.data()),
                                   .v = static_cast<const uint16_t*>(v.data()), .token_seq = step_->token_seq,
                                   .token_pos = step_->positions, .num_tokens = int(N)};
  check_launch(attention::launch_kv_append(append, stream()), "kv_append");
  Tensor out = new_tensor({N, Hq * D}, DType::bf16);
  const float scale = float(1.0 / std::sqrt(double(D)));
  if (step_->decode) {
    attention::DecodeParams p{.cache = kv, .q = static_cast<const uint16_t*>(q.data()), .out = out.as<uint16_t>(),
                              .kv_lens = step_->kv_lens, .num_seqs = step_->num_seqs, .num_q_heads = int(Hq),
                              .num_splits = step_->decode_splits, .scale = scale,
                              .workspace = step_->attention_workspace.data(),
                              .workspace_bytes = step_->attention_workspace.nbytes()};
    if (const std::string why = attention::decode_params_error(p); !why.empty()) fail("decode attention: {}", why);
    check_launch(attention::launch_decode_attention(p, stream()), "decode_attention");
  } else {
    attention::PrefillParams p{.cache = kv, .q = static_cast<const uint16_t*>(q.data()), .out = out.as<uint16_t>(),
                               .cu_seqlens_q = step_->cu_seqlens, .kv_lens = step_->kv_lens,
                               .tile_seq = step_->tile_seq, .tile_q_start = step_->tile_q_start,
                               .num_tiles = step_->attention_plan.num_tiles(), .num_q_heads = int(Hq),
                               .scale = scale};
    if (const std::string why = attention::prefill_params_error(p); !why.empty()) fail("prefill attention: {}", why);
    check_launch(attention::launch_prefill_attention(p, stream()), "prefill_attention");
  }
  return out;
}

Tensor CudaOps::sigmoid_gate(const Tensor& x, const Tensor& gate) {
  return elementwise(x, gate, "sigmoid_gate", kernels::launch_sigmoid_gate);
}

std::vector<float> CudaOps::to_host(const Tensor& x) {
  DI_CHECK(x.defined() && x.device() == Device::cuda, "CudaOps::to_host: not a device tensor");
  std::vector<float> host(size_t(x.numel()));
  if (x.dtype() == DType::f32) {
    DI_CUDA_CHECK(cudaMemcpyAsync(host.data(), x.data(), x.nbytes(), cudaMemcpyDeviceToHost, stream()));
  } else {
    DI_CHECK(x.dtype() == DType::bf16, "CudaOps::to_host: dtype {} not supported", dtype_name(x.dtype()));
    Tensor f = new_tensor(x.shape(), DType::f32);
    check_launch(kernels::launch_bf16_to_f32(x.data(), x.numel(), f.as<float>(), stream()), "bf16_to_f32");
    DI_CUDA_CHECK(cudaMemcpyAsync(host.data(), f.data(), f.nbytes(), cudaMemcpyDeviceToHost, stream()));
  }
  DI_CUDA_CHECK(cudaStreamSynchronize(stream()));
  return host;
}

std::vector<int32_t> CudaOps::sample(const Tensor& logits, const std::vector<sampling::SamplingRow>& rows) {
  DI_CHECK(logits.defined() && logits.device() == Device::cuda && logits.shape().size() == 2 &&
               (logits.dtype() == DType::bf16 || logits.dtype() == DType::f32),
           "CudaOps::sample: logits must be a [rows, vocab] bf16 or f32 device tensor");
  const int64_t n = logits.dim(0), vocab = logits.dim(1);
  DI_CHECK(int64_t(rows.size()) == n, "CudaOps::sample: {} sampling rows for {} rows of logits", rows.size(), n);
  Tensor params = new_tensor({int64_t(rows.size() * sizeof(sampling::SamplingRow))}, DType::u8);
  DI_CUDA_CHECK(cudaMemcpyAsync(params.data(), rows.data(), params.nbytes(), cudaMemcpyHostToDevice, stream()));
  const size_t workspace_bytes = sampling::sample_workspace_bytes(int32_t(n), int32_t(vocab));
  Tensor workspace = new_tensor({int64_t(std::max<size_t>(workspace_bytes, 1))}, DType::u8);
  Tensor tokens = new_tensor({n}, DType::i32);
  sampling::SampleParams p{.logits = logits.data(), .logits_bf16 = logits.dtype() == DType::bf16,
                           .rows = int32_t(n), .vocab = int32_t(vocab),
                           .row_params = static_cast<const sampling::SamplingRow*>(params.data()),
                           .out_tokens = tokens.as<int32_t>(), .workspace = workspace.data(),
                           .workspace_bytes = workspace_bytes};
  check_launch(sampling::launch_sample(p, stream()), "sample");
  std::vector<int32_t> out(static_cast<size_t>(n));
  DI_CUDA_CHECK(cudaMemcpyAsync(out.data(), tokens.data(), out.size() * 4, cudaMemcpyDeviceToHost, stream()));
  DI_CUDA_CHECK(cudaStreamSynchronize(stream()));
  return out;
}

std::vector<float> CudaOps::conv_state(int slot, int64_t gdn_layer) {
  DI_CHECK(slot >= 0 && slot < options_.max_slots && gdn_layer >= 0 && gdn_layer < gdn_layers_,
           "conv_state: slot {} / GDN layer {} out of range", slot, gdn_layer);
  const size_t n = size_t(config_.gdn_conv_dim() * config_.linear_conv_kernel_dim);
  std::vector<uint16_t> bits(n);
  DI_CUDA_CHECK(cudaStreamSynchronize(stream()));
  DI_CUDA_CHECK(cudaMemcpy(bits.data(), static_cast<uint16_t*>(conv_pool(gdn_layer)) + size_t(slot) * n, n * 2,
                           cudaMemcpyDeviceToHost));
  std::vector<float> out(n);
  for (size_t i = 0; i < n; ++i) out[i] = bf16_to_f32(bits[i]);
  return out;
}

std::vector<float> CudaOps::recurrent_state(int slot, int64_t gdn_layer) {
  DI_CHECK(slot >= 0 && slot < options_.max_slots && gdn_layer >= 0 && gdn_layer < gdn_layers_,
           "recurrent_state: slot {} / GDN layer {} out of range", slot, gdn_layer);
  const ModelConfig& c = config_;
  const int64_t Hv = c.linear_num_value_heads, dk = c.linear_key_head_dim, dv = c.linear_value_head_dim;
  const size_t n = size_t(Hv * dk * dv);
  std::vector<float> raw(n);
  DI_CUDA_CHECK(cudaStreamSynchronize(stream()));
  DI_CUDA_CHECK(cudaMemcpy(raw.data(), recurrent_pool(gdn_layer) + size_t(slot) * n, n * 4, cudaMemcpyDeviceToHost));
  if (options_.state_layout == DI_GDN_STATE_KV) return raw;
  std::vector<float> kv(n);  // [H, V, K] -> [H, K, V]
  for (int64_t h = 0; h < Hv; ++h)
    for (int64_t i = 0; i < dk; ++i)
      for (int64_t j = 0; j < dv; ++j) kv[size_t((h * dk + i) * dv + j)] = raw[size_t((h * dv + j) * dk + i)];
  return kv;
}

}  // namespace di
