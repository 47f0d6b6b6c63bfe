#pragma once
// Tensors: a non-owning view (weights in a mapped checkpoint, slices) and an owning buffer
// (activations). Both are contiguous and row-major; the last dimension is the fastest.
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "core/error.h"

namespace di {

enum class Device : uint8_t { cpu, cuda };

using Shape = std::vector<int64_t>;

int64_t shape_numel(const Shape& shape);
std::string shape_str(const Shape& shape);  // "[2, 3, 4]"

struct TensorView {
  const void* data = nullptr;
  DType dtype = DType::f32;
  Shape shape;
  Device device = Device::cpu;

  int64_t numel() const { return shape_numel(shape); }
  size_t nbytes() const { return size_t(numel()) * dtype_size(dtype); }
  int64_t dim(int i) const { return shape.at(i < 0 ? shape.size() + i : i); }
  template <typename T>
  const T* as() const { return static_cast<const T*>(data); }
  bool empty() const { return data == nullptr; }
};

// Owning contiguous buffer. Copying shares the storage.
class Tensor {
 public:
  Tensor() = default;
  static Tensor empty(Shape shape, DType dtype, Device device = Device::cpu);
  // A tensor over memory someone else allocated (device memory from the CUDA ops' pool): `storage`
  // keeps it alive and frees it when the last copy goes.
  static Tensor from_storage(std::shared_ptr<void> storage, void* data, Shape shape, DType dtype, Device device);

  void* data() const { return data_; }
  template <typename T>
  T* as() const { return static_cast<T*>(data_); }
  DType dtype() const { return dtype_; }
  Device device() const { return device_; }
  const Shape& shape() const { return shape_; }
  int64_t dim(int i) const { return shape_.at(i < 0 ? shape_.size() + i : i); }
  int64_t numel() const { return shape_numel(shape_); }
  size_t nbytes() const { return size_t(numel()) * dtype_size(dtype_); }
  bool defined() const { return data_ != nullptr; }

  // Same bytes, another shape with the same element count.
  Tensor reshaped(Shape shape) const;
  TensorView view() const { return {data_, dtype_, shape_, device_}; }

 private:
  std::shared_ptr<void> storage_;
  void* data_ = nullptr;
  DType dtype_ = DType::f32;
  Shape shape_;
  Device device_ = Device::cpu;
};

}  // namespace di
