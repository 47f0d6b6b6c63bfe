#include "kernels/mlp/ref.h"

namespace di::ref {

void swiglu(const float* gate, const float* up, int64_t n, float* y, Precision p) {
  for (int64_t i = 0; i < n; ++i) y[i] = rnd(rnd(silu(gate[i]), p) * up[i], p);
}

}  // namespace di::ref
