#pragma once
// Sizing the two kinds of per-sequence memory of a hybrid model together from one GPU memory budget:
// the state pool (one slot per running sequence: conv state and float32 recurrent state of every GDN
// layer) and the paged KV cache of the full-attention layers (blocks of block_size tokens).
//
// The rule (plan_memory):
//   budget     = floor(utilization * device_total)            (--gpu-memory-utilization)
//   available  = budget - resident (weights, workspaces) - activation_reserve
//   one_seq    = slot_bytes + blocks(max_model_len) * block_bytes
//   refuse (di::Error naming the numbers) when available < one_seq: not one sequence of
//   max_model_len tokens would fit;
//   slots      = min(max_num_seqs, (available - blocks(max_model_len) * block_bytes) / slot_bytes):
//   the state pool is sized for max_num_seqs, lowered only as far as needed to leave KV room for one
//   sequence of max_model_len tokens (describe() says when it was lowered);
//   kv_blocks  = (available - slots * slot_bytes) / block_bytes: everything else is KV cache.
// The KV cache is not sized for every slot at max_model_len (that would waste most of it on typical
// lengths); the scheduler preempts when blocks run out.
#include <cstdint>
#include <string>

#include "model/config.h"

namespace di {

// Bytes of one state slot: per GDN layer, the bf16 conv state [conv_dim, conv_columns] with
// conv_dim = 2*Hk*K + Hv*V, plus the f32 recurrent state [Hv, K, V]. conv_columns 0 means
// kernel - 1, what the recurrence needs (CudaOps today keeps kernel columns: pass that to size it).
uint64_t state_slot_bytes(const ModelConfig& config, int64_t conv_columns = 0);
// Bytes of one KV block: per full-attention layer, K and V of block_size tokens, bf16
// [block_size, kv_heads, head_dim] each.
uint64_t kv_block_bytes(const ModelConfig& config, int64_t block_size);

struct MemoryBudget {
  uint64_t device_total_bytes = 0;        // the GPU's memory
  double utilization = 0.9;               // fraction of device_total the engine may use, 0 < u <= 1
  uint64_t resident_bytes = 0;            // already taken by the engine: weights, workspaces
  uint64_t activation_reserve_bytes = 0;  // left free for the forward pass's activations
  int64_t max_num_seqs = 64;              // sequences running at once (state slots wanted)
  int64_t max_model_len = 0;              // tokens one sequence may hold (prompt + output)
  int64_t block_size = 64;                // tokens per KV block
  int64_t conv_columns = 0;               // see state_slot_bytes
};

struct MemoryPlan {
  uint64_t device_total_bytes = 0;
  double utilization = 0;
  uint64_t budget_bytes = 0;     // floor(utilization * device_total)
  uint64_t resident_bytes = 0;
  uint64_t activation_reserve_bytes = 0;
  uint64_t available_bytes = 0;  // budget - resident - reserve: what the two pools share
  uint64_t slot_bytes = 0;
  uint64_t block_bytes = 0;
  int64_t block_size = 0;
  int64_t max_model_len = 0;
  int64_t max_num_seqs = 0;      // as asked
  int64_t num_state_slots = 0;   // as planned (<= max_num_seqs)
  int64_t num_kv_blocks = 0;

  uint64_t state_bytes() const { return uint64_t(num_state_slots) * slot_bytes; }
  uint64_t kv_bytes() const { return uint64_t(num_kv_blocks) * block_bytes; }
  int64_t kv_tokens() const { return num_kv_blocks * block_size; }
  // How many sequences of max_model_len tokens the KV cache holds at once.
  int64_t full_length_sequences() const;
  // One line for start-up, e.g. "memory: 90% of 80.0 GiB = 72.0 GiB; ... 64 sequences ..., 1,931,008
  // tokens of KV cache ...".
  std::string describe() const;
};

MemoryPlan plan_memory(const ModelConfig& config, const MemoryBudget& budget);

}  // namespace di
