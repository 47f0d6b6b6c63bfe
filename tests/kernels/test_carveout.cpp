// The carveout the weight-streaming kernels ask for (kernels/carveout.h): the least shared memory that
// keeps as many blocks on an SM as their registers allow.
#include <gtest/gtest.h>

#include "kernels/carveout.h"

namespace di::kernels {
namespace {

// An H200's SM: 64 K registers, 2,048 threads, at most 228 KB of shared memory.
CarveoutQuery h200(int regs, int threads, size_t static_smem) {
  return {.regs_per_thread = regs, .block_threads = threads, .static_smem = static_smem, .regs_per_sm = 65536,
          .threads_per_sm = 2048, .max_smem_per_sm = 233472};
}

// The shared memory a percentage gives at least (the driver rounds up to a size it supports).
size_t smem_of(const CarveoutQuery& q, int percent) { return size_t(q.max_smem_per_sm) * size_t(percent) / 100; }

TEST(Carveout, BlocksFollowTheRegistersInWholeAllocationUnits) {
  // 116 registers a thread round up to 3,840 a warp: two blocks of 8 warps (the resident 16-row kernel).
  EXPECT_EQ(blocks_by_registers(h200(116, 256, 9216)), 2);
  // 78 a thread round up to 80: 2,560 a warp, three blocks of 8 warps (the one-tile kernel up to 8 rows).
  EXPECT_EQ(blocks_by_registers(h200(78, 256, 4608)), 3);
  // 81 rounds up to 88 a thread, so three blocks no longer fit.
  EXPECT_EQ(blocks_by_registers(h200(81, 256, 4608)), 2);
  // Threads bound it where registers do not; never more than 32 and never fewer than 1.
  EXPECT_EQ(blocks_by_registers(h200(16, 1024, 0)), 2);
  EXPECT_EQ(blocks_by_registers(h200(8, 32, 0)), 32);
  EXPECT_EQ(blocks_by_registers(h200(255, 1024, 0)), 1);
}

TEST(Carveout, TheLeastSharedMemoryThatHoldsThoseBlocks) {
  for (const CarveoutQuery& q : {h200(116, 256, 9216), h200(78, 256, 4608), h200(40, 128, 1536), h200(64, 256, 0),
                                 h200(32, 512, 48 * 1024), h200(255, 1024, 200 * 1024)}) {
    SCOPED_TRACE("registers " + std::to_string(q.regs_per_thread) + " threads " + std::to_string(q.block_threads) +
                 " static " + std::to_string(q.static_smem));
    const int percent = least_shared_memory_percent(q);
    const size_t needed = size_t(blocks_by_registers(q)) * (q.static_smem + kSharedMemoryReservedPerBlock);
    ASSERT_GE(percent, 0);
    ASSERT_LE(percent, 100);
    if (needed <= size_t(q.max_smem_per_sm)) {
      EXPECT_GE(smem_of(q, percent), needed) << "the blocks must still fit";
      if (percent > 0) {
        EXPECT_LT(smem_of(q, percent - 1), needed) << "one percent less would do";
      }
    } else {
      EXPECT_EQ(percent, 100) << "more than the SM has: the most it can give";
    }
  }
  // The two plain small-batch kernels' figures: two blocks of 9,216 bytes and 1 KB reserved each in 9% of
  // 228 KB, three of 4,608 in 8%.
  EXPECT_EQ(least_shared_memory_percent(h200(116, 256, 9216)), 9);
  EXPECT_EQ(least_shared_memory_percent(h200(78, 256, 4608)), 8);
}

TEST(Carveout, AStagedLaunchCountsItsDynamicSharedMemory) {
  // The one-tile kernel with an RMS norm on the way in: 4,672 static bytes, and one row of K = 2,560
  // staged (321 chunks of 16 bytes) or two. Three blocks of (4,672 + 5,136 + 1,024) bytes take 14% of
  // 228 KB; with two rows staged 21%.
  CarveoutQuery one_row = h200(78, 256, 4672), two_rows = one_row;
  one_row.dynamic_smem = 321 * 16;
  two_rows.dynamic_smem = 2 * 321 * 16;
  EXPECT_EQ(least_shared_memory_percent(one_row), 14);
  EXPECT_EQ(least_shared_memory_percent(two_rows), 21);
  EXPECT_LT(least_shared_memory_percent(h200(78, 256, 4672)), least_shared_memory_percent(one_row));
}

TEST(Carveout, AnUnknownDeviceGetsTheMostSharedMemory) {
  CarveoutQuery q = h200(64, 256, 1024);
  q.max_smem_per_sm = 0;
  EXPECT_EQ(least_shared_memory_percent(q), 100);
}

}  // namespace
}  // namespace di::kernels
