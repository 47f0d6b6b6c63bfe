#pragma once
// The GPUs of a tensor-parallel run in one process (devices 0 .. size-1, one rank each), joined by
// NCCL: what HostCollectives is to the CPU ops. Each rank calls the collectives from its own thread
// on its own stream, in the same order as every other rank; the calls are asynchronous like kernel
// launches and can be captured in a CUDA graph.
//
// NVLink multicast (NVLS) is turned off before NCCL starts (NCCL_NVLS_ENABLE=0): the engine does not
// use it, and on shared hosts it can take the GPUs out of service.
#include <cuda_runtime.h>

#include <cstddef>
#include <string>
#include <vector>

namespace di {

class DeviceGroup {
 public:
  // Fails naming the reason: a build without NCCL, fewer visible devices than ranks, NCCL's error.
  explicit DeviceGroup(int size);
  ~DeviceGroup();
  DeviceGroup(const DeviceGroup&) = delete;
  DeviceGroup& operator=(const DeviceGroup&) = delete;

  int size() const { return int(comms_.size()); }
  // "NCCL 2.27.7, 2 ranks" (for start-up lines and benchmark provenance).
  std::string describe() const;

  void all_reduce_sum_f32(int rank, float* data, size_t n, cudaStream_t stream) const;
  void all_reduce_sum_bf16(int rank, void* data, size_t n, cudaStream_t stream) const;
  // out [size, n] = every rank's in [n] in rank order.
  void all_gather_bf16(int rank, const void* in, void* out, size_t n, cudaStream_t stream) const;

  // Aborts every rank's communicator, so that a rank waiting on a failed peer returns; the group
  // is unusable afterwards.
  void abort();

  // Empty when NCCL is in this build and `size` devices are visible; otherwise why not.
  static std::string unavailable(int size);

 private:
  std::vector<void*> comms_;  // ncclComm_t, one per rank
  bool aborted_ = false;
};

}  // namespace di
