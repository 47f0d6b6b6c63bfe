#include "kernels/attention/ref.h"

#include <algorithm>
#include <cmath>
#include <vector>

namespace di::ref {

void causal_attention(const float* q, const float* k, const float* v, int64_t n_q, int64_t n_kv, int64_t Hq,
                      int64_t Hkv, int64_t D, double scale, float* out, Precision p) {
  const int64_t n_past = n_kv - n_q;
  const int64_t group = Hq / Hkv;
#pragma omp parallel for collapse(2) schedule(dynamic)
  for (int64_t t = 0; t < n_q; ++t) {
    for (int64_t h = 0; h < Hq; ++h) {
      const int64_t kvh = h / group;
      const int64_t visible = n_past + t + 1;  // causal: keys at positions <= the query's
      const float* qv = q + (t * Hq + h) * D;
      std::vector<float> score(static_cast<size_t>(visible));
      float best = -INFINITY;
      for (int64_t s = 0; s < visible; ++s) {
        const float* kv = k + (s * Hkv + kvh) * D;
        float dot = 0.0f;
        for (int64_t d = 0; d < D; ++d) dot += qv[d] * kv[d];
        score[s] = dot * float(scale);
        best = std::max(best, score[s]);
      }
      float denom = 0.0f;
      for (auto& sc : score) denom += (sc = std::exp(sc - best));
      std::vector<float> acc(size_t(D), 0.0f);
      for (int64_t s = 0; s < visible; ++s) {
        const float* vv = v + (s * Hkv + kvh) * D;
        const float w = score[s] / denom;
        for (int64_t d = 0; d < D; ++d) acc[d] += w * vv[d];
      }
      for (int64_t d = 0; d < D; ++d) out[(t * Hq + h) * D + d] = rnd(acc[d], p);
    }
  }
}

}  // namespace di::ref
