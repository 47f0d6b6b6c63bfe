#pragma once
// The GDN preparation on the GPU: the causal depthwise conv1d + SiLU with the conv state of each
// sequence, then the inputs of the chunked delta rule (q and k L2-normalised, v packed, the gates).
// Rounded as the CPU reference (kernels/gdn/prep_ref.h) rounds in a bf16 run.
#include <cuda_runtime.h>

#include <cstdint>

namespace di::gdn {

// The batch laid out as in the prefill ABI: sequence s owns rows cu_seqlens[s] .. cu_seqlens[s+1]-1.
struct ConvParams {
  const void* x;              // bf16 [N, C] pre-conv inputs (the in_proj_qkv output)
  const float* weight;        // f32 [C, K] conv taps (bf16-exact values)
  void* conv_state;           // bf16 pool [slots, C, K] of one layer: the K newest earlier inputs, oldest first
  const int32_t* cu_seqlens;  // int32 [num_seqs + 1]
  const int32_t* token_seq;   // int32 [N]: the sequence of each row
  const int32_t* seq_slot;    // int32 [num_seqs]: each sequence's slot in conv_state
  void* out;                  // bf16 [N, C]
  int64_t tokens = 0;         // N
  int32_t num_seqs = 0;
  int32_t channels = 0;       // C
  int32_t kernel = 0;         // K (4 in every Qwen3.5 model)
  // Every sequence has exactly one token (a decode step): one kernel then computes the output and
  // shifts the state, each thread owning one (sequence, channel); otherwise a second kernel updates
  // the states after the conv has read them.
  bool one_token_each = false;
};
// out[t, c] = bf16(silu(bf16(sum_j w[c, j] * ctx[c, i + 1 + j]))), ctx = [state | x of the sequence];
// then each sequence's state becomes the K newest inputs of its ctx.
cudaError_t launch_conv1d_silu(const ConvParams& p, cudaStream_t stream);

// Head dims multiples of 8 and every pointer 16-byte aligned (the kernel moves 16-byte vectors).
struct PrefillInputParams {
  const void* qkv;       // bf16 [N, 2*Hk*dk + Hv*dv] conv output [Q | K | V]
  const void* a;         // bf16 [N, Hv]
  const void* b;         // bf16 [N, Hv]
  const float* A_log;    // f32 [Hv]
  const float* dt_bias;  // f32 [Hv]
  void* q;               // bf16 [N, Hk, dk]  q / ||q|| (the kernel applies dk^-0.5 to its output)
  void* k;               // bf16 [N, Hk, dk]  k / ||k||  (both raw when normalize_qk is off)
  void* v;               // bf16 [N, Hv, dv]
  float* g;              // f32 [N, Hv]  -exp(A_log) * softplus(a + dt_bias)
  float* beta;           // f32 [N, Hv]  bf16(sigmoid(b))
  int64_t tokens = 0;
  int32_t num_k_heads = 0, num_v_heads = 0, k_dim = 0, v_dim = 0;
  // Off: q and k are copied as they are, for a backend that normalises them itself in float32
  // (DI_GDN_QK_L2NORM), which saves the bf16 rounding of the normalised rows.
  bool normalize_qk = true;
};
cudaError_t launch_prefill_inputs(const PrefillInputParams& p, cudaStream_t stream);

}  // namespace di::gdn
