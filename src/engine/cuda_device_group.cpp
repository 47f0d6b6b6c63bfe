#include <cstdlib>
#include <numeric>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "core/cuda.h"
#include "core/error.h"
#include "engine/device_group.h"

#if DI_HAVE_NCCL
#include <nccl.h>
#endif

namespace di {

#if DI_HAVE_NCCL
namespace {

ncclComm_t comm(void* c) { return static_cast<ncclComm_t>(c); }

void check_nccl(ncclResult_t r, const char* what) {
  if (r != ncclSuccess) fail("NCCL: {} failed: {}", what, ncclGetErrorString(r));
}

}  // namespace
#endif

std::string DeviceGroup::unavailable(int size) {
  if (size < 1) return fmt::format("tensor-parallel size {} is not a positive count", size);
#if !DI_HAVE_NCCL
  if (size > 1) return "this build has no NCCL (CMake did not find nccl.h and libnccl; set DI_NCCL_ROOT)";
#endif
  const int devices = cuda::device_count();
  if (devices < size)
    return fmt::format("tensor-parallel size {} needs {} GPUs, {} visible", size, size, devices);
  return "";
}

DeviceGroup::DeviceGroup(int size) {
  if (const std::string why = unavailable(size); !why.empty()) fail("{}", why);
#if DI_HAVE_NCCL
  setenv("NCCL_NVLS_ENABLE", "0", /*overwrite=*/1);
  std::vector<int> devices(static_cast<size_t>(size));
  std::iota(devices.begin(), devices.end(), 0);
  std::vector<ncclComm_t> comms(static_cast<size_t>(size));
  check_nccl(ncclCommInitAll(comms.data(), size, devices.data()), "ncclCommInitAll");
  for (ncclComm_t c : comms) comms_.push_back(c);
  spdlog::info("tensor parallelism: {}", describe());
#else
  comms_.assign(size_t(size), nullptr);  // size 1: no collective is ever called
#endif
}

DeviceGroup::~DeviceGroup() {
#if DI_HAVE_NCCL
  if (aborted_) return;
  for (void* c : comms_)
    if (c) ncclCommDestroy(comm(c));
#endif
}

std::string DeviceGroup::describe() const {
#if DI_HAVE_NCCL
  int v = 0;
  ncclGetVersion(&v);
  return fmt::format("NCCL {}.{}.{}, {} ranks, NVLS off", v / 10000, (v / 100) % 100, v % 100, size());
#else
  return fmt::format("{} rank, no NCCL", size());
#endif
}

void DeviceGroup::all_reduce_sum_f32(int rank, float* data, size_t n, cudaStream_t stream) const {
#if DI_HAVE_NCCL
  check_nccl(ncclAllReduce(data, data, n, ncclFloat32, ncclSum, comm(comms_.at(size_t(rank))), stream),
             "all-reduce (f32)");
#else
  (void)rank, (void)data, (void)n, (void)stream;
#endif
}

void DeviceGroup::all_reduce_sum_bf16(int rank, void* data, size_t n, cudaStream_t stream) const {
#if DI_HAVE_NCCL
  check_nccl(ncclAllReduce(data, data, n, ncclBfloat16, ncclSum, comm(comms_.at(size_t(rank))), stream),
             "all-reduce (bf16)");
#else
  (void)rank, (void)data, (void)n, (void)stream;
#endif
}

void DeviceGroup::all_gather_bf16(int rank, const void* in, void* out, size_t n, cudaStream_t stream) const {
#if DI_HAVE_NCCL
  check_nccl(ncclAllGather(in, out, n, ncclBfloat16, comm(comms_.at(size_t(rank))), stream), "all-gather (bf16)");
#else
  DI_CUDA_CHECK(cudaMemcpyAsync(out, in, n * 2, cudaMemcpyDeviceToDevice, stream));
  (void)rank;
#endif
}

void DeviceGroup::abort() {
#if DI_HAVE_NCCL
  if (aborted_) return;
  aborted_ = true;
  for (void* c : comms_)
    if (c) ncclCommAbort(comm(c));
#endif
}

}  // namespace di
