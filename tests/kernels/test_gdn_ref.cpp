// Tests of the CPU reference of the gated delta rule (kernels/gdn/ref.h):
//   - the recurrent form against an independent dense evaluation of the projector form;
//   - the chunked form against the recurrent form (float64), and both float32 forms against the
//     float64 oracle, over odd sequence lengths, GQA ratios 1/2/3, with and without initial state,
//     checking the output and the final state;
//   - splitting a sequence (chunked then chunked, or chunked then token-by-token) against one run;
//   - shape validation.
// Inputs are fresh random numbers each run; the seed is printed with every failure, and the
// environment variable DI_TEST_SEED replays it.
#include "kernels/gdn/ref.h"

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#include "core/error.h"
#include "support/seed.h"
#include "support/tolerance.h"

namespace di::gdn_ref {
namespace {

using di::testing::compare_close;
using di::testing::kExactF32;
using di::testing::kF32Reorder;
using di::testing::kF32VsF64;
using di::testing::kF64Reorder;
using di::testing::poison;
using di::testing::Tolerance;

using di::testing::fresh_seed;
using di::testing::seed_trace;

// One sequence's inputs in float64, every value rounded to float32 first, so that the float32 and
// float64 runs see exactly the same numbers and only their arithmetic differs.
struct Inputs {
  DeltaRuleShape shape;
  std::vector<double> q, k, v, g, beta;  // layouts of ref.h
  std::vector<double> state;             // initial state [Hv, dk, dv]
};

double to_f32(double x) { return double(float(x)); }

double softplus(double x) { return x > 20 ? x : std::log1p(std::exp(x)); }

// Values shaped like a Qwen3.5 GDN layer's: q and k L2-normalised per head (q then scaled by
// dk^-0.5), v ~ N(0, 1), beta = sigmoid(N(0, 1)), g = -exp(u) softplus(w + bias_h) with
// u ~ U(-2, 1), w ~ N(0, 1) and a per-head bias ~ U(-4, 1): mostly in [-3, 0), some heads decaying
// slowly (g near 0, long memory), a few tokens below -3. Initial state ~ N(0, 0.1^2) or zero.
Inputs make_inputs(const DeltaRuleShape& shape, bool with_state, std::mt19937& rng) {
  const int64_t T = shape.n_tokens, Hk = shape.num_k_heads, Hv = shape.num_v_heads;
  const int64_t dk = shape.k_dim, dv = shape.v_dim;
  std::normal_distribution<double> normal(0.0, 1.0);
  std::uniform_real_distribution<double> log_a(-2.0, 1.0), dt_bias(-4.0, 1.0);

  Inputs in;
  in.shape = shape;
  auto unit_rows = [&](std::vector<double>& x, double scale) {
    x.resize(size_t(T * Hk * dk));
    for (int64_t row = 0; row < T * Hk; ++row) {
      double* r = x.data() + row * dk;
      double sum_sq = 0;
      for (int64_t i = 0; i < dk; ++i) {
        r[i] = normal(rng);
        sum_sq += r[i] * r[i];
      }
      const double inv = scale / std::sqrt(sum_sq + 1e-6);
      for (int64_t i = 0; i < dk; ++i) r[i] = to_f32(r[i] * inv);
    }
  };
  unit_rows(in.q, 1.0 / std::sqrt(double(dk)));
  unit_rows(in.k, 1.0);
  in.v.resize(size_t(T * Hv * dv));
  for (auto& x : in.v) x = to_f32(normal(rng));
  std::vector<double> bias(static_cast<size_t>(Hv));
  for (auto& b : bias) b = dt_bias(rng);
  in.g.resize(size_t(T * Hv));
  in.beta.resize(size_t(T * Hv));
  for (int64_t t = 0; t < T; ++t) {
    for (int64_t h = 0; h < Hv; ++h) {
      in.g[t * Hv + h] = to_f32(-std::exp(log_a(rng)) * softplus(normal(rng) + bias[h]));
      in.beta[t * Hv + h] = to_f32(1.0 / (1.0 + std::exp(-normal(rng))));
    }
  }
  in.state.assign(size_t(Hv * dk * dv), 0.0);
  if (with_state)
    for (auto& x : in.state) x = to_f32(0.1 * normal(rng));
  return in;
}

template <typename Real>
struct Result {
  std::vector<Real> out;    // [T, Hv, dv]
  std::vector<Real> state;  // [Hv, dk, dv]
};

enum class Form { recurrent, chunked };

template <typename Real>
std::vector<Real> cast(const std::vector<double>& x) {
  return std::vector<Real>(x.begin(), x.end());
}

// Runs one form in precision Real on `in`, starting from in.state; the output is poisoned first.
template <typename Real>
Result<Real> run(Form form, const Inputs& in, int64_t chunk = 64) {
  const auto q = cast<Real>(in.q), k = cast<Real>(in.k), v = cast<Real>(in.v);
  const auto g = cast<Real>(in.g), beta = cast<Real>(in.beta);
  Result<Real> r;
  r.state = cast<Real>(in.state);
  r.out.resize(size_t(in.shape.n_tokens * in.shape.num_v_heads * in.shape.v_dim));
  poison(r.out);
  if (form == Form::recurrent)
    delta_rule_recurrent<Real>(in.shape, q.data(), k.data(), v.data(), g.data(), beta.data(), r.state.data(),
                               r.out.data());
  else
    delta_rule_chunked<Real>(in.shape, q.data(), k.data(), v.data(), g.data(), beta.data(), r.state.data(),
                             r.out.data(), chunk);
  return r;
}

// all_close, plus the measured error recorded as test properties (visible with --gtest_output=xml).
template <typename A, typename B>
void expect_close(const std::vector<A>& actual, const std::vector<B>& expected, Tolerance tol,
                  const std::string& what) {
  EXPECT_TRUE(di::testing::all_close(actual, expected, tol, what));
  const auto r = compare_close(std::span<const A>(actual), std::span<const B>(expected), tol);
  ::testing::Test::RecordProperty(what + ".max_abs_error", fmt::format("{:.3g}", r.max_abs_error));
  ::testing::Test::RecordProperty(what + ".worst_vs_allowed", fmt::format("{:.3g}", r.worst_ratio));
}

// ---------------------------------------------------------------------------------------------
// The recurrence against an independent evaluation: S_t = (I - β_t k_t k_t^T) exp(g_t) S_{t-1}
// + β_t k_t v_t^T and o_t = S_t^T q_t, with the projector formed as a dense dk x dk matrix, and the
// GQA mapping written out (value head h reads key head h / (Hv/Hk)).
TEST(GdnRef, RecurrenceMatchesProjectorForm) {
  const uint32_t seed = fresh_seed();
  SCOPED_TRACE(seed_trace(seed));
  std::mt19937 rng(seed);
  const DeltaRuleShape shape{7, 2, 6, 5, 3};
  const Inputs in = make_inputs(shape, /*with_state=*/true, rng);
  const int64_t T = shape.n_tokens, Hk = shape.num_k_heads, Hv = shape.num_v_heads;
  const int64_t dk = shape.k_dim, dv = shape.v_dim;

  std::vector<double> want_out(size_t(T * Hv * dv)), want_state = in.state;
  for (int64_t h = 0; h < Hv; ++h) {
    const int64_t kh = h / (Hv / Hk);
    double* S = want_state.data() + h * dk * dv;
    for (int64_t t = 0; t < T; ++t) {
      const double* q = in.q.data() + (t * Hk + kh) * dk;
      const double* k = in.k.data() + (t * Hk + kh) * dk;
      const double* v = in.v.data() + (t * Hv + h) * dv;
      const double beta = in.beta[t * Hv + h], decay = std::exp(in.g[t * Hv + h]);
      std::vector<double> next(size_t(dk * dv));
      for (int64_t i = 0; i < dk; ++i) {
        for (int64_t j = 0; j < dv; ++j) {
          double sum = beta * k[i] * v[j];
          for (int64_t l = 0; l < dk; ++l) sum += ((i == l ? 1.0 : 0.0) - beta * k[i] * k[l]) * decay * S[l * dv + j];
          next[i * dv + j] = sum;
        }
      }
      std::copy(next.begin(), next.end(), S);
      for (int64_t j = 0; j < dv; ++j) {
        double o = 0;
        for (int64_t i = 0; i < dk; ++i) o += S[i * dv + j] * q[i];
        want_out[(t * Hv + h) * dv + j] = o;
      }
    }
  }

  const auto rec = run<double>(Form::recurrent, in);
  expect_close(rec.out, want_out, kF64Reorder, "f64_recurrent_vs_projector.out");
  expect_close(rec.state, want_state, kF64Reorder, "f64_recurrent_vs_projector.state");
  const auto chk = run<double>(Form::chunked, in);
  expect_close(chk.out, want_out, kF64Reorder, "f64_chunked_vs_projector.out");
  expect_close(chk.state, want_state, kF64Reorder, "f64_chunked_vs_projector.state");
}

// ---------------------------------------------------------------------------------------------
// Chunked vs recurrent, float32 vs float64, over the odd-size sweep.
struct SweepCase {
  int64_t T, Hk, Hv, dk, dv;
  bool with_state;
};

// Readable test parameters in CTest names and failure messages.
void PrintTo(const SweepCase& c, std::ostream* os) {
  *os << "T=" << c.T << " Hk=" << c.Hk << " Hv=" << c.Hv << " dk=" << c.dk << " dv=" << c.dv
      << (c.with_state ? " with initial state" : " zero initial state");
}

std::string case_name(const ::testing::TestParamInfo<SweepCase>& info) {
  const SweepCase& c = info.param;
  return fmt::format("T{}_Hk{}_Hv{}_dk{}_dv{}_{}", c.T, c.Hk, c.Hv, c.dk, c.dv, c.with_state ? "state" : "zero");
}

std::vector<SweepCase> sweep_cases() {
  std::vector<SweepCase> cases;
  for (int64_t T : {1, 2, 63, 64, 65, 127, 128, 1000})
    for (int64_t Hv : {2, 4, 6})
      for (bool with_state : {false, true}) cases.push_back({T, 2, Hv, 32, 20, with_state});
  // Real head dims: 16 key / 48 value heads of 128 as in the 27B (ratio 3), and a long sequence.
  cases.push_back({65, 16, 48, 128, 128, true});
  cases.push_back({1000, 2, 4, 128, 128, true});
  return cases;
}

class GdnRefSweep : public ::testing::TestWithParam<SweepCase> {};

TEST_P(GdnRefSweep, ChunkedAndFloat32MatchFloat64Recurrent) {
  const SweepCase& c = GetParam();
  const uint32_t seed = fresh_seed();
  SCOPED_TRACE(seed_trace(seed));
  std::mt19937 rng(seed);
  const Inputs in = make_inputs({c.T, c.Hk, c.Hv, c.dk, c.dv}, c.with_state, rng);

  const auto oracle = run<double>(Form::recurrent, in);
  const auto chunked64 = run<double>(Form::chunked, in);
  expect_close(chunked64.out, oracle.out, kF64Reorder, "f64_chunked_vs_f64_recurrent.out");
  expect_close(chunked64.state, oracle.state, kF64Reorder, "f64_chunked_vs_f64_recurrent.state");

  const auto chunked32 = run<float>(Form::chunked, in);
  expect_close(chunked32.out, oracle.out, kF32VsF64, "f32_chunked_vs_f64_recurrent.out");
  expect_close(chunked32.state, oracle.state, kF32VsF64, "f32_chunked_vs_f64_recurrent.state");

  const auto recurrent32 = run<float>(Form::recurrent, in);
  expect_close(recurrent32.out, oracle.out, kF32VsF64, "f32_recurrent_vs_f64_recurrent.out");
  expect_close(recurrent32.state, oracle.state, kF32VsF64, "f32_recurrent_vs_f64_recurrent.state");
}

INSTANTIATE_TEST_SUITE_P(GdnRef, GdnRefSweep, ::testing::ValuesIn(sweep_cases()), case_name);

// Any chunk length gives the recurrent result (1 degenerates to the recurrence; 150 and 200 hold
// the whole sequence in one chunk).
TEST(GdnRef, ChunkLengthDoesNotChangeResult) {
  const uint32_t seed = fresh_seed();
  SCOPED_TRACE(seed_trace(seed));
  std::mt19937 rng(seed);
  const Inputs in = make_inputs({150, 2, 4, 32, 20}, /*with_state=*/true, rng);
  const auto oracle = run<double>(Form::recurrent, in);
  for (int64_t chunk : {1, 7, 16, 64, 150, 200}) {
    SCOPED_TRACE(fmt::format("chunk {}", chunk));
    const auto chunked = run<double>(Form::chunked, in, chunk);
    expect_close(chunked.out, oracle.out, kF64Reorder, fmt::format("f64_chunk{}_vs_f64_recurrent.out", chunk));
    expect_close(chunked.state, oracle.state, kF64Reorder, fmt::format("f64_chunk{}_vs_f64_recurrent.state", chunk));
  }
}

// T == 0 leaves the state bit for bit as it was.
TEST(GdnRef, EmptySequenceKeepsState) {
  const uint32_t seed = fresh_seed();
  SCOPED_TRACE(seed_trace(seed));
  std::mt19937 rng(seed);
  const Inputs in = make_inputs({0, 2, 4, 8, 6}, /*with_state=*/true, rng);
  for (Form form : {Form::recurrent, Form::chunked}) {
    const auto r32 = run<float>(form, in);
    EXPECT_TRUE(di::testing::all_close(r32.state, cast<float>(in.state), kExactF32, "f32 state"));
    const auto r64 = run<double>(form, in);
    EXPECT_TRUE(di::testing::all_close(r64.state, in.state, kExactF32, "f64 state"));
  }
}

// ---------------------------------------------------------------------------------------------
// Splitting a sequence: tokens [0, t) then [t, T) with the state carried equal one run over [0, T).

// The tokens [t0, t1) of `in`, starting from `state`.
Inputs slice(const Inputs& in, int64_t t0, int64_t t1, const std::vector<double>& state) {
  const DeltaRuleShape& s = in.shape;
  auto rows = [&](const std::vector<double>& x, int64_t width) {
    return std::vector<double>(x.begin() + t0 * width, x.begin() + t1 * width);
  };
  Inputs part;
  part.shape = s;
  part.shape.n_tokens = t1 - t0;
  part.q = rows(in.q, s.num_k_heads * s.k_dim);
  part.k = rows(in.k, s.num_k_heads * s.k_dim);
  part.v = rows(in.v, s.num_v_heads * s.v_dim);
  part.g = rows(in.g, s.num_v_heads);
  part.beta = rows(in.beta, s.num_v_heads);
  part.state = state;
  return part;
}

// Runs [0, split) chunked, then [split, T) chunked or (decode) one token at a time with the
// recurrent form; returns the concatenated output and the final state.
template <typename Real>
Result<Real> run_split(const Inputs& in, int64_t split, Form second) {
  const int64_t T = in.shape.n_tokens;
  Result<Real> first = run<Real>(Form::chunked, slice(in, 0, split, in.state));
  Result<Real> all{first.out, first.state};
  const int64_t step = second == Form::chunked ? T - split : 1;
  for (int64_t t = split; t < T; t += step) {
    const std::vector<double> carried(all.state.begin(), all.state.end());  // exact: Real -> double
    Result<Real> next = run<Real>(second, slice(in, t, t + step, carried));
    all.out.insert(all.out.end(), next.out.begin(), next.out.end());
    all.state = next.state;
  }
  return all;
}

TEST(GdnRef, SplitSequenceMatchesOneRun) {
  const uint32_t seed = fresh_seed();
  SCOPED_TRACE(seed_trace(seed));
  std::mt19937 rng(seed);
  const Inputs in = make_inputs({130, 2, 4, 32, 20}, /*with_state=*/true, rng);
  const auto whole32 = run<float>(Form::chunked, in);
  const auto whole64 = run<double>(Form::chunked, in);
  for (int64_t split : {0, 1, 37, 64, 100, 128, 130}) {
    SCOPED_TRACE(fmt::format("split at {}", split));
    const auto split32 = run_split<float>(in, split, Form::chunked);
    expect_close(split32.out, whole32.out, kF32Reorder, fmt::format("f32_split{}_vs_whole.out", split));
    expect_close(split32.state, whole32.state, kF32Reorder, fmt::format("f32_split{}_vs_whole.state", split));
    const auto split64 = run_split<double>(in, split, Form::chunked);
    expect_close(split64.out, whole64.out, kF64Reorder, fmt::format("f64_split{}_vs_whole.out", split));
    expect_close(split64.state, whole64.state, kF64Reorder, fmt::format("f64_split{}_vs_whole.state", split));
  }
}

// Prefill then decode: chunked over [0, t), then the recurrent form token by token.
TEST(GdnRef, PrefillThenDecodeMatchesOneRun) {
  const uint32_t seed = fresh_seed();
  SCOPED_TRACE(seed_trace(seed));
  std::mt19937 rng(seed);
  const Inputs in = make_inputs({130, 2, 4, 32, 20}, /*with_state=*/false, rng);
  const auto whole32 = run<float>(Form::chunked, in);
  for (int64_t split : {1, 37, 64, 100}) {
    SCOPED_TRACE(fmt::format("decode from {}", split));
    const auto split32 = run_split<float>(in, split, Form::recurrent);
    expect_close(split32.out, whole32.out, kF32Reorder, fmt::format("f32_prefill{}_decode_vs_whole.out", split));
    expect_close(split32.state, whole32.state, kF32Reorder, fmt::format("f32_prefill{}_decode_vs_whole.state", split));
  }
}

// ---------------------------------------------------------------------------------------------
// Shape validation: an invalid shape throws di::Error naming the value.

std::string error_of(const DeltaRuleShape& shape, Form form, int64_t chunk = 64) {
  std::vector<float> buf(1024, 0.0f);
  try {
    if (form == Form::recurrent)
      delta_rule_recurrent<float>(shape, buf.data(), buf.data(), buf.data(), buf.data(), buf.data(), buf.data(),
                                  buf.data());
    else
      delta_rule_chunked<float>(shape, buf.data(), buf.data(), buf.data(), buf.data(), buf.data(), buf.data(),
                                buf.data(), chunk);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(GdnRefShape, RejectsBadShapes) {
  for (Form form : {Form::recurrent, Form::chunked}) {
    SCOPED_TRACE(form == Form::recurrent ? "recurrent" : "chunked");
    const std::string ratio = error_of({4, 4, 6, 8, 8}, form);
    EXPECT_NE(ratio.find("num_v_heads (6)"), std::string::npos) << ratio;
    EXPECT_NE(ratio.find("num_k_heads (4)"), std::string::npos) << ratio;
    EXPECT_NE(error_of({-1, 2, 2, 8, 8}, form).find("n_tokens"), std::string::npos);
    EXPECT_NE(error_of({4, 0, 2, 8, 8}, form).find("num_k_heads"), std::string::npos);
    EXPECT_NE(error_of({4, 2, 0, 8, 8}, form).find("num_v_heads"), std::string::npos);
    EXPECT_NE(error_of({4, 2, 2, 0, 8}, form).find("k_dim"), std::string::npos);
    EXPECT_NE(error_of({4, 2, 2, 8, -3}, form).find("v_dim must be positive, got -3"), std::string::npos);
  }
  EXPECT_NE(error_of({4, 2, 2, 8, 8}, Form::chunked, 0).find("chunk must be positive, got 0"), std::string::npos);

  std::vector<double> buf(64, 0.0);
  const DeltaRuleShape bad{1, 4, 6, 2, 2};
  EXPECT_THROW(delta_rule_recurrent<double>(bad, buf.data(), buf.data(), buf.data(), buf.data(), buf.data(),
                                            buf.data(), buf.data()),
               Error);
  EXPECT_THROW(delta_rule_chunked<double>(bad, buf.data(), buf.data(), buf.data(), buf.data(), buf.data(),
                                          buf.data(), buf.data()),
               Error);
}

}  // namespace
}  // namespace di::gdn_ref
