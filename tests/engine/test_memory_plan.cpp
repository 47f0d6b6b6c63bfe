// Sizing the state pool and the KV cache together from the GPU memory budget, with the real
// Qwen3.5-4B geometry (tests/fixtures/configs/qwen35-4b-text-config.json).
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

#include "engine/memory_plan.h"
#include "support/expect_error.h"

namespace di {
namespace {

using testing::throws_error_with;

constexpr uint64_t kGiB = 1ull << 30;

ModelConfig config_4b() {
  const auto path = std::filesystem::path(DI_FIXTURE_DIR) / "configs" / "qwen35-4b-text-config.json";
  std::ifstream in(path);
  EXPECT_TRUE(in.good()) << path;
  return parse_model_config(nlohmann::json::parse(in), path.string());
}

// Per GDN layer: conv_dim = 2*16*128 + 32*128 = 8192; conv state bf16 [8192, 3] = 49,152 bytes;
// recurrent state f32 [32, 128, 128] = 2,097,152 bytes; 24 GDN layers: 51,511,296 bytes =
// 49.125 MiB per sequence, the "about 49 MiB" (and pegainfer's 51,511,296 / 49.1 MiB).
// CudaOps today keeps the conv state kernel-wide ([8192, 4]): 51,904,512 bytes = 49.5 MiB.
// KV: 8 attention layers x K,V x 64 tokens x 4 heads x 256 x 2 bytes = 2 MiB per block, 32 KiB per
// token; one sequence's state costs as much as 1,572 tokens of KV.
TEST(MemoryPlan, Qwen35_4bStateSlotIs49MiBAndKvBlockIs2MiB) {
  const ModelConfig c = config_4b();
  ASSERT_EQ(c.num_layers_of(LayerKind::linear_attention), 24);
  ASSERT_EQ(c.num_layers_of(LayerKind::full_attention), 8);
  EXPECT_EQ(state_slot_bytes(c), 51'511'296u);
  EXPECT_DOUBLE_EQ(double(state_slot_bytes(c)) / double(1 << 20), 49.125);
  EXPECT_EQ(state_slot_bytes(c, /*conv_columns=*/4), 51'904'512u);
  EXPECT_EQ(kv_block_bytes(c, 64), 2'097'152u);
  EXPECT_EQ(kv_block_bytes(c, 64) / 64, 32'768u);
  EXPECT_EQ(kv_block_bytes(c, 16) * 4, kv_block_bytes(c, 64));
}

TEST(MemoryPlan, SlotsForMaxNumSeqsAndTheRestToKvBlocks) {
  const ModelConfig c = config_4b();
  MemoryBudget b;
  b.device_total_bytes = 80 * kGiB;
  b.utilization = 0.9;
  b.resident_bytes = 8 * kGiB;
  b.activation_reserve_bytes = 2 * kGiB;
  b.max_num_seqs = 64;
  b.max_model_len = 32768;
  const MemoryPlan p = plan_memory(c, b);
  // 72 GiB - 8 - 2 = 62 GiB = 66,571,993,088 bytes; 64 slots take 3,296,722,944; the remaining
  // 63,275,270,144 bytes hold 30,172 blocks of 2 MiB = 1,931,008 tokens (58 sequences of 32,768).
  EXPECT_EQ(p.budget_bytes, 72 * kGiB);
  EXPECT_EQ(p.available_bytes, 66'571'993'088u);
  EXPECT_EQ(p.num_state_slots, 64);
  EXPECT_EQ(p.state_bytes(), 3'296'722'944u);
  EXPECT_EQ(p.num_kv_blocks, 30'172);
  EXPECT_EQ(p.kv_tokens(), 1'931'008);
  EXPECT_EQ(p.full_length_sequences(), 58);
  EXPECT_LE(p.state_bytes() + p.kv_bytes(), p.available_bytes);
  EXPECT_GT(p.state_bytes() + p.kv_bytes() + p.block_bytes, p.available_bytes) << "a whole block was left unused";
  const std::string d = p.describe();
  SCOPED_TRACE(d);
  for (const char* word : {"64 sequences", "49.1 MiB", "1,931,008 tokens of KV cache", "30,172 blocks of 64 tokens",
                           "90% of 80.0 GiB", "58 sequences of max_model_len 32,768"})
    EXPECT_NE(d.find(word), std::string::npos) << word;
  EXPECT_EQ(d.find("lowered"), std::string::npos);
}

TEST(MemoryPlan, LowersSlotsToKeepRoomForOneFullLengthSequence) {
  const ModelConfig c = config_4b();
  MemoryBudget b;
  b.device_total_bytes = 16 * kGiB;
  b.utilization = 1.0;
  b.resident_bytes = 8 * kGiB;
  b.max_num_seqs = 64;
  b.max_model_len = 196'608;  // 3,072 blocks = 6 GiB of KV; 2 GiB left hold 41 slots
  const MemoryPlan p = plan_memory(c, b);
  EXPECT_EQ(p.num_state_slots, 41);
  EXPECT_EQ(p.num_kv_blocks, 3088);
  EXPECT_EQ(p.full_length_sequences(), 1);
  EXPECT_NE(p.describe().find("max_num_seqs 64 lowered to 41"), std::string::npos) << p.describe();
}

TEST(MemoryPlan, RefusesWhenNotOneSequenceOfMaxModelLenFits) {
  const ModelConfig c = config_4b();
  MemoryBudget b;
  b.device_total_bytes = 16 * kGiB;
  b.utilization = 0.75;  // 12 GiB
  b.resident_bytes = 8 * kGiB;
  b.max_model_len = 262'144;  // 4,096 blocks = 8 GiB + 49 MiB of state = 8,641,445,888 bytes
  EXPECT_TRUE(throws_error_with([&] { plan_memory(c, b); },
                                {"max_model_len 262144", "8641445888", "4294967296", "4096 blocks"}));
  b.resident_bytes = 13 * kGiB;  // more than the whole budget
  EXPECT_TRUE(throws_error_with([&] { plan_memory(c, b); }, {"12884901888", "13958643712", "resident"}));
}

TEST(MemoryPlan, RejectsAnInvalidUtilization) {
  const ModelConfig c = config_4b();
  MemoryBudget b;
  b.device_total_bytes = 80 * kGiB;
  b.max_model_len = 4096;
  for (double u : {0.0, -0.5, 1.01}) {
    b.utilization = u;
    EXPECT_TRUE(throws_error_with([&] { plan_memory(c, b); }, {"utilization", fmt::format("{}", u)}));
  }
  b.utilization = 1.0;
  EXPECT_EQ(plan_memory(c, b).budget_bytes, 80 * kGiB);
}

}  // namespace
}  // namespace di
