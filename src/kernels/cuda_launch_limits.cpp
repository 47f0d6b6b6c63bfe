// The per-device launch limits that kernels ask for before a launch (cuda_common.cuh): the dynamic
// shared memory a kernel may take past 48 KB, and how many of its blocks a device holds at once.
// Both are asked of the runtime once per device, kernel and size, then remembered.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <mutex>
#include <vector>

namespace di::kernels {

cudaError_t allow_dynamic_shared_memory(const void* kernel, size_t bytes) {
  struct Allowed {
    int device;
    const void* kernel;
    size_t bytes;
  };
  static std::mutex mutex;
  static std::vector<Allowed> allowed;
  int device = 0;
  cudaError_t e = cudaGetDevice(&device);
  if (e != cudaSuccess) return e;
  const std::lock_guard<std::mutex> lock(mutex);
  for (const Allowed& a : allowed)
    if (a.device == device && a.kernel == kernel && a.bytes >= bytes) return cudaSuccess;
  e = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(bytes));
  if (e == cudaSuccess) allowed.push_back({device, kernel, bytes});
  return e;
}

cudaError_t resident_blocks(const void* kernel, int block_threads, size_t smem, int64_t& blocks) {
  struct Known {
    int device;
    const void* kernel;
    int block_threads;
    size_t smem;
    int64_t blocks;
  };
  static std::mutex mutex;
  static std::vector<Known> known;
  int device = 0;
  cudaError_t e = cudaGetDevice(&device);
  if (e != cudaSuccess) return e;
  const std::lock_guard<std::mutex> lock(mutex);
  for (const Known& k : known)
    if (k.device == device && k.kernel == kernel && k.block_threads == block_threads && k.smem == smem)
      return blocks = k.blocks, cudaSuccess;
  int sms = 0, per_sm = 0;
  if ((e = cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device)) != cudaSuccess) return e;
  if ((e = cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, block_threads, smem)) != cudaSuccess)
    return e;
  blocks = std::max<int64_t>(1, int64_t(sms) * per_sm);
  known.push_back({device, kernel, block_threads, smem, blocks});
  return cudaSuccess;
}

}  // namespace di::kernels
