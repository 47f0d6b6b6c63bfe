#include "kernels/numerics.h"

#include "core/error.h"

namespace di {

void weight_to_f32(const TensorView& w, int64_t offset, int64_t n, float* dst, Precision p) {
  DI_CHECK(offset >= 0 && offset + n <= w.numel(), "weight read [{}, {}) outside a tensor of {} elements", offset,
           offset + n, w.numel());
  if (w.dtype == DType::bf16) {
    const uint16_t* src = w.as<uint16_t>() + offset;
    for (int64_t i = 0; i < n; ++i) dst[i] = bf16_to_f32(src[i]);
  } else if (w.dtype == DType::f32) {
    const float* src = w.as<float>() + offset;
    for (int64_t i = 0; i < n; ++i) dst[i] = rnd(src[i], p);
  } else {
    fail("weight of dtype {} is not supported by the CPU ops (BF16 or F32)", dtype_name(w.dtype));
  }
}

}  // namespace di
