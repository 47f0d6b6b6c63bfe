#pragma once
// CUDA runtime helpers: error checking that names the expression, place and device; device facts;
// a small owning device buffer for tests and set-up code. Kernels themselves allocate nothing.
// Safe to include from .cu files (no fmt here: fmt's compile-time format strings fail under nvcc).
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace di::cuda {

// Throws di::Error: "<expr> failed at file:line on device N (name): <cuda error string>".
[[noreturn]] void throw_cuda_error(cudaError_t status, const char* expr, const char* file, int line);

#define DI_CUDA_CHECK(expr)                                                           \
  do {                                                                                \
    cudaError_t di_cuda_status_ = (expr);                                             \
    if (di_cuda_status_ != cudaSuccess)                                               \
      ::di::cuda::throw_cuda_error(di_cuda_status_, #expr, __FILE__, __LINE__);       \
  } while (0)

// Kernels report a launch failure through cudaGetLastError(); launchers return it.
#define DI_CUDA_CHECK_LAUNCH() DI_CUDA_CHECK(cudaGetLastError())

struct DeviceInfo {
  int ordinal = -1;
  std::string name;
  int sm_major = 0, sm_minor = 0;
  int num_sms = 0;
  size_t total_memory = 0;
  size_t shared_memory_per_block_optin = 0;
  int sm() const { return sm_major * 10 + sm_minor; }
};

// Devices the driver reports; 0 when there is no driver or no GPU (never throws).
int device_count();
// Facts about the current device (throws when there is none).
DeviceInfo current_device();
// "NVIDIA H200, sm_90, 132 SMs, 140 GiB, driver 13.0"
std::string describe(const DeviceInfo& info);
int driver_version();

// An owning device allocation of n elements of T (cudaMalloc; freed on destruction).
template <typename T>
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  explicit DeviceBuffer(size_t n) : n_(n) {
    if (n > 0) DI_CUDA_CHECK(cudaMalloc(&data_, n * sizeof(T)));
  }
  explicit DeviceBuffer(std::span<const T> host) : DeviceBuffer(host.size()) { upload(host); }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  DeviceBuffer(DeviceBuffer&& o) noexcept : data_(o.data_), n_(o.n_) { o.data_ = nullptr, o.n_ = 0; }
  DeviceBuffer& operator=(DeviceBuffer&& o) noexcept {
    std::swap(data_, o.data_), std::swap(n_, o.n_);
    return *this;
  }
  ~DeviceBuffer() {
    if (data_) cudaFree(data_);
  }

  T* data() const { return data_; }
  size_t size() const { return n_; }
  size_t bytes() const { return n_ * sizeof(T); }

  void upload(std::span<const T> host) {
    if (host.size() != n_) throw_size_mismatch(host.size());
    if (n_ > 0) DI_CUDA_CHECK(cudaMemcpy(data_, host.data(), bytes(), cudaMemcpyHostToDevice));
  }
  std::vector<T> download() const {
    std::vector<T> host(n_);
    if (n_ > 0) DI_CUDA_CHECK(cudaMemcpy(host.data(), data_, bytes(), cudaMemcpyDeviceToHost));
    return host;
  }
  // Fills every byte with `byte` (0xFF poisons floats and bf16 with NaN).
  void fill_bytes(int byte) {
    if (n_ > 0) DI_CUDA_CHECK(cudaMemset(data_, byte, bytes()));
  }

 private:
  [[noreturn]] void throw_size_mismatch(size_t got) const;
  T* data_ = nullptr;
  size_t n_ = 0;
};

[[noreturn]] void throw_buffer_size_mismatch(size_t have, size_t got);
template <typename T>
void DeviceBuffer<T>::throw_size_mismatch(size_t got) const {
  throw_buffer_size_mismatch(n_, got);
}

}  // namespace di::cuda
