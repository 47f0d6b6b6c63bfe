#include "core/tensor.h"

#include <cstdlib>

#include <fmt/format.h>
#include <fmt/ranges.h>

namespace di {

int64_t shape_numel(const Shape& shape) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

std::string shape_str(const Shape& shape) { return fmt::format("[{}]", fmt::join(shape, ", ")); }

Tensor Tensor::empty(Shape shape, DType dtype, Device device) {
  DI_CHECK(device == Device::cpu, "Tensor::empty: only host tensors are allocated here");
  for (int64_t d : shape) DI_CHECK(d >= 0, "Tensor::empty: negative dimension in {}", shape_str(shape));
  Tensor t;
  t.dtype_ = dtype;
  t.shape_ = std::move(shape);
  t.device_ = device;
  size_t bytes = std::max<size_t>(t.nbytes(), 64);
  bytes = (bytes + 63) / 64 * 64;  // aligned_alloc needs a multiple of the alignment
  void* p = std::aligned_alloc(64, bytes);
  if (!p) fail("out of host memory allocating {} bytes for a tensor of shape {}", bytes, shape_str(t.shape_));
  t.storage_ = std::shared_ptr<void>(p, std::free);
  t.data_ = p;
  return t;
}

Tensor Tensor::from_storage(std::shared_ptr<void> storage, void* data, Shape shape, DType dtype, Device device) {
  for (int64_t d : shape) DI_CHECK(d >= 0, "Tensor::from_storage: negative dimension in {}", shape_str(shape));
  Tensor t;
  t.storage_ = std::move(storage);
  t.data_ = data;
  t.shape_ = std::move(shape);
  t.dtype_ = dtype;
  t.device_ = device;
  return t;
}

Tensor Tensor::reshaped(Shape shape) const {
  DI_CHECK(shape_numel(shape) == numel(), "reshape of {} to {} changes the element count", shape_str(shape_),
           shape_str(shape));
  Tensor t = *this;
  t.shape_ = std::move(shape);
  return t;
}

}  // namespace di
