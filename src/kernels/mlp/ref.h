#pragma once
#include "kernels/numerics.h"

namespace di::ref {

// y = silu(gate) * up elementwise; a bf16 run rounds the silu and the product.
void swiglu(const float* gate, const float* up, int64_t n, float* y, Precision p);

}  // namespace di::ref
