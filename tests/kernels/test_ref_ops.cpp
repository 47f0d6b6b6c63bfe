// Tests of the CPU reference ops against float64 oracles written here from the definitions in
// QWEN35.md sections 3.1-3.6 and 4.3 (none of them calls the code under test):
//   - linear (bf16 and f32 weights), rms_norm (1 + w), gated_rms_norm (w, times silu(z)), swiglu;
//   - rope: identity at position 0, pass-through above rotary_dim, norm preservation, the rotation
//     at positions up to 300000;
//   - causal_attention: one key, GQA against the oracle with n_past > 0, causality;
//   - causal_conv1d_silu: zero and random initial state, split calls, the carried state;
//   - gdn_gates and l2_normalize;
//   - in a bf16 run, every rounded output is a bf16 value.
// Sizes are odd on purpose (rows 1, 3, 65; dims 1, 7, 64, 257). Outputs are poisoned with NaN before
// each call, so an element the op does not write fails. Inputs are fresh random numbers each run;
// the seed is printed with every failure, and the environment variable DI_TEST_SEED replays it.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "core/bf16.h"
#include "core/error.h"
#include "core/tensor.h"
#include "kernels/attention/ref.h"
#include "kernels/gdn/prep_ref.h"
#include "kernels/gemm/ref.h"
#include "kernels/mlp/ref.h"
#include "kernels/norm/ref.h"
#include "kernels/numerics.h"
#include "kernels/rope/ref.h"
#include "support/seed.h"
#include "support/tolerance.h"

namespace di {
namespace {

using di::testing::all_close;
using di::testing::compare_close;
using di::testing::kExactF32;
using di::testing::kF32VsF64;
using di::testing::poison;
using di::testing::Tolerance;

using di::testing::fresh_seed;
using di::testing::seed_trace;

// all_close, plus the measured error recorded as test properties (visible with --gtest_output=xml).
template <typename A, typename B>
void expect_close(const std::vector<A>& actual, const std::vector<B>& expected, Tolerance tol,
                  const std::string& what) {
  EXPECT_TRUE(all_close(actual, expected, tol, what));
  const auto r = compare_close(std::span<const A>(actual), std::span<const B>(expected), tol);
  ::testing::Test::RecordProperty(what + ".max_abs_error", fmt::format("{:.3g}", r.max_abs_error));
  ::testing::Test::RecordProperty(what + ".worst_vs_allowed", fmt::format("{:.3g}", r.worst_ratio));
}

// A tolerance row whose atol is given per unit of some size (see tolerance.h), scaled to that size.
Tolerance scale_atol(Tolerance t, double factor) { return {t.atol * factor, t.rtol, t.name}; }

std::vector<float> uniform(int64_t n, std::mt19937& rng, float lo = -1.0f, float hi = 1.0f) {
  std::uniform_real_distribution<float> d(lo, hi);
  std::vector<float> v(static_cast<size_t>(n));
  for (auto& x : v) x = d(rng);
  return v;
}

std::vector<float> normal(int64_t n, std::mt19937& rng, float sigma = 1.0f) {
  std::normal_distribution<float> d(0.0f, sigma);
  std::vector<float> v(static_cast<size_t>(n));
  for (auto& x : v) x = d(rng);
  return v;
}

std::vector<float> nans(int64_t n) {
  std::vector<float> v(static_cast<size_t>(n));
  poison(v);
  return v;
}

double silu64(double x) { return x / (1.0 + std::exp(-x)); }
double sigmoid64(double x) { return 1.0 / (1.0 + std::exp(-x)); }
double softplus64(double x) { return x > 20.0 ? x : std::log1p(std::exp(x)); }  // PyTorch, threshold 20

// A weight tensor over a local buffer, in bf16 or f32. `value(i)` is the element as the op must read
// it: the bf16 value decoded, or the f32 value (rounded to bf16 in a bf16 run).
struct Weight {
  DType dtype = DType::f32;
  Shape shape;
  std::vector<float> f32;
  std::vector<uint16_t> bf16;

  TensorView view() const {
    return {dtype == DType::bf16 ? static_cast<const void*>(bf16.data()) : static_cast<const void*>(f32.data()),
            dtype, shape, Device::cpu};
  }
  double value(int64_t i, Precision p = Precision::f32) const {
    if (dtype == DType::bf16) return double(bf16_to_f32(bf16[size_t(i)]));
    return p == Precision::bf16 ? double(round_bf16(f32[size_t(i)])) : double(f32[size_t(i)]);
  }
};

Weight make_weight(Shape shape, DType dtype, const std::vector<float>& values) {
  Weight w;
  w.dtype = dtype;
  w.shape = std::move(shape);
  if (dtype == DType::bf16) {
    for (float x : values) w.bf16.push_back(f32_to_bf16(x));
  } else {
    w.f32 = values;
  }
  return w;
}

const char* dtype_str(DType d) { return d == DType::bf16 ? "bf16" : "f32"; }

// =============================================================================================
// linear

// y[n, o] = sum_i x[n, i] W[o, i].
std::vector<double> linear64(const std::vector<float>& x, int64_t rows, int64_t in, const Weight& w) {
  const int64_t out = w.shape[0];
  std::vector<double> y(size_t(rows * out));
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t o = 0; o < out; ++o) {
      double acc = 0;
      for (int64_t i = 0; i < in; ++i) acc += double(x[r * in + i]) * w.value(o * in + i);
      y[r * out + o] = acc;
    }
  return y;
}

TEST(RefOps, LinearMatchesF64) {
  const uint32_t seed = fresh_seed();
  SCOPED_TRACE(seed_trace(seed));
  std::mt19937 rng(seed);
  for (DType dtype : {DType::bf16, DType::f32})
    for (int64_t rows : {1, 3, 65})
      for (int64_t in : {1, 7, 64, 257, 1000})
        for (int64_t out : {1, 7, 33}) {
          const std::string what = fmt::format("linear {} rows {} in {} out {}", dtype_str(dtype), rows, in, out);
          SCOPED_TRACE(what);
          const auto x = uniform(rows * in, rng);
          const Weight w = make_weight({out, in}, dtype, uniform(out * in, rng));
          auto y = nans(rows * out);
          ref::linear(x.data(), rows, in, w.view(), y.data(), Precision::f32);
          expect_close(y, linear64(x, rows, in, w), scale_atol(di::testing::kF32DotVsF64, std::sqrt(double(in))),
                       what);
        }
}

TEST(RefOps, LinearRejectsWrongShape) {
  const std::vector<float> x(6, 1.0f), wbuf(12, 1.0f);
  std::vector<float> y(8);
  const TensorView w{wbuf.data(), DType::f32, {4, 3}, Device::cpu};
  EXPECT_THROW(ref::linear(x.data(), 2, 2, w, y.data(), Precision::f32), Error);
  const TensorView w1{wbuf.data(), DType::f32, {12}, Device::cpu};
  EXPECT_THROW(ref::linear(x.data(), 2, 3, w1, y.data(), Precision::f32), Error);
}

// =============================================================================================
// rms_norm, gated_rms_norm, swiglu

constexpr double kEps = 1e-6;

TEST(RefOps, RmsNormMatchesF64) {
  const uint32_t seed = fresh_seed();
  SCOPED_TRACE(seed_trace(seed));
  std::mt19937 rng(seed);
  for (DType dtype : {DType::bf16, DType::f32})
    for (int64_t rows : {1, 3, 65})
      for (int64_t dim : {1, 7, 64, 257}) {
        const std::string what = fmt::format("rms_norm {} rows {} dim {}", dtype_str(dtype), rows, dim);
        SCOPED_TRACE(what);
        auto x = normal(rows * dim, rng, 3.0f);
        const Weight w = make_weight({dim}, dtype, uniform(dim, rng, -0.5f, 0.5f));
        auto y = nans(rows * dim);
        ref::rms_norm(x.data(), rows, dim, w.view(), kEps, y.data(), Precision::f32);
        std::vector<double> want(y.size());
        for (int64_t r = 0; r < rows; ++r) {
          double ss = 0;
          for (int64_t i = 0; i < dim; ++i) ss += double(x[r * dim + i]) * double(x[r * dim + i]);
          const double s = 1.0 / std::sqrt(ss / double(dim) + kEps);
          for (int64_t i = 0; i < dim; ++i) want[r * dim + i] = double(x[r * dim + i]) * s * (1.0 + w.value(i));
        }
        expect_close(y, want, kF32VsF64, what);
      }
}

TEST(RefOps, GatedRmsNormMatchesF64) {
  const uint32_t seed = fresh_seed();
  SCOPED_TRACE(seed_trace(seed));
  std::mt19937 rng(seed);
  for (DType dtype : {DType::bf16, DType::f32})
    for (int64_t rows : {1, 3, 65})
      for (int64_t dim : {1, 7, 64, 257}) {
        const std::string what = fmt::format("gated_rms_norm {} rows {} dim {}", dtype_str(dtype), rows, dim);
        SCOPED_TRACE(what);
        const auto x = normal(rows * dim, rng, 0.5f);
        const auto z = normal(rows * dim, rng, 2.0f);
        const Weight w = make_weight({dim}, dtype, uniform(dim, rng, 0.5f, 1.5f));
        auto y = nans(rows * dim);
        ref::gated_rms_norm(x.data(), z.data(), rows, dim, w.view(), kEps, y.data(), Precision::f32);
        std::vector<double> want(y.size());
        for (int64_t r = 0; r < rows; ++r) {
          double ss = 0;
          for (int64_t i = 0; i < dim; ++i) ss += double(x[r * dim + i]) * double(x[r * dim + i]);
          const double s = 1.0 / std::sqrt(ss / double(dim) + kEps);
          for (int64_t i = 0; i < dim; ++i)
            want[r * dim + i] = w.value(i) * (double(x[r * dim + i]) * s) * silu64(double(z[r * dim + i]));
        }
        expect_close(y, want, kF32VsF64, what);
      }
}

TEST(RefOps, SwigluMatchesF64) {
  const uint32_t seed = fresh_seed();
  SCOPED_TRACE(seed_trace(seed));
  std::mt19937 rng(seed);
  for (int64_t n : {1, 7, 257, 4099}) {
    const auto gate = normal(n, rng, 4.0f), up = normal(n, rng);
    auto y = nans(n);
    ref::swiglu(gate.data(), up.data(), n, y.data(), Precision::f32);
    std::vector<double> want(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) want[i] = silu64(gate[i]) * double(up[i]);
    expect_close(y, want, kF32VsF64, fmt::format("swiglu n {}", n));
  }
}

// =============================================================================================
// rope

struct RopeShape {
  int64_t heads, head_dim, rotary_dim;
  double theta;
};

// The Qwen3.5 shape (64 of 256, theta 1e7), one where 2i/rotary_dim is not exact in float32, a
// full-width rotation, and an odd head_dim.
const RopeShape kRopeShapes[] = {{3, 256, 64, 1e7}, {2, 40, 24, 1e4}, {1, 8, 8, 1e7}, {2, 7, 6, 1e6}};

TEST(RefOps, RopeIdentityAtPositionZeroAndPassThroughAboveRotaryDim) {
  const uint32_t seed = fresh_seed();
  SCOPED_TRACE(seed_trace(seed));
  std::mt19937 rng(seed);
  for (const RopeShape& s : kRopeShapes) {
    SCOPED_TRACE(fmt::format("head_dim {} rotary_dim {}", s.head_dim, s.rotary_dim));
    const std::vector<int64_t> positions{0, 5, 0, 123456};
    const int64_t tokens = int64_t(positions.size()), row = s.heads * s.head_dim;
    const auto x0 = normal(tokens * row, rng);
    auto x = x0;
    ref::rope(x.data(), tokens, s.heads, s.head_dim, s.rotary_dim, positions.data(), s.theta, Precision::f32);
    // Position 0: cos 1, sin 0, so a * 1 + (-b * 0) is a bit for bit.
    for (int64_t t : {0, 2}) {
      const std::vector<float> got(x.begin() + t * row, x.begin() + (t + 1) * row);
      const std::vector<float> want(x0.begin() + t * row, x0.begin() + (t + 1) * row);
      EXPECT_TRUE(all_close(got, want, kExactF32, fmt::format("position 0, token {}", t)));
    }
    // Dims from rotary_dim on are never touched, at any position.
    std::vector<float> got_tail, want_tail;
    for (int64_t t = 0; t < tokens; ++t)
      for (int64_t h = 0; h < s.heads; ++h)
        for (int64_t d = s.rotary_dim; d < s.head_dim; ++d) {
          got_tail.push_back(x[(t * s.heads + h) * s.head_dim + d]);
          want_tail.push_back(x0[(t * s.heads + h) * s.head_dim + d]);
        }
    if (!want_tail.empty()) {
      EXPECT_TRUE(all_close(got_tail, want_tail, kExactF32, "dims >= rotary_dim"));
    }
    // And the rotated part did change at the nonzero positions.
    EXPECT_NE(x[1 * row], x0[1 * row]);
  }
}

// Positions the rotation is checked at: small, around powers of two, the 262144 context of the 4B,
// and beyond.
const std::vector<int64_t> kPositions{0, 1, 2, 3, 7, 100, 1000, 4095, 4096, 32767, 100003, 262143, 262144, 300000};

TEST(RefOps, RopePreservesPairNorms) {
  const uint32_t seed = fresh_seed();
  SCOPED_TRACE(seed_trace(seed));
  std::mt19937 rng(seed);
  for (const RopeShape& s : kRopeShapes) {
    SCOPED_TRACE(fmt::format("head_dim {} rotary_dim {}", s.head_dim, s.rotary_dim));
    const int64_t tokens = int64_t(kPositions.size()), half = s.rotary_dim / 2;
    const auto x0 = normal(tokens * s.heads * s.head_dim, rng);
    auto x = x0;
    ref::rope(x.data(), tokens, s.heads, s.head_dim, s.rotary_dim, kPositions.data(), s.theta, Precision::f32);
    std::vector<float> got;
    std::vector<double> want;
    for (int64_t th = 0; th < tokens * s.heads; ++th)
      for (int64_t i = 0; i < half; ++i) {
        const int64_t a = th * s.head_dim + i, b = a + half;
        got.push_back(float(std::hypot(double(x[a]), double(x[b]))));
        want.push_back(std::hypot(double(x0[a]), double(x0[b])));
      }
    // cos and sin are each within an ulp of exact, so cos^2 + sin^2 = 1 to a few ulps at any angle.
    expect_close(got, want, kF32VsF64, "pair norms");
  }
}

TEST(RefOps, RopeMatchesF64Rotation) {
  const uint32_t seed = fresh_seed();
  SCOPED_TRACE(seed_trace(seed));
  std::mt19937 rng(seed);
  for (const RopeShape& s : kRopeShapes) {
    const int64_t tokens = int64_t(kPositions.size()), half = s.rotary_dim / 2, row = s.heads * s.head_dim;
    // Components in [-1, 1], so every (i, i + half) pair has norm <= sqrt(2).
    const auto x0 = uniform(tokens * row, rng);
    auto x = x0;
    ref::rope(x.data(), tokens, s.heads, s.head_dim, s.rotary_dim, kPositions.data(), s.theta, Precision::f32);
    for (int64_t t = 0; t < tokens; ++t) {
      const int64_t pos = kPositions[size_t(t)];
      const std::string what = fmt::format("rope head_dim {} rotary_dim {} position {}", s.head_dim, s.rotary_dim, pos);
      SCOPED_TRACE(what);
      std::vector<float> got(x.begin() + t * row, x.begin() + (t + 1) * row);
      std::vector<double> want(x0.begin() + t * row, x0.begin() + (t + 1) * row);
      for (int64_t h = 0; h < s.heads; ++h)
        for (int64_t i = 0; i < half; ++i) {
          const double f = double(pos) * std::pow(s.theta, -2.0 * double(i) / double(s.rotary_dim));
          const double a = x0[t * row + h * s.head_dim + i], b = x0[t * row + h * s.head_dim + i + half];
          want[h * s.head_dim + i] = a * std::cos(f) - b * std::sin(f);
          want[h * s.head_dim + i + half] = b * std::cos(f) + a * std::sin(f);
        }
      // Like transformers, the op computes the angle in float32: inv_freq and pos * inv_freq are
      // each rounded, so the angle is off by up to a few float32 ulps of pos * inv_freq, an error
      // that grows linearly with the position (about 0.02 rad at 300000). kF32RopeAngle's atol is
      // per unit of position; below position 1 the plain float32 error remains.
      expect_close(got, want, scale_atol(di::testing::kF32RopeAngle, std::max<double>(1.0, double(pos))), what);
    }
  }
}

// =============================================================================================
// causal_attention

// out[t, h] = sum_s softmax_s(scale * q[t, h] . k[s, h / group]) v[s, h / group] over s <= n_past + t.
std::vector<double> attention64(const std::vector<float>& q, const std::vector<float>& k, const std::vector<float>& v,
                                int64_t n_q, int64_t n_kv, int64_t Hq, int64_t Hkv, int64_t D, double scale) {
  const int64_t n_past = n_kv - n_q, group = Hq / Hkv;
  std::vector<double> out(size_t(n_q * Hq * D), 0.0);
  for (int64_t t = 0; t < n_q; ++t)
    for (int64_t h = 0; h < Hq; ++h) {
      const int64_t g = h / group, visible = n_past + t + 1;
      std::vector<double> logit(static_cast<size_t>(visible));
      for (int64_t s = 0; s < visible; ++s) {
        double dot = 0;
        for (int64_t d = 0; d < D; ++d) dot += double(q[(t * Hq + h) * D + d]) * double(k[(s * Hkv + g) * D + d]);
        logit[s] = dot * scale;
      }
      const double m = *std::max_element(logit.begin(), logit.end());
      double z = 0;
      for (double l : logit) z += std::exp(l - m);
      for (int64_t s = 0; s < visible; ++s) {
        const double p = std::exp(logit[s] - m) / z;
        for (int64_t d = 0; d < D; ++d) out[(t * Hq + h) * D + d] += p * double(v[(s * Hkv + g) * D + d]);
      }
    }
  return out;
}

TEST(RefOps, AttentionSingleKeyReturnsV) {
  const uint32_t seed = fresh_seed();
  SCOPED_TRACE(seed_trace(seed));
  std::mt19937 rng(seed);
  const int64_t Hq = 4, Hkv = 2, D = 7;
  const auto q = normal(Hq * D, rng, 3.0f), k = normal(Hkv * D, rng, 3.0f), v = normal(Hkv * D, rng);
  auto out = nans(Hq * D);
  ref::causal_attention(q.data(), k.data(), v.data(), 1, 1, Hq, Hkv, D, 1.0 / std::sqrt(double(D)), out.data(),
                        Precision::f32);
  std::vector<float> want;
  for (int64_t h = 0; h < Hq; ++h) want.insert(want.end(), v.begin() + (h / 2) * D, v.begin() + (h / 2 + 1) * D);
  EXPECT_TRUE(all_close(out, want, kExactF32, "one key: weight exactly 1"));
}

TEST(RefOps, AttentionMatchesF64) {
  const uint32_t seed = fresh_seed();
  SCOPED_TRACE(seed_trace(seed));
  std::mt19937 rng(seed);
  struct Heads {
    int64_t Hq, Hkv;
  };
  for (Heads hs : {Heads{4, 2}, Heads{2, 2}, Heads{3, 3}, Heads{4, 1}})
    for (int64_t D : {1, 7, 64})
      for (int64_t n_q : {1, 3, 9})
        for (int64_t n_past : {0, 1, 37}) {
          const int64_t n_kv = n_past + n_q;
          const std::string what =
              fmt::format("attention Hq {} Hkv {} D {} n_q {} n_past {}", hs.Hq, hs.Hkv, D, n_q, n_past);
          SCOPED_TRACE(what);
          const auto q = normal(n_q * hs.Hq * D, rng), k = normal(n_kv * hs.Hkv * D, rng);
          const auto v = normal(n_kv * hs.Hkv * D, rng);
          const double scale = 1.0 / std::sqrt(double(D));
          auto out = nans(n_q * hs.Hq * D);
          ref::causal_attention(q.data(), k.data(), v.data(), n_q, n_kv, hs.Hq, hs.Hkv, D, scale, out.data(),
                                Precision::f32);
          expect_close(out, attention64(q, k, v, n_q, n_kv, hs.Hq, hs.Hkv, D, scale), kF32VsF64, what);
        }
}

TEST(RefOps, AttentionIsCausal) {
  const uint32_t seed = fresh_seed();
  SCOPED_TRACE(seed_trace(seed));
  std::mt19937 rng(seed);
  const int64_t Hq = 4, Hkv = 2, D = 7, n_past = 4, n_q = 6, n_kv = n_past + n_q;
  const auto q = normal(n_q * Hq * D, rng), k = normal(n_kv * Hkv * D, rng), v = normal(n_kv * Hkv * D, rng);
  auto base = nans(n_q * Hq * D);
  ref::causal_attention(q.data(), k.data(), v.data(), n_q, n_kv, Hq, Hkv, D, 0.4, base.data(), Precision::f32);
  for (int64_t s = 0; s < n_kv; ++s) {
    SCOPED_TRACE(fmt::format("key/value at position {} changed", s));
    auto k2 = k, v2 = v;
    for (int64_t i = s * Hkv * D; i < (s + 1) * Hkv * D; ++i) {
      k2[i] += 1.5f;
      v2[i] -= 2.0f;
    }
    auto out = nans(n_q * Hq * D);
    ref::causal_attention(q.data(), k2.data(), v2.data(), n_q, n_kv, Hq, Hkv, D, 0.4, out.data(), Precision::f32);
    for (int64_t t = 0; t < n_q; ++t) {
      const std::vector<float> got(out.begin() + t * Hq * D, out.begin() + (t + 1) * Hq * D);
      const std::vector<float> was(base.begin() + t * Hq * D, base.begin() + (t + 1) * Hq * D);
      if (n_past + t < s)
        EXPECT_TRUE(all_close(got, was, kExactF32, fmt::format("query {} precedes the change", n_past + t)));
      else
        EXPECT_NE(got, was) << "query " << n_past + t << " sees position " << s << " but did not change";
    }
  }
}

// =============================================================================================
// causal_conv1d_silu

// y[t, c] = silu(sum_j w[c, j] x[t - (K - 1) + j, c]), x at negative times taken from the state
// (x[-1] is the newest state column, state[K - 1]). Also returns the new state: the K newest inputs
// of [state | x].
std::vector<double> conv64(const std::vector<float>& x, int64_t n, int64_t C, int64_t K, const Weight& w,
                           const std::vector<float>& state, std::vector<float>* new_state) {
  auto input = [&](int64_t t, int64_t c) {
    return t >= 0 ? double(x[t * C + c]) : double(state[c * K + (K + t)]);
  };
  std::vector<double> y(size_t(n * C));
  for (int64_t t = 0; t < n; ++t)
    for (int64_t c = 0; c < C; ++c) {
      double acc = 0;
      for (int64_t j = 0; j < K; ++j) acc += w.value(c * K + j) * input(t - (K - 1) + j, c);
      y[t * C + c] = silu64(acc);
    }
  new_state->assign(size_t(C * K), NAN);
  for (int64_t c = 0; c < C; ++c)
    for (int64_t j = 0; j < K; ++j) (*new_state)[c * K + j] = float(input(n - K + j, c));
  return y;
}

struct ConvCase {
  int64_t n, C, K;
};

// K = 4 is Qwen3.5's; K = 17 once overran a fixed float[16] of taps in the op (seen with
// -fsanitize=address; without it the overrun went unnoticed).
std::vector<ConvCase> conv_cases() {
  std::vector<ConvCase> cases;
  for (int64_t K : {1, 2, 4, 5, 17})
    for (int64_t C : {1, 5, 33})
      for (int64_t n : {1, 2, 3, 7, 20}) cases.push_back({n, C, K});
  return cases;
}

TEST(RefOps, CausalConvMatchesF64) {
  const uint32_t seed = fresh_seed();
  SCOPED_TRACE(seed_trace(seed));
  std::mt19937 rng(seed);
  for (DType dtype : {DType::bf16, DType::f32})
    for (const ConvCase& cc : conv_cases())
      for (bool random_state : {false, true}) {
        const std::string what = fmt::format("conv {} n {} C {} K {} {} state", dtype_str(dtype), cc.n, cc.C, cc.K,
                                             random_state ? "random" : "zero");
        SCOPED_TRACE(what);
        const auto x = normal(cc.n * cc.C, rng);
        const Weight w = make_weight({cc.C, 1, cc.K}, dtype, uniform(cc.C * cc.K, rng, -0.7f, 0.7f));
        auto state = random_state ? normal(cc.C * cc.K, rng) : std::vector<float>(size_t(cc.C * cc.K), 0.0f);
        std::vector<float> want_state;
        const auto want = conv64(x, cc.n, cc.C, cc.K, w, state, &want_state);
        auto y = nans(cc.n * cc.C);
        ref::causal_conv1d_silu(x.data(), cc.n, cc.C, cc.K, w.view(), state.data(), y.data(), Precision::f32);
        expect_close(y, want, kF32VsF64, what + " output");
        // The state holds inputs, copied: bit for bit the K newest of [old state | x].
        EXPECT_TRUE(all_close(state, want_state, kExactF32, what + " state"));
      }
}

TEST(RefOps, CausalConvStateIsTheNewestInputs) {
  // Explicit values: channel c, old state 100c + {1..K}, inputs 100c + {11, 12, ...}.
  const int64_t C = 2, K = 4;
  const Weight w = make_weight({C, 1, K}, DType::f32, std::vector<float>(size_t(C * K), 0.25f));
  for (int64_t n : {0, 1, 2, 3, 4, 6}) {
    SCOPED_TRACE(fmt::format("{} new inputs", n));
    std::vector<float> state(size_t(C * K)), x(size_t(n * C));
    for (int64_t c = 0; c < C; ++c) {
      for (int64_t j = 0; j < K; ++j) state[c * K + j] = float(100 * c + 1 + j);
      for (int64_t t = 0; t < n; ++t) x[t * C + c] = float(100 * c + 11 + t);
    }
    std::vector<float> want(size_t(C * K));
    for (int64_t c = 0; c < C; ++c) {
      std::vector<float> seq;  // [old state | x] of channel c
      for (int64_t j = 0; j < K; ++j) seq.push_back(state[c * K + j]);
      for (int64_t t = 0; t < n; ++t) seq.push_back(x[t * C + c]);
      std::copy(seq.end() - K, seq.end(), want.begin() + c * K);
    }
    auto y = nans(std::max<int64_t>(n * C, 1));
    ref::causal_conv1d_silu(x.data(), n, C, K, w.view(), state.data(), y.data(), Precision::f32);
    EXPECT_TRUE(all_close(state, want, kExactF32, "state"));
  }
}

TEST(RefOps, CausalConvSplitEqualsWhole) {
  const uint32_t seed = fresh_seed();
  SCOPED_TRACE(seed_trace(seed));
  std::mt19937 rng(seed);
  const int64_t n = 20, C = 33;
  for (int64_t K : {1, 4, 5})
    for (int64_t split : {1, 2, 3, 7, 19}) {
      const std::string what = fmt::format("conv K {} split at {}", K, split);
      SCOPED_TRACE(what);
      const auto x = normal(n * C, rng);
      const Weight w = make_weight({C, 1, K}, DType::bf16, uniform(C * K, rng));
      const auto state0 = normal(C * K, rng);
      auto whole_state = state0;
      auto whole = nans(n * C);
      ref::causal_conv1d_silu(x.data(), n, C, K, w.view(), whole_state.data(), whole.data(), Precision::f32);
      auto split_state = state0;
      auto parts = nans(n * C);
      ref::causal_conv1d_silu(x.data(), split, C, K, w.view(), split_state.data(), parts.data(), Precision::f32);
      ref::causal_conv1d_silu(x.data() + split * C, n - split, C, K, w.view(), split_state.data(),
                              parts.data() + split * C, Precision::f32);
      // The same products summed in the same order: bit for bit.
      EXPECT_TRUE(all_close(parts, whole, kExactF32, what + " output"));
      EXPECT_TRUE(all_close(split_state, whole_state, kExactF32, what + " state"));
    }
}

// =============================================================================================
// gdn_gates, l2_normalize

TEST(RefOps, GdnGatesMatchF64) {
  const uint32_t seed = fresh_seed();
  SCOPED_TRACE(seed_trace(seed));
  std::mt19937 rng(seed);
  for (DType dtype : {DType::bf16, DType::f32})
    for (int64_t Hv : {1, 5, 32})
      for (int64_t n : {1, 7, 65}) {
        const std::string what = fmt::format("gates {} Hv {} n {}", dtype_str(dtype), Hv, n);
        SCOPED_TRACE(what);
        const Weight A_log = make_weight({Hv}, dtype, uniform(Hv, rng, -3.0f, 2.5f));
        const Weight dt_bias = make_weight({Hv}, dtype, uniform(Hv, rng, -4.0f, 2.0f));
        const auto a = normal(n * Hv, rng, 3.0f), b = normal(n * Hv, rng, 3.0f);
        auto g = nans(n * Hv), beta = nans(n * Hv);
        ref::gdn_gates(a.data(), b.data(), n, Hv, A_log.view(), dt_bias.view(), g.data(), beta.data(),
                       Precision::f32);
        std::vector<double> want_g(g.size()), want_beta(g.size());
        for (int64_t t = 0; t < n; ++t)
          for (int64_t h = 0; h < Hv; ++h) {
            want_g[t * Hv + h] = -std::exp(A_log.value(h)) * softplus64(double(a[t * Hv + h]) + dt_bias.value(h));
            want_beta[t * Hv + h] = sigmoid64(double(b[t * Hv + h]));
          }
        expect_close(g, want_g, kF32VsF64, what + " g");
        expect_close(beta, want_beta, kF32VsF64, what + " beta");
        for (size_t i = 0; i < g.size(); ++i) {
          EXPECT_LE(g[i], 0.0f) << "g[" << i << "]";
          // |b| < 15 keeps sigmoid strictly inside (0, 1) in float32 (like PyTorch's float32
          // sigmoid, it saturates to exactly 0 or 1 further out).
          if (std::fabs(b[i]) < 15.0f) {
            EXPECT_GT(beta[i], 0.0f) << "beta[" << i << "]";
            EXPECT_LT(beta[i], 1.0f) << "beta[" << i << "]";
          }
        }
      }
}

TEST(RefOps, GdnGatesSoftplusThresholdAndExtremes) {
  // a + dt_bias: far below zero, below the threshold 20, at it, above it (25: softplus(x) = x), and
  // where exp(x) overflows float32 (100: without the threshold softplus would be inf).
  const std::vector<float> sums{-120.0f, -5.0f, 0.0f, 19.5f, 20.0f, 25.0f, 100.0f};
  const int64_t Hv = 2, n = int64_t(sums.size());
  const Weight A_log = make_weight({Hv}, DType::f32, {0.75f, -1.25f});
  const Weight dt_bias = make_weight({Hv}, DType::f32, {5.0f, -3.0f});
  std::vector<float> a(size_t(n * Hv)), b(size_t(n * Hv));
  for (int64_t t = 0; t < n; ++t)
    for (int64_t h = 0; h < Hv; ++h) {
      a[t * Hv + h] = sums[t] - float(dt_bias.value(h));  // exact: small integers and halves
      b[t * Hv + h] = sums[t];
    }
  auto g = nans(n * Hv), beta = nans(n * Hv);
  ref::gdn_gates(a.data(), b.data(), n, Hv, A_log.view(), dt_bias.view(), g.data(), beta.data(), Precision::f32);
  std::vector<double> want_g(g.size());
  for (int64_t t = 0; t < n; ++t)
    for (int64_t h = 0; h < Hv; ++h) want_g[t * Hv + h] = -std::exp(A_log.value(h)) * softplus64(double(sums[t]));
  expect_close(g, want_g, kF32VsF64, "g");
  // At 25 and 100 softplus is the identity: g = -exp(A_log) * x exactly as float32 computes it.
  for (int64_t h = 0; h < Hv; ++h) {
    const float decay = std::exp(float(A_log.value(h)));
    EXPECT_EQ(g[5 * Hv + h], -decay * 25.0f);
    EXPECT_EQ(g[6 * Hv + h], -decay * 100.0f);
  }
  for (size_t i = 0; i < g.size(); ++i) {
    EXPECT_LE(g[i], 0.0f);
    EXPECT_TRUE(std::isfinite(g[i])) << "g[" << i << "] = " << g[i];
    EXPECT_GE(beta[i], 0.0f);
    EXPECT_LE(beta[i], 1.0f);
    EXPECT_FALSE(std::isnan(beta[i]));
  }
}

TEST(RefOps, GdnGatesBf16RoundsBetaNotG) {
  const uint32_t seed = fresh_seed();
  SCOPED_TRACE(seed_trace(seed));
  std::mt19937 rng(seed);
  const int64_t Hv = 8, n = 33;
  for (DType dtype : {DType::bf16, DType::f32}) {
    SCOPED_TRACE(dtype_str(dtype));
    const Weight A_log = make_weight({Hv}, dtype, uniform(Hv, rng, -3.0f, 2.5f));
    const Weight dt_bias = make_weight({Hv}, dtype, uniform(Hv, rng, -4.0f, 2.0f));
    const auto a = normal(n * Hv, rng, 3.0f), b = normal(n * Hv, rng, 3.0f);
    auto g = nans(n * Hv), beta = nans(n * Hv);
    ref::gdn_gates(a.data(), b.data(), n, Hv, A_log.view(), dt_bias.view(), g.data(), beta.data(), Precision::bf16);
    std::vector<double> want_g(g.size()), want_beta(g.size());
    int64_t g_off_grid = 0;
    for (int64_t t = 0; t < n; ++t)
      for (int64_t h = 0; h < Hv; ++h) {
        // A bf16 run reads the parameters as bf16; g itself stays float32.
        want_g[t * Hv + h] = -std::exp(A_log.value(h, Precision::bf16)) *
                             softplus64(double(a[t * Hv + h]) + dt_bias.value(h, Precision::bf16));
        const size_t i = size_t(t * Hv + h);
        EXPECT_EQ(round_bf16(beta[i]), beta[i]) << "beta[" << i << "] = " << beta[i] << " is not a bf16 value";
        want_beta[i] = sigmoid64(b[i]);
        g_off_grid += round_bf16(g[i]) != g[i];
      }
    // Within float32 error of the float64 value: far tighter than a bf16 rounding (2^-9 relative).
    expect_close(g, want_g, kF32VsF64, "g in a bf16 run");
    expect_close(beta, want_beta, di::testing::kBf16OneRounding, "beta in a bf16 run");
    EXPECT_GT(g_off_grid, int64_t(g.size()) / 2) << "g looks rounded to bf16";
  }
}

TEST(RefOps, L2NormalizeMatchesF64) {
  const uint32_t seed = fresh_seed();
  SCOPED_TRACE(seed_trace(seed));
  std::mt19937 rng(seed);
  for (int64_t rows : {1, 3, 65})
    for (int64_t dim : {1, 7, 64, 257})
      for (float scale : {1.0f, 0.08838834764831845f /* 128^-0.5 */}) {
        const std::string what = fmt::format("l2_normalize rows {} dim {} scale {}", rows, dim, scale);
        SCOPED_TRACE(what);
        // |x| >= 0.5 per element, so eps = 1e-6 changes the norm by less than 2e-6 relative.
        auto x = uniform(rows * dim, rng, 0.5f, 2.0f);
        for (auto& e : x)
          if (rng() & 1) e = -e;
        auto y = nans(rows * dim);
        ref::l2_normalize(x.data(), rows, dim, scale, y.data());
        std::vector<double> want(y.size()), want_norm(static_cast<size_t>(rows), double(scale));
        std::vector<float> norm(static_cast<size_t>(rows));
        for (int64_t r = 0; r < rows; ++r) {
          double ss = 0, ys = 0;
          for (int64_t i = 0; i < dim; ++i) ss += double(x[r * dim + i]) * double(x[r * dim + i]);
          for (int64_t i = 0; i < dim; ++i) {
            want[r * dim + i] = double(x[r * dim + i]) / std::sqrt(ss + 1e-6) * scale;
            ys += double(y[r * dim + i]) * double(y[r * dim + i]);
          }
          norm[r] = float(std::sqrt(ys));
        }
        expect_close(y, want, kF32VsF64, what);
        expect_close(norm, want_norm, kF32VsF64, what + " row norms");
      }
  // A zero row gives zeros, not NaN; the rows around it are unaffected.
  std::vector<float> x{3.0f, 4.0f, 0.0f, 0.0f, -0.0f, 0.0f, 0.0f, -4.0f};
  auto y = nans(8);
  ref::l2_normalize(x.data(), 4, 2, 2.0f, y.data());
  const double n5 = 2.0 / std::sqrt(25.0 + 1e-6), n4 = 2.0 / std::sqrt(16.0 + 1e-6);
  expect_close(y, std::vector<double>{3 * n5, 4 * n5, 0, 0, 0, 0, 0, -4 * n4}, kF32VsF64, "zero rows");
}

// =============================================================================================
// bf16 runs: the rounded outputs are bf16 values

::testing::AssertionResult all_bf16(const std::vector<float>& v) {
  for (size_t i = 0; i < v.size(); ++i)
    if (!std::isfinite(v[i]) || round_bf16(v[i]) != v[i])
      return ::testing::AssertionFailure() << "element " << i << " = " << v[i] << " is not a finite bf16 value";
  return ::testing::AssertionSuccess();
}

TEST(RefOps, Bf16RunOutputsAreBf16Values) {
  const uint32_t seed = fresh_seed();
  SCOPED_TRACE(seed_trace(seed));
  std::mt19937 rng(seed);
  const Precision bf = Precision::bf16;
  for (DType dtype : {DType::bf16, DType::f32})
    for (int64_t rows : {1, 3, 65})
      for (int64_t dim : {1, 7, 64, 257}) {
        SCOPED_TRACE(fmt::format("{} weights, rows {} dim {}", dtype_str(dtype), rows, dim));
        const auto x = normal(rows * dim, rng);
        {
          const Weight w = make_weight({dim}, dtype, uniform(dim, rng, -0.5f, 0.5f));
          auto y = nans(rows * dim);
          ref::rms_norm(x.data(), rows, dim, w.view(), kEps, y.data(), bf);
          EXPECT_TRUE(all_bf16(y)) << "rms_norm";
          const auto z = normal(rows * dim, rng);
          auto yg = nans(rows * dim);
          ref::gated_rms_norm(x.data(), z.data(), rows, dim, w.view(), kEps, yg.data(), bf);
          EXPECT_TRUE(all_bf16(yg)) << "gated_rms_norm";
        }
        {
          const int64_t out = 9;
          const Weight w = make_weight({out, dim}, dtype, uniform(out * dim, rng));
          auto y = nans(rows * out);
          ref::linear(x.data(), rows, dim, w.view(), y.data(), bf);
          EXPECT_TRUE(all_bf16(y)) << "linear";
        }
        {
          const auto up = normal(rows * dim, rng);
          auto y = nans(rows * dim);
          ref::swiglu(x.data(), up.data(), rows * dim, y.data(), bf);
          EXPECT_TRUE(all_bf16(y)) << "swiglu";
        }
      }
  for (const RopeShape& s : kRopeShapes) {
    SCOPED_TRACE(fmt::format("rope head_dim {} rotary_dim {}", s.head_dim, s.rotary_dim));
    const int64_t tokens = int64_t(kPositions.size());
    auto x = normal(tokens * s.heads * s.head_dim, rng);
    for (auto& e : x) e = round_bf16(e);  // a bf16 run's q and k are bf16, including the pass-through dims
    ref::rope(x.data(), tokens, s.heads, s.head_dim, s.rotary_dim, kPositions.data(), s.theta, bf);
    EXPECT_TRUE(all_bf16(x)) << "rope";
  }
  {
    const int64_t Hq = 4, Hkv = 2, D = 7, n_q = 3, n_kv = 8;
    const auto q = normal(n_q * Hq * D, rng), k = normal(n_kv * Hkv * D, rng), v = normal(n_kv * Hkv * D, rng);
    auto out = nans(n_q * Hq * D);
    ref::causal_attention(q.data(), k.data(), v.data(), n_q, n_kv, Hq, Hkv, D, 0.3, out.data(), bf);
    EXPECT_TRUE(all_bf16(out)) << "causal_attention";
  }
  {
    const int64_t n = 7, C = 5, K = 4;
    const auto x = normal(n * C, rng);
    const Weight w = make_weight({C, 1, K}, DType::f32, uniform(C * K, rng));
    std::vector<float> state(size_t(C * K), 0.0f);
    auto y = nans(n * C);
    ref::causal_conv1d_silu(x.data(), n, C, K, w.view(), state.data(), y.data(), bf);
    EXPECT_TRUE(all_bf16(y)) << "causal_conv1d_silu";
  }
}

}  // namespace
}  // namespace di
