#pragma once
// The GDN decode step: one new token per sequence, with the q/k L2 norms and the gates fused in.
// Per sequence and value head h (key head h / (Hv/Hk)), state S [K, V] in a float32 slot pool:
//   q = q_raw * rsqrt(|q_raw|^2 + 1e-6),  k likewise                 (float32, not rounded)
//   g = -exp(A_log[h]) * softplus(a + dt_bias[h]),  beta = bf16(sigmoid(b))   (kernels/gdn/prep_ref.h)
//   S <- exp(g) S;   v' = beta (v - Sᵀ k);   S <- S + k v'ᵀ;   o = scale Sᵀ q
// and, when asked, the GDN output norm of o (kernels/norm/norm.h launch_gated_rms_norm, bit for bit):
//   out = bf16(bf16(w * bf16(o * rsqrt(mean(o^2) + eps))) * silu(z)),  o rounded to bf16 first
// Serves K == V == 128 (any Hk, Hv with Hv % Hk == 0), both state layouts of include/deltainfer/gdn.h.
#include <cuda_runtime.h>

#include <cstdint>

#include <deltainfer/gdn.h>

namespace di::gdn {

struct GdnDecodeParams {
  di_gdn_geometry geometry;
  di_gdn_state_layout state_layout;
  int32_t num_seqs;
  // bf16 [num_seqs, row]: the conv + SiLU output row of each sequence, [q (Hk*K) | k (Hk*K) | v (Hv*V)],
  // q and k not yet normalised. qkv_row_stride counts elements (bf16) between sequences' rows.
  const void* qkv;
  int64_t qkv_row_stride;
  const void* a;  // bf16 [num_seqs, Hv] raw projections
  const void* b;  // bf16 [num_seqs, Hv]
  const float* A_log;    // f32 [Hv]
  const float* dt_bias;  // f32 [Hv]
  // f32 pool [slots, Hv, K, V] or [slots, Hv, V, K], updated in place. state_indices: int32 [num_seqs],
  // the slot of sequence i (NULL: slot i); a negative entry marks a padding row: its state is neither
  // read nor written and its output is zero.
  float* state;
  const int32_t* state_indices;
  void* out;    // bf16 [num_seqs, Hv, V]: o, or the normed output when norm_weight is set
  float scale;  // usually K^-0.5
  // The output norm, fused in when norm_weight is set: z bf16 [num_seqs, Hv, V] (the output gate),
  // norm_weight f32 [V] (a plain weight). Two CTAs hold a head's halves, so the step then runs in
  // clusters of two that exchange their halves of o through distributed shared memory.
  const void* z = nullptr;
  const float* norm_weight = nullptr;
  float norm_eps = 1e-6f;
};

// Enqueues the step on the stream. cudaErrorInvalidValue (nothing launched) for an unsupported
// geometry or layout, a negative count, a NULL pointer that must be set, or pointers that break the
// vector accesses: qkv and out 8-byte aligned with qkv_row_stride a multiple of 4, state 16-byte
// aligned; with norm_weight set, z must be set and 8-byte aligned and norm_weight 16-byte aligned.
// cudaErrorNotSupported for the fused norm on a device without thread block clusters (before compute
// capability 9.0). Otherwise the launch status. No host synchronisation, no allocation.
cudaError_t launch_gdn_decode_step(const GdnDecodeParams& p, cudaStream_t stream);
// Whether the current device runs the step with the output norm fused in (norm_weight set).
bool gdn_decode_step_fuses_output_norm();

}  // namespace di::gdn
