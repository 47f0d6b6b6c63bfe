// The per-device launch limits that kernels ask for before a launch (cuda_common.cuh): the dynamic
// shared memory a kernel may take past 48 KB, its split of L1 and shared memory, and how many of its
// blocks a device holds at once. Each is asked of or told to the runtime once per device, kernel and
// size, then remembered.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <mutex>
#include <vector>

#include "kernels/carveout.h"

namespace di::kernels {

namespace {

// What the runtime said for one (device, kernel, threads, bytes), asked on first use.
struct LaunchQuery {
  int device;
  const void* kernel;
  int block_threads;
  size_t bytes;
  bool operator==(const LaunchQuery&) const = default;
};

// Remembers `ask(query)`'s answer (a value, or an error, which is not remembered) per query.
template <typename Value, typename Ask>
cudaError_t remembered(const void* kernel, int block_threads, size_t bytes, Value& value, Ask ask) {
  static std::mutex mutex;
  static std::vector<std::pair<LaunchQuery, Value>> known;
  LaunchQuery query{0, kernel, block_threads, bytes};
  cudaError_t e = cudaGetDevice(&query.device);
  if (e != cudaSuccess) return e;
  const std::lock_guard<std::mutex> lock(mutex);
  for (const auto& [q, v] : known)
    if (q == query) return value = v, cudaSuccess;
  if ((e = ask(query, value)) == cudaSuccess) known.emplace_back(query, value);
  return e;
}

}  // namespace

cudaError_t allow_dynamic_shared_memory(const void* kernel, size_t bytes) {
  bool allowed = false;
  return remembered(kernel, 0, bytes, allowed, [](const LaunchQuery& q, bool& ok) {
    const cudaError_t e = cudaFuncSetAttribute(q.kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(q.bytes));
    ok = e == cudaSuccess;
    return e;
  });
}

cudaError_t prefer_least_shared_memory(const void* kernel, int block_threads, size_t dynamic_bytes) {
  int percent = 0;
  cudaError_t e = remembered(kernel, block_threads, dynamic_bytes, percent, [](const LaunchQuery& q, int& out) {
    cudaFuncAttributes a{};
    CarveoutQuery c{.block_threads = q.block_threads, .dynamic_smem = q.bytes};
    cudaError_t e = cudaFuncGetAttributes(&a, q.kernel);
    if (e == cudaSuccess) e = cudaDeviceGetAttribute(&c.regs_per_sm, cudaDevAttrMaxRegistersPerMultiprocessor, q.device);
    if (e == cudaSuccess)
      e = cudaDeviceGetAttribute(&c.threads_per_sm, cudaDevAttrMaxThreadsPerMultiProcessor, q.device);
    if (e == cudaSuccess)
      e = cudaDeviceGetAttribute(&c.max_smem_per_sm, cudaDevAttrMaxSharedMemoryPerMultiprocessor, q.device);
    if (e != cudaSuccess) return e;
    c.regs_per_thread = a.numRegs;
    c.static_smem = a.sharedSizeBytes;
    out = least_shared_memory_percent(c);
    return cudaSuccess;
  });
  if (e != cudaSuccess) return e;
  // The carveout is the kernel's attribute, not the launch's: set again only when a launch of
  // another size wants another one.
  static std::mutex mutex;
  static std::vector<std::pair<LaunchQuery, int>> set;  // per device and kernel: the percent last set
  LaunchQuery which{0, kernel, 0, 0};
  if ((e = cudaGetDevice(&which.device)) != cudaSuccess) return e;
  const std::lock_guard<std::mutex> lock(mutex);
  auto it = std::find_if(set.begin(), set.end(), [&](const auto& s) { return s.first == which; });
  if (it != set.end() && it->second == percent) return cudaSuccess;
  if ((e = cudaFuncSetAttribute(kernel, cudaFuncAttributePreferredSharedMemoryCarveout, percent)) != cudaSuccess)
    return e;
  if (it == set.end())
    set.emplace_back(which, percent);
  else
    it->second = percent;
  return cudaSuccess;
}

cudaError_t resident_blocks(const void* kernel, int block_threads, size_t smem, int64_t& blocks) {
  return remembered(kernel, block_threads, smem, blocks, [](const LaunchQuery& q, int64_t& resident) {
    int sms = 0, per_sm = 0;
    cudaError_t e = cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, q.device);
    if (e == cudaSuccess) e = cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, q.kernel, q.block_threads, q.bytes);
    resident = std::max<int64_t>(1, int64_t(sms) * per_sm);
    return e;
  });
}

}  // namespace di::kernels
