#include "kernels/gemm/ref.h"

#include <algorithm>
#include <vector>

#include "core/error.h"

namespace di::ref {

void linear(const float* x, int64_t n_rows, int64_t in, const TensorView& w, float* y, Precision p,
            bool round_output) {
  DI_CHECK(w.shape.size() == 2 && w.shape[1] == in, "linear: weight of shape {} does not take {} inputs",
           shape_str(w.shape), in);
  const int64_t out = w.shape[0];
  // Blocks of weight rows are widened to f32 once and reused for every token row.
  constexpr int64_t kBlock = 32;
  const int64_t n_blocks = (out + kBlock - 1) / kBlock;
#pragma omp parallel
  {
    std::vector<float> wblock(size_t(kBlock * in));
#pragma omp for schedule(static)
    for (int64_t b = 0; b < n_blocks; ++b) {
      const int64_t o0 = b * kBlock, o1 = std::min(out, o0 + kBlock);
      weight_to_f32(w, o0 * in, (o1 - o0) * in, wblock.data(), p);
      for (int64_t r = 0; r < n_rows; ++r) {
        const float* xr = x + r * in;
        for (int64_t o = o0; o < o1; ++o) {
          const float* wr = wblock.data() + (o - o0) * in;
          float acc = 0.0f;
#pragma omp simd reduction(+ : acc)
          for (int64_t i = 0; i < in; ++i) acc += xr[i] * wr[i];
          y[r * out + o] = round_output ? rnd(acc, p) : acc;
        }
      }
    }
  }
}

}  // namespace di::ref
