#include "engine/memory_plan.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <limits>

#include "core/error.h"

namespace di {
namespace {

constexpr uint64_t kBf16 = 2, kF32 = 4;

std::string gib(uint64_t bytes) { return fmt::format("{:.1f} GiB", double(bytes) / double(1ull << 30)); }
std::string mib(uint64_t bytes) { return fmt::format("{:.1f} MiB", double(bytes) / double(1ull << 20)); }

// 1234567 -> "1,234,567".
std::string grouped(int64_t v) {
  std::string digits = std::to_string(v < 0 ? -v : v), out;
  for (size_t i = 0; i < digits.size(); ++i) {
    if (i > 0 && (digits.size() - i) % 3 == 0) out += ',';
    out += digits[i];
  }
  return v < 0 ? "-" + out : out;
}

int64_t blocks_for(int64_t tokens, int64_t block_size) { return (tokens + block_size - 1) / block_size; }

}  // namespace

uint64_t state_slot_bytes(const ModelConfig& config, int64_t conv_columns) {
  DI_CHECK(conv_columns >= 0, "memory plan: conv_columns must be >= 0, found {}", conv_columns);
  const int64_t columns = conv_columns > 0 ? conv_columns : config.linear_conv_kernel_dim - 1;
  const uint64_t conv = uint64_t(config.gdn_conv_dim()) * uint64_t(columns) * kBf16;
  const uint64_t recurrent = uint64_t(config.linear_num_value_heads) * uint64_t(config.linear_key_head_dim) *
                             uint64_t(config.linear_value_head_dim) * kF32;
  return uint64_t(config.num_layers_of(LayerKind::linear_attention)) * (conv + recurrent);
}

uint64_t kv_block_bytes(const ModelConfig& config, int64_t block_size) {
  DI_CHECK(block_size > 0, "memory plan: block_size must be > 0, found {}", block_size);
  const uint64_t per_layer =
      2 * uint64_t(block_size) * uint64_t(config.num_kv_heads) * uint64_t(config.head_dim) * kBf16;
  return uint64_t(config.num_layers_of(LayerKind::full_attention)) * per_layer;
}

int64_t MemoryPlan::full_length_sequences() const {
  const int64_t per_seq = blocks_for(max_model_len, block_size);
  return per_seq > 0 ? num_kv_blocks / per_seq : 0;
}

std::string MemoryPlan::describe() const {
  std::string s = fmt::format(
      "memory: {:.0f}% of {} = {}; weights and workspaces {}, activation reserve {}; {} sequences ({} of "
      "GDN state each, {} in all); {} tokens of KV cache ({} blocks of {} tokens, {} each, {} in all), room for "
      "{} sequences of max_model_len {}",
      utilization * 100, gib(device_total_bytes), gib(budget_bytes), gib(resident_bytes),
      gib(activation_reserve_bytes), grouped(num_state_slots), mib(slot_bytes), gib(state_bytes()),
      grouped(kv_tokens()), grouped(num_kv_blocks), block_size, mib(block_bytes), gib(kv_bytes()),
      grouped(full_length_sequences()), grouped(max_model_len));
  if (num_state_slots < max_num_seqs)
    s += fmt::format(" (max_num_seqs {} lowered to {} to leave KV room for one sequence of max_model_len)",
                     max_num_seqs, num_state_slots);
  return s;
}

MemoryPlan plan_memory(const ModelConfig& config, const MemoryBudget& b) {
  DI_CHECK(b.utilization > 0 && b.utilization <= 1,
           "memory plan: gpu memory utilization must be in (0, 1], found {}", b.utilization);
  DI_CHECK(b.device_total_bytes > 0, "memory plan: device memory total is 0");
  DI_CHECK(b.max_num_seqs >= 1, "memory plan: max_num_seqs must be >= 1, found {}", b.max_num_seqs);
  DI_CHECK(b.max_model_len >= 1, "memory plan: max_model_len must be >= 1, found {}", b.max_model_len);
  DI_CHECK(b.block_size >= 1, "memory plan: block_size must be >= 1, found {}", b.block_size);

  MemoryPlan p;
  p.device_total_bytes = b.device_total_bytes;
  p.utilization = b.utilization;
  p.budget_bytes = uint64_t(std::floor(b.utilization * double(b.device_total_bytes)));
  p.resident_bytes = b.resident_bytes;
  p.activation_reserve_bytes = b.activation_reserve_bytes;
  p.slot_bytes = state_slot_bytes(config, b.conv_columns);
  p.block_bytes = kv_block_bytes(config, b.block_size);
  p.block_size = b.block_size;
  p.max_model_len = b.max_model_len;
  p.max_num_seqs = b.max_num_seqs;

  const uint64_t taken = b.resident_bytes + b.activation_reserve_bytes;
  if (p.budget_bytes < taken)
    fail("memory plan: the budget of {} bytes ({} x {} bytes of device memory) is smaller than the {} bytes "
         "already resident plus the {} bytes of activation reserve; raise the gpu memory utilization",
         p.budget_bytes, b.utilization, b.device_total_bytes, b.resident_bytes, b.activation_reserve_bytes);
  p.available_bytes = p.budget_bytes - taken;

  const int64_t seq_blocks = blocks_for(b.max_model_len, b.block_size);
  const uint64_t seq_kv_bytes = uint64_t(seq_blocks) * p.block_bytes;
  const uint64_t one_seq = p.slot_bytes + seq_kv_bytes;
  if (p.available_bytes < one_seq)
    fail("memory plan: not even one sequence of max_model_len {} tokens fits: it needs {} bytes ({} of state + {} "
         "of KV in {} blocks of {} tokens) but only {} bytes are available ({} x {} bytes of device memory, less "
         "{} resident and {} activation reserve); lower max_model_len or raise the gpu memory utilization",
         b.max_model_len, one_seq, p.slot_bytes, seq_kv_bytes, seq_blocks, b.block_size, p.available_bytes,
         b.utilization, b.device_total_bytes, b.resident_bytes, b.activation_reserve_bytes);

  const uint64_t for_slots = p.available_bytes - seq_kv_bytes;
  p.num_state_slots =
      p.slot_bytes == 0 ? b.max_num_seqs : int64_t(std::min<uint64_t>(uint64_t(b.max_num_seqs), for_slots / p.slot_bytes));
  const uint64_t for_kv = p.available_bytes - p.state_bytes();
  constexpr int64_t kMaxBlocks = std::numeric_limits<int32_t>::max();
  p.num_kv_blocks = p.block_bytes == 0 ? p.num_state_slots * seq_blocks  // no attention layers: blocks cost nothing
                                       : int64_t(std::min<uint64_t>(kMaxBlocks, for_kv / p.block_bytes));
  return p;
}

}  // namespace di
