#include "kernels/rope/ref.h"

#include <cmath>
#include <vector>

namespace di::ref {

void rope(float* x, int64_t tokens, int64_t heads, int64_t head_dim, int64_t rotary_dim, const int64_t* positions,
          double theta, Precision p) {
  const int64_t half = rotary_dim / 2;
  // inv_freq[i] = 1 / theta^(2i / rotary_dim), computed in float32 as transformers does.
  std::vector<float> inv_freq(static_cast<size_t>(half));
  for (int64_t i = 0; i < half; ++i)
    inv_freq[i] = 1.0f / std::pow(float(theta), float(2 * i) / float(rotary_dim));
  for (int64_t t = 0; t < tokens; ++t) {
    std::vector<float> c(static_cast<size_t>(half)), s(static_cast<size_t>(half));
    for (int64_t i = 0; i < half; ++i) {
      const float f = float(positions[t]) * inv_freq[i];
      c[i] = rnd(std::cos(f), p);
      s[i] = rnd(std::sin(f), p);
    }
    for (int64_t h = 0; h < heads; ++h) {
      float* v = x + (t * heads + h) * head_dim;
      for (int64_t i = 0; i < half; ++i) {
        const float a = v[i], b = v[i + half];
        v[i] = rnd(rnd(a * c[i], p) + rnd(-b * s[i], p), p);
        v[i + half] = rnd(rnd(b * c[i], p) + rnd(a * s[i], p), p);
      }
    }
  }
}

}  // namespace di::ref
