#pragma once
// Numerics shared by the CPU reference ops: where Hugging Face rounds a bf16 run to bf16, the
// reference rounds too when asked (Precision::bf16); in Precision::f32 nothing is rounded, which
// matches a float32 Hugging Face run (QWEN35.md section 6).
#include <cmath>
#include <cstdint>

#include "core/bf16.h"
#include "core/tensor.h"

namespace di {

enum class Precision : uint8_t { f32, bf16 };

inline float rnd(float x, Precision p) { return p == Precision::bf16 ? round_bf16(x) : x; }

inline float silu(float x) { return x / (1.0f + std::exp(-x)); }
inline float sigmoid(float x) { return 1.0f / (1.0f + std::exp(-x)); }
// PyTorch's softplus with beta 1 and threshold 20.
inline float softplus(float x) { return x > 20.0f ? x : std::log1p(std::exp(x)); }

// Element i of a bf16 or f32 weight as float, rounded to bf16 in a bf16 run (a bf16 run loads
// every parameter as bf16, including the ones a checkpoint stores in f32).
inline float weight_at(const TensorView& w, int64_t i, Precision p) {
  if (w.dtype == DType::bf16) return bf16_to_f32(w.as<uint16_t>()[i]);
  return rnd(w.as<float>()[i], p);
}

// Copies n elements from offset of a weight into dst as float.
void weight_to_f32(const TensorView& w, int64_t offset, int64_t n, float* dst, Precision p);

}  // namespace di
