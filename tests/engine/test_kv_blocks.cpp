// The host-side accounting of the paged KV cache and of the state slots.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <random>
#include <set>

#include "engine/kv_blocks.h"
#include "engine/state_slots.h"
#include "support/expect_error.h"
#include "support/seed.h"

namespace di {
namespace {

using testing::throws_error_with;

TEST(KvBlocks, AllocatesWholeBlocksForTokens) {
  KvBlockAllocator kv(10, 4);
  EXPECT_EQ(kv.free_blocks(), 10);
  ASSERT_TRUE(kv.append(1, 5));  // 5 tokens: 2 blocks
  EXPECT_EQ(kv.block_table(1).size(), 2u);
  EXPECT_EQ(kv.tokens(1), 5);
  EXPECT_EQ(kv.free_blocks(), 8);
  ASSERT_TRUE(kv.append(1, 3));  // 8 tokens: still 2 blocks
  EXPECT_EQ(kv.block_table(1).size(), 2u);
  EXPECT_EQ(kv.free_blocks(), 8);
  EXPECT_EQ(kv.extra_blocks_for(1, 1), 1);
  ASSERT_TRUE(kv.append(1, 1));  // 9 tokens: 3 blocks
  EXPECT_EQ(kv.block_table(1).size(), 3u);
  ASSERT_TRUE(kv.append(2, 4));
  EXPECT_EQ(kv.free_blocks(), 6);
  EXPECT_EQ(kv.used_blocks(), 4);
  std::set<int32_t> ids(kv.block_table(1).begin(), kv.block_table(1).end());
  ids.insert(kv.block_table(2).begin(), kv.block_table(2).end());
  EXPECT_EQ(ids.size(), 4u) << "a block was handed out twice";
  EXPECT_NO_THROW(kv.check_consistency());
}

TEST(KvBlocks, UnsatisfiableRequestChangesNothing) {
  KvBlockAllocator kv(4, 64);
  ASSERT_TRUE(kv.append(7, 100));  // 2 blocks
  const std::vector<int32_t> before = kv.block_table(7);
  EXPECT_FALSE(kv.can_append(7, 3 * 64));
  EXPECT_FALSE(kv.append(7, 3 * 64));  // needs 3 more blocks (2 + 3 > 4)
  EXPECT_EQ(kv.block_table(7), before);
  EXPECT_EQ(kv.tokens(7), 100);
  EXPECT_EQ(kv.free_blocks(), 2);
  EXPECT_FALSE(kv.append(8, 3 * 64 + 1));  // a new sequence that does not fit is not created
  EXPECT_FALSE(kv.has(8));
  EXPECT_EQ(kv.free_blocks(), 2);
  EXPECT_TRUE(kv.append(7, 28 + 2 * 64));  // exactly the room left
  EXPECT_EQ(kv.free_blocks(), 0);
  EXPECT_EQ(kv.appendable_tokens(7), 0);
}

TEST(KvBlocks, AppendableTokensCountsTheLastBlocksRoom) {
  KvBlockAllocator kv(3, 16);
  EXPECT_EQ(kv.appendable_tokens(1), 48);
  ASSERT_TRUE(kv.append(1, 10));
  EXPECT_EQ(kv.appendable_tokens(1), 6 + 32);
  EXPECT_EQ(kv.appendable_tokens(2), 32);  // another sequence sees only the free blocks
  EXPECT_TRUE(kv.can_append(1, 38));
  EXPECT_FALSE(kv.can_append(1, 39));
}

TEST(KvBlocks, FreeReturnsEveryBlockAndMisuseIsAnError) {
  KvBlockAllocator kv(8, 64);
  ASSERT_TRUE(kv.append(3, 300));
  EXPECT_EQ(kv.free_blocks(), 3);
  kv.free(3);
  EXPECT_EQ(kv.free_blocks(), 8);
  EXPECT_FALSE(kv.has(3));
  EXPECT_TRUE(throws_error_with([&] { kv.free(3); }, {"sequence 3", "already freed"}));
  EXPECT_TRUE(throws_error_with([&] { kv.block_table(9); }, {"sequence 9"}));
  EXPECT_TRUE(throws_error_with([&] { kv.append(1, -1); }, {"-1"}));
  EXPECT_TRUE(throws_error_with([] { KvBlockAllocator(4, 0); }, {"block_size"}));
}

// Random appends and frees against a plain model of what each sequence holds.
TEST(KvBlocks, RandomOperationsKeepTheBooksBalanced) {
  const uint32_t seed = testing::fresh_seed();
  SCOPED_TRACE(testing::seed_trace(seed));
  std::mt19937 rng(seed);
  const int64_t num_blocks = 50, bs = 8;
  KvBlockAllocator kv(num_blocks, bs);
  std::map<int64_t, int64_t> tokens;  // the model
  for (int op = 0; op < 5000; ++op) {
    const int64_t seq = std::uniform_int_distribution<int64_t>(0, 9)(rng);
    if (std::uniform_int_distribution<int>(0, 3)(rng) == 0) {
      if (tokens.count(seq)) {
        kv.free(seq);
        tokens.erase(seq);
      } else {
        EXPECT_FALSE(kv.has(seq));
      }
    } else {
      const int64_t n = std::uniform_int_distribution<int64_t>(0, 40)(rng);
      int64_t used = 0;
      for (const auto& [s, t] : tokens) used += (t + bs - 1) / bs;
      const int64_t have = tokens.count(seq) ? tokens[seq] : 0;
      const int64_t extra = (have + n + bs - 1) / bs - (have + bs - 1) / bs;
      const bool fits = used + extra <= num_blocks;
      ASSERT_EQ(kv.append(seq, n), fits) << "op " << op;
      if (fits) tokens[seq] = have + n;
    }
    int64_t used = 0;
    for (const auto& [s, t] : tokens) {
      ASSERT_EQ(kv.tokens(s), t);
      used += (t + bs - 1) / bs;
    }
    ASSERT_EQ(kv.free_blocks(), num_blocks - used) << "op " << op;
    ASSERT_NO_THROW(kv.check_consistency()) << "op " << op;
  }
  for (const auto& [s, t] : tokens) kv.free(s);
  EXPECT_EQ(kv.free_blocks(), num_blocks);
}

TEST(StatePool, HandsOutEachSlotOnce) {
  StateSlotPool pool(4);
  std::set<int> got;
  for (int i = 0; i < 4; ++i) {
    const std::optional<int> s = pool.try_allocate();
    ASSERT_TRUE(s.has_value());
    EXPECT_GE(*s, 0);
    EXPECT_LT(*s, 4);
    EXPECT_TRUE(pool.in_use(*s));
    got.insert(*s);
  }
  EXPECT_EQ(got.size(), 4u);
  EXPECT_EQ(pool.free_count(), 0);
  EXPECT_FALSE(pool.try_allocate().has_value());
  EXPECT_TRUE(throws_error_with([&] { pool.allocate(); }, {"all 4 slots"}));
  pool.free(2);
  EXPECT_EQ(pool.free_count(), 1);
  EXPECT_FALSE(pool.in_use(2));
  EXPECT_EQ(pool.allocate(), 2);
  for (int s = 0; s < 4; ++s) pool.free(s);
  EXPECT_EQ(pool.free_count(), 4);
  EXPECT_EQ(pool.used_count(), 0);
}

TEST(StatePool, MisuseIsAClearError) {
  StateSlotPool pool(2);
  const int s = pool.allocate();
  pool.free(s);
  EXPECT_TRUE(throws_error_with([&] { pool.free(s); }, {"slot " + std::to_string(s), "double free"}));
  EXPECT_TRUE(throws_error_with([&] { pool.free(2); }, {"slot 2", "out of range"}));
  EXPECT_TRUE(throws_error_with([&] { pool.free(-1); }, {"slot -1", "out of range"}));
  EXPECT_TRUE(throws_error_with([] { StateSlotPool(-3); }, {"capacity", "-3"}));
  EXPECT_EQ(pool.free_count(), 2);
}

}  // namespace
}  // namespace di
