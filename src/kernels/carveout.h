#pragma once
// How much of an SM's unified L1 and shared memory a kernel asks to have as shared memory (the
// preferred carveout, a percentage of the most the SM can give, cudaDevAttrMaxSharedMemoryPerMultiprocessor).
//
// The weight-streaming kernels of a decode step keep their loads in flight in the L1 (a load's data
// lands there even where it is not kept), so the L1 that the shared memory leaves is what bounds the
// bytes in flight. With the split left to the driver, the resident small-batch kernels at 16 rows ran
// 2-3% slower than with the one below; asked for the most L1 outright, the driver gave them room for
// fewer blocks than their registers allow, and every layer ran 9-63% slower (docs/benchmarks/decode.md). The least shared memory that still holds as many blocks as the
// registers and threads allow is the carveout asked for here. Plain arithmetic, so that it is tested
// without a GPU.
#include <algorithm>
#include <cstddef>

namespace di::kernels {

struct CarveoutQuery {
  int regs_per_thread = 0;   // cudaFuncAttributes::numRegs
  int block_threads = 0;
  size_t static_smem = 0;    // cudaFuncAttributes::sharedSizeBytes
  size_t dynamic_smem = 0;   // a launch's dynamic shared memory per block
  int regs_per_sm = 0;       // cudaDevAttrMaxRegistersPerMultiprocessor
  int threads_per_sm = 0;    // cudaDevAttrMaxThreadsPerMultiProcessor
  int max_smem_per_sm = 0;   // cudaDevAttrMaxSharedMemoryPerMultiprocessor
};

constexpr int kMaxBlocksPerSm = 32;
constexpr size_t kSharedMemoryReservedPerBlock = 1024;  // the system's share of each block's
constexpr int kRegisterAllocationUnit = 256;            // registers are given to a warp in these

// Blocks an SM holds by its registers and threads (at least 1).
constexpr int blocks_by_registers(const CarveoutQuery& q) {
  const int warps = (q.block_threads + 31) / 32;
  const int regs_per_warp = (q.regs_per_thread * 32 + kRegisterAllocationUnit - 1) / kRegisterAllocationUnit *
                            kRegisterAllocationUnit;
  const int by_regs = regs_per_warp * warps > 0 ? q.regs_per_sm / (regs_per_warp * warps) : kMaxBlocksPerSm;
  const int by_threads = q.block_threads > 0 ? q.threads_per_sm / q.block_threads : kMaxBlocksPerSm;
  return std::max(1, std::min({by_regs, by_threads, kMaxBlocksPerSm}));
}

// The least carveout (percent, rounded up) whose shared memory holds blocks_by_registers(q) blocks.
constexpr int least_shared_memory_percent(const CarveoutQuery& q) {
  if (q.max_smem_per_sm <= 0) return 100;
  const size_t needed =
      size_t(blocks_by_registers(q)) * (q.static_smem + q.dynamic_smem + kSharedMemoryReservedPerBlock);
  const size_t most = size_t(q.max_smem_per_sm);
  return int(std::min<size_t>(100, (needed * 100 + most - 1) / most));
}

}  // namespace di::kernels
