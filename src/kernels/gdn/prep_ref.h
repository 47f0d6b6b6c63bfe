#pragma once
// CPU reference of the GDN preparation: the causal conv with its state, the gates, the q/k norms.
#include "kernels/numerics.h"

namespace di::ref {

// Causal depthwise conv over time, then SiLU, for one sequence.
// x: [n, C] pre-conv inputs; w: [C, 1, K]; state: [C, K], the K newest earlier inputs of each
// channel (zeros for a fresh sequence), oldest first; y: [n, C].
//   y[t, c] = silu( sum_j w[c, j] * ctx[c, t + 1 + j] ),  ctx = [state | x] along time
// A bf16 run rounds the conv output and the SiLU output (transformers' conv1d fallback).
// The state is then replaced by the K newest columns of ctx.
void causal_conv1d_silu(const float* x, int64_t n, int64_t C, int64_t K, const TensorView& w, float* state,
                        float* y, Precision p);

// g = -exp(A_log) * softplus(a + dt_bias) in float32 (never rounded); beta = sigmoid(b), rounded in
// a bf16 run. a, b, g, beta: [n, Hv].
void gdn_gates(const float* a, const float* b, int64_t n, int64_t Hv, const TensorView& A_log,
               const TensorView& dt_bias, float* g, float* beta, Precision p);

// x * rsqrt(sum(x^2) + 1e-6) * scale over rows of `dim` (float32; transformers after PR #47625).
void l2_normalize(const float* x, int64_t rows, int64_t dim, float scale, float* y);

}  // namespace di::ref
