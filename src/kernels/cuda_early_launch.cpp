#include <cuda_runtime.h>

#include <cstdlib>
#include <cstring>

namespace di::kernels {

namespace {

// The current device's compute capability major, 0 without a device.
int device_major() {
  int device = 0, major = 0;
  if (cudaGetDevice(&device) != cudaSuccess ||
      cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device) != cudaSuccess) {
    cudaGetLastError();  // no device: nothing launches anyway
    return 0;
  }
  return major;
}

}  // namespace

bool early_launch_enabled() {
  static const bool enabled = [] {
    if (const char* v = std::getenv("DI_EARLY_LAUNCH"); v != nullptr && std::strcmp(v, "0") == 0) return false;
    return device_major() >= 9;
  }();
  return enabled;
}

bool clusters_supported() {
  static const bool supported = device_major() >= 9;
  return supported;
}

}  // namespace di::kernels
