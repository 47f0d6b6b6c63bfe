#include "model/tensor_parallel.h"

#include <cstring>

#include <fmt/format.h>

#include "core/error.h"

namespace di {

namespace {

// A run of heads (or rows) along one axis.
struct Run {
  int64_t begin = 0, count = 0;
};

// The heads of `total` a rank holds: an equal share, or, with more ranks than heads, the one head
// it shares with size/total - 1 others.
Run head_run(int64_t total, int size, int rank) {
  if (total % size == 0) return {rank * (total / size), total / size};
  return {int64_t(rank) * total / size, 1};
}

Run scaled(Run r, int64_t width, int64_t offset = 0) { return {offset + r.begin * width, r.count * width}; }

}  // namespace

std::string tensor_parallel_unsupported(const ModelConfig& c, int size) {
  if (size < 1) return fmt::format("tensor-parallel size {} is not a positive count", size);
  auto divides = [&](int64_t n) { return n % size == 0; };
  auto divides_or_multiple = [&](int64_t n) { return n % size == 0 || size % n == 0; };
  if (!divides(c.num_attention_heads))
    return fmt::format("tensor-parallel size {} does not divide the {} attention heads", size, c.num_attention_heads);
  if (!divides_or_multiple(c.num_kv_heads))
    return fmt::format("tensor-parallel size {} neither divides the {} KV heads nor is a multiple of them", size,
                       c.num_kv_heads);
  if (!divides(c.linear_num_value_heads))
    return fmt::format("tensor-parallel size {} does not divide the {} GDN value heads", size,
                       c.linear_num_value_heads);
  if (!divides_or_multiple(c.linear_num_key_heads))
    return fmt::format("tensor-parallel size {} neither divides the {} GDN key heads nor is a multiple of them", size,
                       c.linear_num_key_heads);
  if (!divides(c.intermediate_size))
    return fmt::format("tensor-parallel size {} does not divide the intermediate size {}", size, c.intermediate_size);
  if (!divides(c.vocab_size))
    return fmt::format("tensor-parallel size {} does not divide the vocabulary of {}", size, c.vocab_size);
  return "";
}

ModelConfig rank_config(const ModelConfig& c, int size) {
  if (const std::string why = tensor_parallel_unsupported(c, size); !why.empty()) fail("{}", why);
  ModelConfig r = c;
  r.num_attention_heads = c.num_attention_heads / size;
  r.num_kv_heads = head_run(c.num_kv_heads, size, 0).count;
  r.linear_num_value_heads = c.linear_num_value_heads / size;
  r.linear_num_key_heads = head_run(c.linear_num_key_heads, size, 0).count;
  r.intermediate_size = c.intermediate_size / size;
  return r;
}

RankWeights shard_weights(const ModelConfig& c, const ModelWeights& w, int size, int rank) {
  DI_CHECK(rank >= 0 && rank < size, "shard_weights: rank {} of {}", rank, size);
  RankWeights out;
  out.size = size;
  out.rank = rank;
  out.config = rank_config(c, size);

  auto own = [&](size_t bytes) {
    out.storage_.push_back(std::make_unique<uint8_t[]>(bytes));
    out.owned_bytes += bytes;
    return out.storage_.back().get();
  };
  // Rows (along the first axis) of t, the runs laid end to end.
  auto rows = [&](const TensorView& t, std::initializer_list<Run> runs) {
    const size_t row_bytes = t.nbytes() / size_t(t.dim(0));
    int64_t n = 0;
    for (const Run& r : runs) {
      DI_CHECK(r.begin >= 0 && r.begin + r.count <= t.dim(0), "shard_weights: rows [{}, {}) of {}", r.begin,
               r.begin + r.count, shape_str(t.shape));
      n += r.count;
    }
    uint8_t* data = own(size_t(n) * row_bytes);
    uint8_t* dst = data;
    for (const Run& r : runs) {
      std::memcpy(dst, static_cast<const uint8_t*>(t.data) + size_t(r.begin) * row_bytes, size_t(r.count) * row_bytes);
      dst += size_t(r.count) * row_bytes;
    }
    TensorView v = t;
    v.data = data;
    v.shape[0] = n;
    return v;
  };
  // Columns (along the last axis) of a matrix.
  auto columns = [&](const TensorView& t, Run r) {
    DI_CHECK(t.shape.size() == 2 && r.begin + r.count <= t.dim(1), "shard_weights: columns [{}, {}) of {}", r.begin,
             r.begin + r.count, shape_str(t.shape));
    const size_t elem = dtype_size(t.dtype), in_row = size_t(t.dim(1)) * elem, out_row = size_t(r.count) * elem;
    uint8_t* data = own(size_t(t.dim(0)) * out_row);
    for (int64_t i = 0; i < t.dim(0); ++i)
      std::memcpy(data + size_t(i) * out_row, static_cast<const uint8_t*>(t.data) + size_t(i) * in_row +
                                                  size_t(r.begin) * elem, out_row);
    TensorView v = t;
    v.data = data;
    v.shape[1] = r.count;
    return v;
  };

  const int64_t D = c.head_dim, dk = c.linear_key_head_dim, dv = c.linear_value_head_dim;
  const Run q = head_run(c.num_attention_heads, size, rank), kv = head_run(c.num_kv_heads, size, rank);
  const Run vh = head_run(c.linear_num_value_heads, size, rank), kh = head_run(c.linear_num_key_heads, size, rank);
  const Run inner = head_run(c.intermediate_size, size, rank), vocab = head_run(c.vocab_size, size, rank);
  out.vocab_begin = vocab.begin;

  ModelWeights& r = out.weights;
  r.prefix = w.prefix;
  r.skipped_tensors = w.skipped_tensors;
  r.parameter_count = w.parameter_count;
  r.embed_tokens = rows(w.embed_tokens, {vocab});
  r.lm_head = w.lm_head.data == w.embed_tokens.data ? r.embed_tokens : rows(w.lm_head, {vocab});
  r.final_norm = w.final_norm;
  for (const LayerWeights& L : w.layers) {
    LayerWeights R;
    R.kind = L.kind;
    R.input_layernorm = L.input_layernorm;
    R.post_attention_layernorm = L.post_attention_layernorm;
    if (L.kind == LayerKind::linear_attention) {
      const GdnWeights& G = L.gdn;
      // Rows [Q | K | V] of the projection and of the conv channels: each part's slice.
      const Run q_rows = scaled(kh, dk), k_rows = scaled(kh, dk, c.gdn_key_dim()),
                v_rows = scaled(vh, dv, 2 * c.gdn_key_dim());
      R.gdn.in_proj_qkv = rows(G.in_proj_qkv, {q_rows, k_rows, v_rows});
      R.gdn.conv1d = rows(G.conv1d, {q_rows, k_rows, v_rows});
      R.gdn.in_proj_z = rows(G.in_proj_z, {scaled(vh, dv)});
      R.gdn.in_proj_b = rows(G.in_proj_b, {vh});
      R.gdn.in_proj_a = rows(G.in_proj_a, {vh});
      R.gdn.A_log = rows(G.A_log, {vh});
      R.gdn.dt_bias = rows(G.dt_bias, {vh});
      R.gdn.norm = G.norm;
      R.gdn.out_proj = columns(G.out_proj, scaled(vh, dv));
    } else {
      const AttentionWeights& A = L.attn;
      R.attn.q_proj = rows(A.q_proj, {scaled(q, 2 * D)});  // per head [q | gate]
      R.attn.k_proj = rows(A.k_proj, {scaled(kv, D)});
      R.attn.v_proj = rows(A.v_proj, {scaled(kv, D)});
      R.attn.o_proj = columns(A.o_proj, scaled(q, D));
      R.attn.q_norm = A.q_norm;
      R.attn.k_norm = A.k_norm;
    }
    R.mlp.gate_proj = rows(L.mlp.gate_proj, {inner});
    R.mlp.up_proj = rows(L.mlp.up_proj, {inner});
    R.mlp.down_proj = columns(L.mlp.down_proj, inner);
    r.layers.push_back(std::move(R));
  }
  return out;
}

uint64_t rank_weight_bytes(const RankWeights& rank) {
  const ModelWeights& w = rank.weights;
  uint64_t bytes = w.embed_tokens.nbytes() + w.final_norm.nbytes();
  if (w.lm_head.data != w.embed_tokens.data) bytes += w.lm_head.nbytes();
  for (const LayerWeights& L : w.layers) {
    bytes += L.input_layernorm.nbytes() + L.post_attention_layernorm.nbytes();
    for (const TensorView* t : {&L.mlp.gate_proj, &L.mlp.up_proj, &L.mlp.down_proj}) bytes += t->nbytes();
    if (L.kind == LayerKind::linear_attention) {
      const GdnWeights& G = L.gdn;
      for (const TensorView* t : {&G.in_proj_qkv, &G.in_proj_z, &G.in_proj_b, &G.in_proj_a, &G.conv1d, &G.A_log,
                                  &G.dt_bias, &G.norm, &G.out_proj})
        bytes += t->nbytes();
    } else {
      const AttentionWeights& A = L.attn;
      for (const TensorView* t : {&A.q_proj, &A.k_proj, &A.v_proj, &A.o_proj, &A.q_norm, &A.k_norm})
        bytes += t->nbytes();
    }
  }
  return bytes;
}

}  // namespace di
