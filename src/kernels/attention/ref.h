#pragma once
#include "kernels/numerics.h"

namespace di::ref {

// Causal GQA attention for one sequence. q: [n_q, Hq, D] for positions n_past .. n_past+n_q-1;
// k, v: [n_kv, Hkv, D] holding positions 0 .. n_kv-1 (n_kv = n_past + n_q). Query head j uses kv head
// j / (Hq / Hkv). Scores, softmax and the weighted sum are float32 (as the fused attention of
// transformers' sdpa path); the output is rounded once.    out: [n_q, Hq, D]
void causal_attention(const float* q, const float* k, const float* v, int64_t n_q, int64_t n_kv, int64_t Hq,
                      int64_t Hkv, int64_t D, double scale, float* out, Precision p);

}  // namespace di::ref
