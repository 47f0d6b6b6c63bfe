#pragma once
// CPU reference ("oracle") of the gated delta rule, the recurrence inside a Gated DeltaNet layer
// (docs QWEN35.md 3.3, 4.1, 4.2). Two forms that are equal mathematically:
//   - delta_rule_recurrent: the token-by-token recurrence (Hugging Face torch_recurrent_gated_delta_rule);
//   - delta_rule_chunked:   the chunk-parallel form (Hugging Face torch_chunk_gated_delta_rule, new
//                           form: pairwise decays masked before exp, triangular solve).
// Plain loops, all arithmetic in Real; instantiated for float and double (double is the oracle that
// the CUDA kernels and the float path are checked against).
//
// Per value head h, with key head h / (Hv/Hk) (repeat_interleave of the key heads), state S [dk, dv]:
//   S' = exp(g_t) S;   delta = beta_t (v_t - S'^T k_t);   S_t = S' + k_t ⊗ delta;   o_t = S_t^T q_t
#include <cstdint>

namespace di::gdn_ref {

struct DeltaRuleShape {
  int64_t n_tokens;                  // T of this sequence
  int64_t num_k_heads, num_v_heads;  // Hk, Hv; Hv % Hk == 0; value head h uses key head h / (Hv/Hk)
  int64_t k_dim, v_dim;              // dk, dv
};

// Layouts (row-major, last index fastest):
//   q, k:  [T, Hk, dk]  already L2-normalised; q already scaled by dk^-0.5 (the caller does that)
//   v:     [T, Hv, dv]
//   g:     [T, Hv]      log decay, <= 0
//   beta:  [T, Hv]
//   state: [Hv, dk, dv] K rows, V contiguous (the Hugging Face orientation); read as the initial
//                       state and overwritten with the final state. T == 0 leaves it unchanged.
//   out:   [T, Hv, dv]
// Throws di::Error when the shape is invalid (non-positive head counts or dims, T < 0, Hv % Hk != 0).
template <typename Real>
void delta_rule_recurrent(const DeltaRuleShape& shape, const Real* q, const Real* k, const Real* v, const Real* g,
                          const Real* beta, Real* state, Real* out);

// Same contract; `chunk` is the chunk length C (Hugging Face uses 64). A last chunk shorter than C is
// handled directly, which gives the same result as zero-padding it to C.
template <typename Real>
void delta_rule_chunked(const DeltaRuleShape& shape, const Real* q, const Real* k, const Real* v, const Real* g,
                        const Real* beta, Real* state, Real* out, int64_t chunk = 64);

// Both are instantiated for float and double in ref.cpp.

}  // namespace di::gdn_ref
