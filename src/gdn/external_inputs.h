#pragma once
// What a GDN prefill kernel from elsewhere needs beyond deltainfer's prefill ABI, made on the GPU in
// the caller's scratch: FlashInfer's SM90 kernel takes the decay as exp(g) rather than the log decay,
// slot lists for reading and for writing states (negative: none), and q and k already L2-normalised.
#include <cuda_runtime.h>

#include <cstdint>

namespace di::gdn {

struct ExternalGdnInputs {
  const float* g = nullptr;               // f32 [N, Hv] log decay
  float* alpha = nullptr;                 // f32 [N, Hv] <- exp(g)
  int64_t gates = 0;                      // N * Hv
  const int32_t* state_indices = nullptr; // int32 [S] or NULL (slot i)
  const int32_t* cu_seqlens = nullptr;    // int32 [S + 1]
  bool read_initial = false;              // false: every read slot is -1 (zero initial state)
  bool write_final = false;               // false: every write slot is -1 (final state not written)
  int32_t* read_slot = nullptr;           // int32 [S]
  // The kernel writes the final states of the sequences with tokens (write_slot); those of the
  // zero-length ones, which it would fill with NaN, are written by launch_state_copy_through from
  // pass_slot. Each is -1 where the other writes.
  int32_t* write_slot = nullptr;          // int32 [S]
  int32_t* pass_slot = nullptr;           // int32 [S]
  int32_t num_seqs = 0;                   // S
  // q and k rows normalised into q_out/k_out (x / sqrt(sum x^2 + 1e-6), float32, rounded to bf16), as
  // FlashInfer's own wrapper does before its kernel; skipped when q_out is NULL.
  const void* q = nullptr;
  const void* k = nullptr;
  void* q_out = nullptr;
  void* k_out = nullptr;
  int64_t qk_rows = 0;                    // N * Hk
  int32_t head_dim = 0;
};
cudaError_t launch_external_gdn_inputs(const ExternalGdnInputs& p, cudaStream_t stream);

// Zero-length sequences: each final state is its initial state (zero when read slot < 0), written
// where write slot >= 0. `floats_per_slot` = Hv * K * V; the two pools share their layout.
struct StateCopyThrough {
  const float* initial = nullptr;
  float* final = nullptr;
  const int32_t* read_slot = nullptr;
  const int32_t* write_slot = nullptr;
  int32_t num_seqs = 0;
  int64_t floats_per_slot = 0;
};
cudaError_t launch_state_copy_through(const StateCopyThrough& p, cudaStream_t stream);

}  // namespace di::gdn
