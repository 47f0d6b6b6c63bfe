#pragma once
// Partial rotary embedding (NeoX halves) on bf16 q and k in place, rounded as the CPU reference
// (kernels/rope/ref.h): cos and sin rounded to bf16, each product and each sum rounded.
#include <cuda_runtime.h>

#include <cstdint>

namespace di::kernels {

struct RopeParams {
  void* x;                  // bf16 [tokens, heads, head_dim], rotated in place
  const int32_t* positions; // int32 [tokens]
  int64_t tokens = 0;
  int64_t heads = 0;
  // Optional: a second tensor of the same tokens rotated in the same launch (k beside q).
  void* x2 = nullptr;       // bf16 [tokens, heads2, head_dim]
  int64_t heads2 = 0;
  int64_t head_dim = 0;
  int64_t rotary_dim = 0;   // the first rotary_dim dims of each head rotate; even, <= head_dim, <= 8192
  float theta = 10000.0f;
};
cudaError_t launch_rope(const RopeParams& p, cudaStream_t stream);

}  // namespace di::kernels
