#pragma once
// RMSNorm kernels on bf16 rows, float32 inside, rounded as the CPU reference (kernels/norm/ref.h).
#include <cuda_runtime.h>

#include <cstdint>

namespace di::kernels {

struct RmsNormParams {
  const void* x;         // bf16 [rows, dim]
  const float* weight;   // f32 [dim]: the parameter's values (bf16-exact in a bf16 run)
  void* out;             // bf16 [rows, dim]
  int64_t rows = 0;
  int64_t dim = 0;
  float eps = 1e-6f;
  bool zero_centred = true;  // multiply by (1 + w) (Qwen3.5's RMSNorm) rather than w
};
// out = bf16(x * rsqrt(mean(x^2) + eps) * (1 + w))
cudaError_t launch_rms_norm(const RmsNormParams& p, cudaStream_t stream);

struct GatedRmsNormParams {
  const void* x;        // bf16 [rows, dim] (one value head per row)
  const void* z;        // bf16 [rows, dim] the output gate
  const float* weight;  // f32 [dim] plain weight
  void* out;            // bf16 [rows, dim]
  int64_t rows = 0;
  int64_t dim = 0;
  float eps = 1e-6f;
};
// n = bf16(w * bf16(x * rsqrt(mean(x^2) + eps)));  out = bf16(n * silu(z))
cudaError_t launch_gated_rms_norm(const GatedRmsNormParams& p, cudaStream_t stream);

}  // namespace di::kernels
