#include <cuda_runtime.h>

#include <cstdlib>
#include <cstring>

namespace di::kernels {

bool early_launch_enabled() {
  static const bool enabled = [] {
    if (const char* v = std::getenv("DI_EARLY_LAUNCH"); v != nullptr && std::strcmp(v, "0") == 0) return false;
    int device = 0, major = 0;
    if (cudaGetDevice(&device) != cudaSuccess ||
        cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device) != cudaSuccess) {
      cudaGetLastError();  // no device: nothing launches anyway
      return false;
    }
    return major >= 9;
  }();
  return enabled;
}

}  // namespace di::kernels
