#pragma once
#include "kernels/numerics.h"

namespace di::ref {

// Rotary embedding on the first rotary_dim dims of each head of x [tokens, heads, head_dim], in
// place, NeoX halves: for i < rotary_dim/2, with f = pos * theta^(-2i/rotary_dim),
//   x'[i] = x[i] cos f - x[i + half] sin f,   x'[i + half] = x[i + half] cos f + x[i] sin f.
// Like Hugging Face: the frequencies are float32, cos and sin are rounded in a bf16 run, and so are
// each product and their sum.
void rope(float* x, int64_t tokens, int64_t heads, int64_t head_dim, int64_t rotary_dim, const int64_t* positions,
          double theta, Precision p);

}  // namespace di::ref
