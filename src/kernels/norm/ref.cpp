#include "kernels/norm/ref.h"

#include <cmath>
#include <vector>

namespace di::ref {

namespace {
float inv_rms(const float* x, int64_t dim, double eps) {
  float sum = 0.0f;
  for (int64_t i = 0; i < dim; ++i) sum += x[i] * x[i];
  return 1.0f / std::sqrt(sum / float(dim) + float(eps));
}
}  // namespace

void rms_norm(const float* x, int64_t rows, int64_t dim, const TensorView& w, double eps, float* y, Precision p) {
  std::vector<float> scale(static_cast<size_t>(dim));
  // The (1 + w) multiplier in float32; w itself may be a bf16 or f32 parameter.
  for (int64_t i = 0; i < dim; ++i) scale[i] = 1.0f + weight_at(w, i, p);
#pragma omp parallel for schedule(static) if (rows > 64)
  for (int64_t r = 0; r < rows; ++r) {
    const float* xr = x + r * dim;
    const float s = inv_rms(xr, dim, eps);
    for (int64_t i = 0; i < dim; ++i) y[r * dim + i] = rnd(xr[i] * s * scale[i], p);
  }
}

void gated_rms_norm(const float* x, const float* z, int64_t rows, int64_t dim, const TensorView& w, double eps,
                    float* y, Precision p) {
  std::vector<float> weight(static_cast<size_t>(dim));
  weight_to_f32(w, 0, dim, weight.data(), p);
#pragma omp parallel for schedule(static) if (rows > 64)
  for (int64_t r = 0; r < rows; ++r) {
    const float* xr = x + r * dim;
    const float s = inv_rms(xr, dim, eps);
    for (int64_t i = 0; i < dim; ++i) {
      const float n = rnd(weight[i] * rnd(xr[i] * s, p), p);
      y[r * dim + i] = rnd(n * silu(z[r * dim + i]), p);
    }
  }
}

}  // namespace di::ref
