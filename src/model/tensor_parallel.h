#pragma once
// Tensor parallelism: how the model is split over `size` ranks (one GPU each), and each rank's
// slice of the weights.
//
// A rank holds a contiguous run of every kind of head, and is itself a Qwen3.5 model with fewer
// heads (rank_config), so that every kernel runs on it unchanged:
//   attention    q heads Hq/size; KV heads Hkv/size, or, when size > Hkv, the one KV head its q heads
//                read (replicated over size/Hkv ranks); o_proj takes the matching input columns
//   GDN          value heads Hv/size with their key heads (Hk/size, or the one key head they read,
//                replicated, when size > Hk); conv channels, A_log, dt_bias, z, a, b follow their
//                heads; out_proj takes the matching input columns
//   MLP          gate and up by rows (intermediate/size), down by the matching columns
//   vocabulary   the embedding and lm_head by rows (vocab/size each)
//   norms        replicated
// The three output projections (o_proj, out_proj, down_proj) then hold a slice of their input
// features: their partial sums are added over the ranks (Ops::linear_all_reduce). The embedding
// rows of other ranks read as zero and an all-reduce joins them; the lm_head's logits are gathered.
// Value heads map to key heads in groups (value head h reads key head h / (Hv/Hk), QWEN35.md step
// 5), and q heads to KV heads likewise, which is what lets a contiguous run of heads travel together.
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "model/config.h"
#include "model/weights.h"

namespace di {

// Empty when the model splits over `size` ranks; otherwise the reason, naming the count that does
// not divide.
std::string tensor_parallel_unsupported(const ModelConfig& config, int size);

// The configuration each rank sees: heads and the intermediate size divided (the vocabulary size
// stays the model's: token ids and logits are the whole vocabulary's). Fails with the reason above.
ModelConfig rank_config(const ModelConfig& config, int size);

// One rank's weights: sliced tensors are copies it owns; replicated ones (the norms) stay views
// into the checkpoint, which must outlive it.
struct RankWeights {
  int size = 1, rank = 0;
  ModelConfig config;    // rank_config(model config, size)
  ModelWeights weights;  // shapes as config describes, the vocabulary tensors [vocab/size, hidden]
  int64_t vocab_begin = 0;  // the first token id of its vocabulary slice
  uint64_t owned_bytes = 0;

 private:
  friend RankWeights shard_weights(const ModelConfig&, const ModelWeights&, int, int);
  std::vector<std::unique_ptr<uint8_t[]>> storage_;
};

RankWeights shard_weights(const ModelConfig& config, const ModelWeights& weights, int size, int rank);

// Bytes of a rank's weights on the device: its slices plus the replicated tensors.
uint64_t rank_weight_bytes(const RankWeights& rank);

}  // namespace di
