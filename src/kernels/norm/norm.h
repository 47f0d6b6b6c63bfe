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

// The gated attention's q/gate split and its per-head q and k norms in one launch: q_proj's output
// holds per head [q | gate]; q and k are RMSNorm1p-ed per head (as launch_rms_norm on rows of one
// head, bit for bit), the gate copied out.
struct AttentionQkNormParams {
  const void* q_and_gate;  // bf16 [tokens, q_heads, 2 * head_dim]
  const void* k;           // bf16 [tokens, k_heads, head_dim]
  const float* q_weight;   // f32 [head_dim], zero-centred (1 + w)
  const float* k_weight;   // f32 [head_dim], zero-centred
  void* q_out;             // bf16 [tokens, q_heads, head_dim]
  void* gate_out;          // bf16 [tokens, q_heads, head_dim]
  void* k_out;             // bf16 [tokens, k_heads, head_dim]
  int64_t tokens = 0;
  int64_t q_heads = 0;
  int64_t k_heads = 0;
  int64_t head_dim = 0;    // at most 1024 (a head is one warp's row)
  float eps = 1e-6f;
};
cudaError_t launch_attention_qk_norm(const AttentionQkNormParams& p, cudaStream_t stream);

}  // namespace di::kernels
