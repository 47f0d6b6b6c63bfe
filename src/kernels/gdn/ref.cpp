// CPU reference of the gated delta rule: the recurrent and the chunked form (see ref.h).
//
// Both forms loop over value heads outermost and keep one head's state [dk, dv] hot while they walk
// its tokens; inner loops run along dv or dk, the contiguous axes. Single-threaded on purpose: the
// oracle's tests make many small calls, where a parallel region's start-up and spin-waiting cost
// more than they save (measured on the 2-core CI machine).
#include "kernels/gdn/ref.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "core/error.h"

namespace di::gdn_ref {
namespace {

void check_shape(const DeltaRuleShape& s, const char* who) {
  if (s.n_tokens < 0) fail("{}: n_tokens must be >= 0, got {}", who, s.n_tokens);
  if (s.num_k_heads <= 0) fail("{}: num_k_heads must be positive, got {}", who, s.num_k_heads);
  if (s.num_v_heads <= 0) fail("{}: num_v_heads must be positive, got {}", who, s.num_v_heads);
  if (s.k_dim <= 0) fail("{}: k_dim must be positive, got {}", who, s.k_dim);
  if (s.v_dim <= 0) fail("{}: v_dim must be positive, got {}", who, s.v_dim);
  if (s.num_v_heads % s.num_k_heads != 0)
    fail("{}: num_v_heads ({}) must be a multiple of num_k_heads ({})", who, s.num_v_heads, s.num_k_heads);
}

template <typename Real>
void check_pointers(const DeltaRuleShape& s, const char* who, const Real* q, const Real* k, const Real* v,
                    const Real* g, const Real* beta, const Real* state, const Real* out) {
  if (s.n_tokens == 0) return;  // nothing is read or written
  const struct {
    const char* name;
    const void* ptr;
  } args[] = {{"q", q}, {"k", k}, {"v", v}, {"g", g}, {"beta", beta}, {"state", state}, {"out", out}};
  for (const auto& a : args)
    if (a.ptr == nullptr) fail("{}: {} is null with n_tokens = {}", who, a.name, s.n_tokens);
}

}  // namespace

template <typename Real>
void delta_rule_recurrent(const DeltaRuleShape& shape, const Real* q, const Real* k, const Real* v, const Real* g,
                          const Real* beta, Real* state, Real* out) {
  constexpr const char* who = "gdn_ref::delta_rule_recurrent";
  check_shape(shape, who);
  check_pointers(shape, who, q, k, v, g, beta, state, out);
  const int64_t T = shape.n_tokens, Hk = shape.num_k_heads, Hv = shape.num_v_heads;
  const int64_t dk = shape.k_dim, dv = shape.v_dim;
  const int64_t group = Hv / Hk;  // value heads per key head

  for (int64_t h = 0; h < Hv; ++h) {
    const int64_t kh = h / group;
    Real* S = state + h * dk * dv;  // [dk, dv]
    std::vector<Real> m(dv), delta(dv);
    for (int64_t t = 0; t < T; ++t) {
      const Real* q_t = q + (t * Hk + kh) * dk;  // [dk]
      const Real* k_t = k + (t * Hk + kh) * dk;  // [dk]
      const Real* v_t = v + (t * Hv + h) * dv;   // [dv]
      const Real decay = std::exp(g[t * Hv + h]);
      const Real beta_t = beta[t * Hv + h];
      Real* o_t = out + (t * Hv + h) * dv;  // [dv]

      // S' = exp(g_t) S;   m = S'^T k_t   (m[j] = Σ_i S'[i,j] k_t[i])
      std::fill(m.begin(), m.end(), Real(0));
      for (int64_t i = 0; i < dk; ++i) {
        Real* S_i = S + i * dv;
        for (int64_t j = 0; j < dv; ++j) {
          S_i[j] *= decay;
          m[j] += S_i[j] * k_t[i];
        }
      }
      // delta = beta_t (v_t - m)
      for (int64_t j = 0; j < dv; ++j) delta[j] = beta_t * (v_t[j] - m[j]);
      // S_t = S' + k_t ⊗ delta;   o_t = S_t^T q_t   (the token sees its own write)
      std::fill(o_t, o_t + dv, Real(0));
      for (int64_t i = 0; i < dk; ++i) {
        Real* S_i = S + i * dv;
        for (int64_t j = 0; j < dv; ++j) {
          S_i[j] += k_t[i] * delta[j];
          o_t[j] += S_i[j] * q_t[i];
        }
      }
    }
  }
}

template <typename Real>
void delta_rule_chunked(const DeltaRuleShape& shape, const Real* q, const Real* k, const Real* v, const Real* g,
                        const Real* beta, Real* state, Real* out, int64_t chunk) {
  constexpr const char* who = "gdn_ref::delta_rule_chunked";
  check_shape(shape, who);
  if (chunk <= 0) fail("{}: chunk must be positive, got {}", who, chunk);
  check_pointers(shape, who, q, k, v, g, beta, state, out);
  const int64_t T = shape.n_tokens, Hk = shape.num_k_heads, Hv = shape.num_v_heads;
  const int64_t dk = shape.k_dim, dv = shape.v_dim;
  const int64_t group = Hv / Hk;  // value heads per key head
  const int64_t C = std::min(chunk, std::max<int64_t>(T, 1));  // no chunk is longer than the sequence

  // A chunk shorter than C (the last one) is handled with L < C rows. Zero-padding it to C rows
  // (q = k = v = beta = g = 0) would add rows that change nothing: their k and beta are 0, so their
  // rows and columns of A are 0, their U, W and V' rows are 0, they add nothing to O or S_next, and
  // their γ equals γ_{L-1} (g = 0), so γ_last is the same. Every sum below therefore has the terms
  // of the padded computation, in the same order, less trailing terms that are exactly zero.
  for (int64_t h = 0; h < Hv; ++h) {
    const int64_t kh = h / group;
    Real* S = state + h * dk * dv;  // [dk, dv], the state entering the current chunk
    // Scratch for one chunk of L <= C rows; matrices are row-major.
    std::vector<Real> K(C * dk);       // [L, dk]  k rows of the chunk
    std::vector<Real> Q(C * dk);       // [L, dk]  q rows
    std::vector<Real> Kb(C * dk);      // [L, dk]  β ⊙ K
    std::vector<Real> b(C);            // [L]      β
    std::vector<Real> gamma(C);        // [L]      γ_r = Σ_{s<=r} g_s (in-chunk cumulative log decay)
    std::vector<Real> A(C * C);        // [L, L]   strictly lower part used
    std::vector<Real> P(C * C);        // [L, L]   lower part (diagonal included) used
    std::vector<Real> U(C * dv);       // [L, dv]
    std::vector<Real> W(C * dk);       // [L, dk]
    std::vector<Real> Vn(C * dv);      // [L, dv]  V' ("v_new")
    std::vector<Real> k_decay(C);      // [L]      exp(γ_last - γ_r)

    for (int64_t t0 = 0; t0 < T; t0 += C) {
      const int64_t L = std::min(C, T - t0);

      // Gather the chunk's rows; γ = cumsum(g) inside the chunk.
      Real cumsum = 0;
      for (int64_t r = 0; r < L; ++r) {
        const int64_t t = t0 + r;
        const Real* k_t = k + (t * Hk + kh) * dk;
        const Real* q_t = q + (t * Hk + kh) * dk;
        b[r] = beta[t * Hv + h];
        for (int64_t i = 0; i < dk; ++i) {
          K[r * dk + i] = k_t[i];
          Q[r * dk + i] = q_t[i];
          Kb[r * dk + i] = k_t[i] * b[r];
        }
        cumsum += g[t * Hv + h];
        gamma[r] = cumsum;
      }

      // A[r,s] = β_r (k_r·k_s) exp(γ_r - γ_s) for s < r;   P[r,s] = (q_r·k_s) exp(γ_r - γ_s) for s <= r.
      // Only s <= r is visited, so exp never sees a positive argument (the mask comes before exp).
      for (int64_t r = 0; r < L; ++r) {
        for (int64_t s = 0; s <= r; ++s) {
          const Real pair_decay = std::exp(gamma[r] - gamma[s]);
          Real kbk = 0, qk = 0;
          for (int64_t i = 0; i < dk; ++i) {
            kbk += Kb[r * dk + i] * K[s * dk + i];
            qk += Q[r * dk + i] * K[s * dk + i];
          }
          if (s < r) A[r * C + s] = kbk * pair_decay;
          P[r * C + s] = qk * pair_decay;
        }
      }

      // U = T (β ⊙ V) and W = T (β ⊙ K ⊙ exp(γ)) with T = (I + A)^-1: solve the unit lower-triangular
      // systems (I + A) X = B by forward substitution, X[r] = B[r] - Σ_{s<r} A[r,s] X[s].
      for (int64_t r = 0; r < L; ++r) {
        Real* U_r = U.data() + r * dv;
        Real* W_r = W.data() + r * dk;
        const Real* v_r = v + ((t0 + r) * Hv + h) * dv;
        const Real decay_r = std::exp(gamma[r]);
        for (int64_t j = 0; j < dv; ++j) U_r[j] = v_r[j] * b[r];
        for (int64_t i = 0; i < dk; ++i) W_r[i] = Kb[r * dk + i] * decay_r;
        for (int64_t s = 0; s < r; ++s) {
          const Real a = A[r * C + s];
          const Real* U_s = U.data() + s * dv;
          const Real* W_s = W.data() + s * dk;
          for (int64_t j = 0; j < dv; ++j) U_r[j] -= a * U_s[j];
          for (int64_t i = 0; i < dk; ++i) W_r[i] -= a * W_s[i];
        }
      }

      // V' = U - W S
      for (int64_t r = 0; r < L; ++r) {
        Real* Vn_r = Vn.data() + r * dv;
        std::copy(U.begin() + r * dv, U.begin() + (r + 1) * dv, Vn_r);
        for (int64_t i = 0; i < dk; ++i) {
          const Real w = W[r * dk + i];
          const Real* S_i = S + i * dv;
          for (int64_t j = 0; j < dv; ++j) Vn_r[j] -= w * S_i[j];
        }
      }

      // O = (Q ⊙ exp(γ)) S + P V'
      for (int64_t r = 0; r < L; ++r) {
        Real* o_r = out + ((t0 + r) * Hv + h) * dv;
        const Real decay_r = std::exp(gamma[r]);
        std::fill(o_r, o_r + dv, Real(0));
        for (int64_t i = 0; i < dk; ++i) {
          const Real qe = Q[r * dk + i] * decay_r;
          const Real* S_i = S + i * dv;
          for (int64_t j = 0; j < dv; ++j) o_r[j] += qe * S_i[j];
        }
        for (int64_t s = 0; s <= r; ++s) {
          const Real p = P[r * C + s];
          const Real* Vn_s = Vn.data() + s * dv;
          for (int64_t j = 0; j < dv; ++j) o_r[j] += p * Vn_s[j];
        }
      }

      // S_next = exp(γ_last) S + (K ⊙ exp(γ_last - γ))^T V'
      const Real gamma_last = gamma[L - 1];
      const Real decay_last = std::exp(gamma_last);
      for (int64_t r = 0; r < L; ++r) k_decay[r] = std::exp(gamma_last - gamma[r]);
      for (int64_t i = 0; i < dk; ++i) {
        Real* S_i = S + i * dv;
        for (int64_t j = 0; j < dv; ++j) S_i[j] *= decay_last;
        for (int64_t r = 0; r < L; ++r) {
          const Real ke = K[r * dk + i] * k_decay[r];
          const Real* Vn_r = Vn.data() + r * dv;
          for (int64_t j = 0; j < dv; ++j) S_i[j] += ke * Vn_r[j];
        }
      }
    }
  }
}

template void delta_rule_recurrent<float>(const DeltaRuleShape&, const float*, const float*, const float*,
                                          const float*, const float*, float*, float*);
template void delta_rule_recurrent<double>(const DeltaRuleShape&, const double*, const double*, const double*,
                                           const double*, const double*, double*, double*);
template void delta_rule_chunked<float>(const DeltaRuleShape&, const float*, const float*, const float*,
                                        const float*, const float*, float*, float*, int64_t);
template void delta_rule_chunked<double>(const DeltaRuleShape&, const double*, const double*, const double*,
                                         const double*, const double*, double*, double*, int64_t);

}  // namespace di::gdn_ref
