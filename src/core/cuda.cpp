#include "core/cuda.h"

#include <fmt/format.h>

#include "core/error.h"

namespace di::cuda {

void throw_cuda_error(cudaError_t status, const char* expr, const char* file, int line) {
  int device = -1;
  cudaGetDevice(&device);
  cudaDeviceProp prop{};
  const bool named = device >= 0 && cudaGetDeviceProperties(&prop, device) == cudaSuccess;
  throw Error(fmt::format("{} failed at {}:{} on device {} ({}): {} ({})", expr, file, line, device,
                          named ? prop.name : "unknown", cudaGetErrorString(status), cudaGetErrorName(status)));
}

void throw_buffer_size_mismatch(size_t have, size_t got) {
  fail("device buffer of {} elements given a host span of {}", have, got);
}

int device_count() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    cudaGetLastError();  // clear the sticky "no device" status
    return 0;
  }
  return n;
}

DeviceInfo current_device() {
  DeviceInfo info;
  DI_CUDA_CHECK(cudaGetDevice(&info.ordinal));
  cudaDeviceProp prop{};
  DI_CUDA_CHECK(cudaGetDeviceProperties(&prop, info.ordinal));
  info.name = prop.name;
  info.sm_major = prop.major;
  info.sm_minor = prop.minor;
  info.num_sms = prop.multiProcessorCount;
  info.total_memory = prop.totalGlobalMem;
  info.shared_memory_per_block_optin = prop.sharedMemPerBlockOptin;
  return info;
}

int driver_version() {
  int v = 0;
  if (cudaDriverGetVersion(&v) != cudaSuccess) cudaGetLastError();
  return v;
}

std::string describe(const DeviceInfo& info) {
  const int driver = driver_version();
  return fmt::format("{}, sm_{}{}, {} SMs, {:.0f} GiB, CUDA driver {}.{}", info.name, info.sm_major, info.sm_minor,
                     info.num_sms, double(info.total_memory) / (1 << 30), driver / 1000, (driver % 1000) / 10);
}

}  // namespace di::cuda
