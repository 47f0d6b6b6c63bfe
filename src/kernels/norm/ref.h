#pragma once
#include "kernels/numerics.h"

namespace di::ref {

// Zero-centred RMSNorm per row of `dim`: y = x * rsqrt(mean(x^2) + eps) * (1 + w), one rounding.
void rms_norm(const float* x, int64_t rows, int64_t dim, const TensorView& w, double eps, float* y, Precision p);

// Gated RMSNorm per row of `dim` (one value head): n = x * rsqrt(mean(x^2) + eps), rounded;
// n = w * n (plain weight), rounded; y = n * silu(z) in float32, rounded (Qwen3_5RMSNormGated).
void gated_rms_norm(const float* x, const float* z, int64_t rows, int64_t dim, const TensorView& w, double eps,
                    float* y, Precision p);

}  // namespace di::ref
