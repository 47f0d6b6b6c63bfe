#include "kernels/gdn/prep_ref.h"

#include <cmath>
#include <vector>

namespace di::ref {

void causal_conv1d_silu(const float* x, int64_t n, int64_t C, int64_t K, const TensorView& w, float* state,
                        float* y, Precision p) {
#pragma omp parallel for schedule(static) if (n * C > 65536)
  for (int64_t c = 0; c < C; ++c) {
    std::vector<float> ctx(size_t(K + n));  // [state (K) | x (n)] of channel c
    for (int64_t j = 0; j < K; ++j) ctx[j] = state[c * K + j];
    for (int64_t t = 0; t < n; ++t) ctx[K + t] = x[t * C + c];
    std::vector<float> wc(static_cast<size_t>(K));  // any K (a fixed float[16] overflowed for K > 16)
    for (int64_t j = 0; j < K; ++j) wc[j] = weight_at(w, c * K + j, p);
    for (int64_t t = 0; t < n; ++t) {
      // Output t sees the K inputs ending at itself: ctx[t + 1 .. t + K].
      float acc = 0.0f;
      for (int64_t j = 0; j < K; ++j) acc += wc[j] * ctx[t + 1 + j];
      y[t * C + c] = rnd(silu(rnd(acc, p)), p);
    }
    for (int64_t j = 0; j < K; ++j) state[c * K + j] = ctx[n + j];
  }
}

void gdn_gates(const float* a, const float* b, int64_t n, int64_t Hv, const TensorView& A_log,
               const TensorView& dt_bias, float* g, float* beta, Precision p) {
  for (int64_t h = 0; h < Hv; ++h) {
    const float decay_rate = std::exp(weight_at(A_log, h, p));  // exp(A_log) > 0
    const float bias = weight_at(dt_bias, h, p);
    for (int64_t t = 0; t < n; ++t) {
      g[t * Hv + h] = -decay_rate * softplus(a[t * Hv + h] + bias);
      beta[t * Hv + h] = rnd(sigmoid(b[t * Hv + h]), p);
    }
  }
}

void l2_normalize(const float* x, int64_t rows, int64_t dim, float scale, float* y) {
  for (int64_t r = 0; r < rows; ++r) {
    float sum = 0.0f;
    for (int64_t i = 0; i < dim; ++i) sum += x[r * dim + i] * x[r * dim + i];
    const float inv = 1.0f / std::sqrt(sum + 1e-6f);
    for (int64_t i = 0; i < dim; ++i) y[r * dim + i] = x[r * dim + i] * inv * scale;
  }
}

}  // namespace di::ref
