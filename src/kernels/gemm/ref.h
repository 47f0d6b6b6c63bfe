#pragma once
#include "kernels/numerics.h"

namespace di::ref {

// y[n, o] = sum_i x[n, i] * W[o, i], accumulated in float32, rounded once per element.
// x: [N, in] float; W: [out, in] bf16 or f32; y: [N, out], rounded per p unless round_output is
// false (a partial sum that is added to other ranks' before it is rounded once).
void linear(const float* x, int64_t n_rows, int64_t in, const TensorView& w, float* y, Precision p,
            bool round_output = true);

}  // namespace di::ref
