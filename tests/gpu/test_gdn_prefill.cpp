// Every GDN chunked-prefill backend of the production list (gdn/dispatch.h: sm90, baseline) that this
// GPU runs, against the float64 oracle (gdn_ref::delta_rule_recurrent<double> on the same
// bf16-rounded inputs, q pre-scaled), each with the tolerance of its arithmetic (backend_tolerance):
//   - single sequences of odd lengths (1 .. 4096) and a variable-length batch with a zero-length
//     sequence, with a zero (NULL) and a random initial state, in both state layouts: the output
//     AND the final state, both poisoned (NaN) before the run;
//   - state_indices permutations into a larger pool (slots nobody owns stay untouched), the state
//     updated in place (initial_state == final_state), and a NULL final_state;
//   - the ABI: invalid arguments, unsupported geometry, and the reasons supports() gives;
//   - GdnDiagnostic.Hv48: error statistics of each GPU backend and of the CPU float32 chunked form
//     at 16/48 heads, printed as a table (each backend's tolerance is still asserted).
// Geometry Hk/Hv/K/V = 16/32/128/128 (Qwen3.5 small models) unless a test says otherwise. Inputs are
// fresh random numbers each run; DI_TEST_SEED replays a failure.
#include "gdn/baseline_prefill.h"
#include "gdn/dispatch.h"
#include "gdn/sm90_prefill.h"

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <numeric>
#include <random>
#include <string>
#include <type_traits>
#include <vector>

#include "core/bf16.h"
#include "core/cuda.h"
#include "gpu/gdn_test_support.h"
#include "gpu/gpu_test.h"
#include "kernels/gdn/ref.h"
#include "support/seed.h"
#include "support/tolerance.h"

namespace di::gdn {
namespace {

using di::testing::all_close;
using di::testing::compare_close;
using di::testing::fresh_seed;
using di::testing::kBf16GdnKernelOut;
using di::testing::kBf16GdnTensorCoreOut;
using di::testing::kF32GdnKernelState;
using di::testing::kF32GdnTensorCoreState;
using di::testing::seed_trace;
using di::testing::Tolerance;

using namespace di::gdn::testing;

using GdnGpuTest = di::testing::GpuTest;

// ---------------------------------------------------------------------------------------------
// Inputs and the oracle.

// A batch of sequences laid end to end, as the ABI takes it. Per token: q and k per key head drawn
// N(0, 1), L2-normalised, rounded to bf16; v ~ N(0, 1) in bf16; g = log U(0.5, 1) (decay 0.5 .. 1),
// with 3% of tokens decaying strongly (g in [-12, -3]) and 0.5% drastically (g in [-150, -20], as
// -exp(A_log) softplus(...) can reach: exp(G) then underflows inside a chunk); beta = sigmoid(N(0, 1.5)).
struct Batch {
  di_gdn_geometry geometry{};
  std::vector<int32_t> cu_seqlens;  // [num_seqs + 1]
  std::vector<uint16_t> q, k;       // bf16 [T, Hk, K]
  std::vector<uint16_t> v;          // bf16 [T, Hv, V]
  std::vector<float> g, beta;       // [T, Hv]

  int num_seqs() const { return int(cu_seqlens.size()) - 1; }
  int64_t total_tokens() const { return cu_seqlens.back(); }
  int64_t length(int s) const { return cu_seqlens[s + 1] - cu_seqlens[s]; }
};

Batch make_batch(const di_gdn_geometry& geometry, const std::vector<int>& lengths, std::mt19937& rng) {
  std::normal_distribution<double> normal(0.0, 1.0);
  std::uniform_real_distribution<double> uniform(0.0, 1.0);
  Batch b;
  b.geometry = geometry;
  b.cu_seqlens.assign(1, 0);
  for (int len : lengths) b.cu_seqlens.push_back(b.cu_seqlens.back() + len);
  const int64_t T = b.total_tokens(), Hk = geometry.num_k_heads, Hv = geometry.num_v_heads;
  auto unit_rows = [&](std::vector<uint16_t>& x) {
    x.resize(size_t(T * Hk * kDim));
    std::vector<double> row(kDim);
    for (int64_t r = 0; r < T * Hk; ++r) {
      double sum_sq = 0;
      for (double& e : row) e = normal(rng), sum_sq += e * e;
      const double inv = 1.0 / std::sqrt(sum_sq);
      for (int i = 0; i < kDim; ++i) x[size_t(r * kDim + i)] = f32_to_bf16(float(row[i] * inv));
    }
  };
  unit_rows(b.q);
  unit_rows(b.k);
  b.v.resize(size_t(T * Hv * kDim));
  for (auto& x : b.v) x = f32_to_bf16(float(normal(rng)));
  b.g.resize(size_t(T * Hv));
  b.beta.resize(size_t(T * Hv));
  for (int64_t i = 0; i < T * Hv; ++i) {
    const double u = uniform(rng);
    b.g[i] = float(u < 0.005  ? -20.0 - 130.0 * uniform(rng)
                   : u < 0.035 ? -3.0 - 9.0 * uniform(rng)
                               : std::log(0.5 + 0.5 * uniform(rng)));
    b.beta[i] = float(1.0 / (1.0 + std::exp(-1.5 * normal(rng))));
  }
  return b;
}

// One state per sequence, [num_seqs, Hv, K, V] (V contiguous), entries N(0, 0.25^2).
std::vector<float> random_states(int num_seqs, int Hv, std::mt19937& rng) {
  std::normal_distribution<float> normal(0.0f, 0.25f);
  std::vector<float> s(size_t(num_seqs) * Hv * kDim * kDim);
  for (auto& x : s) x = normal(rng);
  return s;
}

// What a reference run produces: out [T, Hv, V] and the final state of each sequence [num_seqs, Hv,
// K, V] (V contiguous).
template <typename Real>
struct Reference {
  std::vector<Real> out, state;
};

// The gated delta rule of each (sequence, value head) on the batch's exact values, in precision Real
// (double: the oracle, recurrent form; float: the CPU float32 chunked form). q is pre-scaled by
// `scale` (rounded to Real). `initial` is empty for a zero initial state. Heads run in parallel.
template <typename Real>
Reference<Real> reference(const Batch& b, const std::vector<float>& initial, float scale, bool chunked,
                          bool normalize_qk = false) {
  const int N = b.num_seqs(), Hk = b.geometry.num_k_heads, Hv = b.geometry.num_v_heads;
  Reference<Real> r;
  r.out.assign(size_t(b.total_tokens()) * Hv * kDim, Real(0));
  r.state.assign(size_t(N) * Hv * kDim * kDim, Real(0));
#pragma omp parallel for schedule(dynamic)
  for (int item = 0; item < N * Hv; ++item) {
    const int s = item / Hv, h = item % Hv, kh = h / (Hv / Hk);
    const int64_t L = b.length(s), t0 = b.cu_seqlens[s];
    std::vector<Real> q(static_cast<size_t>(L * kDim)), k(q.size()), v(q.size()), g(static_cast<size_t>(L)),
        beta(g.size());
    for (int64_t t = 0; t < L; ++t) {
      for (int i = 0; i < kDim; ++i) {
        q[t * kDim + i] = Real(double(bf16_to_f32(b.q[size_t(((t0 + t) * Hk + kh) * kDim + i)])) * double(scale));
        k[t * kDim + i] = Real(bf16_to_f32(b.k[size_t(((t0 + t) * Hk + kh) * kDim + i)]));
        v[t * kDim + i] = Real(bf16_to_f32(b.v[size_t(((t0 + t) * Hv + h) * kDim + i)]));
      }
      g[t] = Real(b.g[size_t((t0 + t) * Hv + h)]);
      beta[t] = Real(b.beta[size_t((t0 + t) * Hv + h)]);
      if (normalize_qk)  // the raw rows normalised in Real: x / sqrt(sum x^2 + 1e-6), as DI_GDN_QK_L2NORM
        for (Real* row : {q.data() + t * kDim, k.data() + t * kDim}) {
          Real sum = 0;
          for (int i = 0; i < kDim; ++i) sum += row[i] * row[i];
          // q carries `scale` already: its norm is scale times the raw norm.
          const Real raw_sum = row == q.data() + t * kDim ? sum / (Real(scale) * Real(scale)) : sum;
          const Real inv = Real(1) / std::sqrt(raw_sum + Real(1e-6));
          for (int i = 0; i < kDim; ++i) row[i] *= inv;
        }
    }
    Real* state = r.state.data() + size_t(item) * kDim * kDim;
    if (!initial.empty())
      std::copy_n(initial.begin() + ptrdiff_t(size_t(item) * kDim * kDim), kDim * kDim, state);
    std::vector<Real> out(size_t(L * kDim));
    const gdn_ref::DeltaRuleShape shape{L, 1, 1, kDim, kDim};
    if (chunked)
      gdn_ref::delta_rule_chunked<Real>(shape, q.data(), k.data(), v.data(), g.data(), beta.data(), state, out.data());
    else
      gdn_ref::delta_rule_recurrent<Real>(shape, q.data(), k.data(), v.data(), g.data(), beta.data(), state,
                                          out.data());
    for (int64_t t = 0; t < L; ++t)
      std::copy_n(out.begin() + t * kDim, kDim, r.out.begin() + ptrdiff_t(((t0 + t) * Hv + h) * kDim));
  }
  return r;
}

Reference<double> oracle(const Batch& b, const std::vector<float>& initial, float scale, bool normalize_qk = false) {
  return reference<double>(b, initial, scale, /*chunked=*/false, normalize_qk);
}


// The matrices of one (slot, head range) from a pool [slots, Hv, K, V].
template <typename T>
std::vector<T> slot_of(const std::vector<T>& pool, int slot, int Hv) {
  const size_t n = size_t(Hv) * kDim * kDim;
  return std::vector<T>(pool.begin() + ptrdiff_t(slot * n), pool.begin() + ptrdiff_t((slot + 1) * n));
}

// ---------------------------------------------------------------------------------------------
// Running the backend.

struct RunSetup {
  di_gdn_state_layout layout = DI_GDN_STATE_KV;
  std::vector<int32_t> slots;  // slot of each sequence; empty: state_indices NULL (slot i)
  int pool_slots = 0;          // matrices per value head in the pools (>= num_seqs)
  bool with_initial = true;    // false: initial_state NULL (zero state)
  bool in_place = false;       // initial_state == final_state
  bool write_final = true;     // false: final_state NULL
  uint32_t flags = 0;          // di_gdn_prefill_args.flags
  int32_t segment_tokens = 0;  // sm90 only: its context split (sm90_run_split); 0 the backend's own
  int64_t max_seq_tokens = 0;  // the longest-sequence hint, in the shape and the args alike
};

struct GpuResult {
  int status = -1;
  std::vector<float> out;          // [T, Hv, V]
  std::vector<float> pool_before;  // the initial pool, [pool_slots, Hv, K, V] (V contiguous)
  std::vector<float> pool_after;   // the final pool (the in-place pool, or the poisoned final pool)
};

int slot_of_seq(const RunSetup& setup, int s) { return setup.slots.empty() ? s : setup.slots[size_t(s)]; }

// Runs `backend` on `b`. Sequence s starts from initial[s] (when with_initial), placed at its slot
// of a pool whose other slots hold random values; out and a separate final pool are poisoned first.
GpuResult run_backend(const di_gdn_prefill_backend& backend, const Batch& b, const std::vector<float>& initial,
                      float scale, const RunSetup& setup, cudaStream_t stream, std::mt19937& rng) {
  const int Hv = b.geometry.num_v_heads;
  const size_t per_slot = size_t(Hv) * kDim * kDim;
  GpuResult r;
  r.pool_before = random_states(setup.pool_slots, Hv, rng);
  if (setup.with_initial)
    for (int s = 0; s < b.num_seqs(); ++s)
      std::copy_n(initial.begin() + ptrdiff_t(s * per_slot), per_slot,
                  r.pool_before.begin() + ptrdiff_t(slot_of_seq(setup, s) * per_slot));

  cuda::DeviceBuffer<int32_t> cu_seqlens{std::span<const int32_t>(b.cu_seqlens)};
  cuda::DeviceBuffer<uint16_t> q{std::span<const uint16_t>(b.q)}, k{std::span<const uint16_t>(b.k)},
      v{std::span<const uint16_t>(b.v)};
  cuda::DeviceBuffer<float> g{std::span<const float>(b.g)}, beta{std::span<const float>(b.beta)};
  cuda::DeviceBuffer<int32_t> slots{std::span<const int32_t>(setup.slots)};
  const std::vector<float> pool_in = to_layout(r.pool_before, setup.layout);
  cuda::DeviceBuffer<float> initial_pool{std::span<const float>(pool_in)};
  cuda::DeviceBuffer<float> final_pool(setup.in_place ? 0 : pool_in.size());
  final_pool.fill_bytes(0xFF);
  cuda::DeviceBuffer<uint16_t> out(size_t(b.total_tokens()) * Hv * kDim);
  out.fill_bytes(0xFF);

  di_gdn_prefill_args args{};
  args.abi_version = DI_GDN_ABI_VERSION;
  args.geometry = b.geometry;
  args.state_layout = setup.layout;
  args.num_seqs = b.num_seqs();
  args.total_tokens = b.total_tokens();
  args.max_seq_tokens = setup.max_seq_tokens;
  args.scale = scale;
  args.flags = setup.flags;
  args.cu_seqlens = cu_seqlens.data();
  args.q = q.data(), args.k = k.data(), args.v = v.data();
  args.g = g.data(), args.beta = beta.data();
  args.initial_state = setup.with_initial ? initial_pool.data() : nullptr;
  args.final_state = !setup.write_final ? nullptr : setup.in_place ? initial_pool.data() : final_pool.data();
  args.state_indices = setup.slots.empty() ? nullptr : slots.data();
  args.out = out.data();

  // The scratch the backend asks for, poisoned: nothing may rely on its contents.
  const di_gdn_prefill_shape shape{b.geometry, args.num_seqs, args.total_tokens, args.max_seq_tokens};
  const bool split = setup.segment_tokens != 0 && &backend == &gdn_sm90_backend();
  cuda::DeviceBuffer<uint8_t> scratch(split ? sm90_split_scratch_bytes(&shape, setup.segment_tokens)
                                            : backend.scratch_bytes(&shape));
  scratch.fill_bytes(0xFF);
  void* scratch_ptr = scratch.size() > 0 ? scratch.data() : nullptr;
  const auto s = reinterpret_cast<di_gdn_stream>(stream);
  r.status = split ? sm90_run_split(&args, scratch_ptr, scratch.size(), s, setup.segment_tokens)
                   : backend.run(&args, scratch_ptr, scratch.size(), s);
  DI_CUDA_CHECK(cudaStreamSynchronize(stream));
  r.out = bf16_to_floats(out.download());
  if (setup.write_final)
    r.pool_after = from_layout(setup.in_place ? initial_pool.download() : final_pool.download(), setup.layout);
  return r;
}

// The tolerances of a backend's arithmetic: float32 throughout (baseline), or bf16 tensor-core
// operands for the state products (sm90; tolerance.h says what that costs).
struct BackendTolerance {
  Tolerance out, state;
};
BackendTolerance backend_tolerance(const di_gdn_prefill_backend& backend) {
  if (std::string(backend.name) == "baseline") return {kBf16GdnKernelOut, kF32GdnKernelState};
  return {kBf16GdnTensorCoreOut, kF32GdnTensorCoreState};
}

// The production backends this GPU runs for `geometry` (each refusal is printed once per call).
std::vector<const di_gdn_prefill_backend*> backends_on_this_gpu(const di_gdn_geometry& geometry) {
  di_gdn_device device{};
  const cuda::DeviceInfo info = cuda::current_device();
  device.sm_major = info.sm_major, device.sm_minor = info.sm_minor, device.num_sms = info.num_sms;
  device.shared_memory_per_block_optin = info.shared_memory_per_block_optin;
  std::vector<const di_gdn_prefill_backend*> out;
  for (const di_gdn_prefill_backend* b : prefill_backends()) {
    const Verdict v = ask(*b, geometry, device, DI_GDN_STATE_KV);
    if (v.ok) out.push_back(b);
    else std::printf("[ note ] GDN backend %s does not run here: %s\n", b->name, v.reason.c_str());
  }
  return out;
}

// Output and final states of a run against the oracle; slots no sequence owns must be untouched
// (bit for bit in place, still NaN in a separate final pool).
void expect_matches_oracle(const Batch& b, const Reference<double>& want, const GpuResult& got, const RunSetup& setup,
                           const BackendTolerance& tol) {
  ASSERT_EQ(got.status, DI_GDN_OK);
  EXPECT_TRUE(all_close(got.out, want.out, tol.out, "out"));
  if (!setup.write_final) return;
  const int Hv = b.geometry.num_v_heads;
  std::vector<bool> owned(size_t(setup.pool_slots), false);
  for (int s = 0; s < b.num_seqs(); ++s) {
    const int slot = slot_of_seq(setup, s);
    owned[size_t(slot)] = true;
    EXPECT_TRUE(all_close(slot_of(got.pool_after, slot, Hv), slot_of(want.state, s, Hv), tol.state,
                          fmt::format("final state of sequence {} (length {}, slot {})", s, b.length(s), slot)));
  }
  for (int slot = 0; slot < setup.pool_slots; ++slot) {
    if (owned[size_t(slot)]) continue;
    const auto after = slot_of(got.pool_after, slot, Hv);
    if (setup.in_place)
      EXPECT_EQ(std::memcmp(after.data(), slot_of(got.pool_before, slot, Hv).data(), after.size() * sizeof(float)), 0)
          << "slot " << slot << " belongs to no sequence but changed";
    else
      EXPECT_TRUE(std::all_of(after.begin(), after.end(), [](float x) { return std::isnan(x); }))
          << "slot " << slot << " belongs to no sequence but was written";
  }
}


// ---------------------------------------------------------------------------------------------
// Single sequences of odd lengths, zero and random initial state, both layouts.

struct SingleCase {
  int T;
  bool with_initial;
};

void PrintTo(const SingleCase& c, std::ostream* os) {
  *os << "T=" << c.T << (c.with_initial ? " random initial state" : " zero (NULL) initial state");
}

class GdnPrefillSingle : public GdnGpuTest, public ::testing::WithParamInterface<SingleCase> {};

TEST_P(GdnPrefillSingle, EveryBackendMatchesFloat64Oracle) {
  const SingleCase& c = GetParam();
  const uint32_t seed = fresh_seed();
  SCOPED_TRACE(seed_trace(seed));
  std::mt19937 rng(seed);
  const Batch b = make_batch(kQwenSmall, {c.T}, rng);
  const std::vector<float> initial =
      c.with_initial ? random_states(1, kQwenSmall.num_v_heads, rng) : std::vector<float>{};
  const Reference<double> want = oracle(b, initial, kScale);
  for (const di_gdn_prefill_backend* backend : backends_on_this_gpu(kQwenSmall))
    for (di_gdn_state_layout layout : kLayouts) {
      SCOPED_TRACE(fmt::format("backend {}, {}", backend->name, layout_str(layout)));
      RunSetup setup;
      setup.layout = layout;
      setup.pool_slots = 1;
      setup.with_initial = c.with_initial;
      const GpuResult got = run_backend(*backend, b, initial, kScale, setup, stream_, rng);
      expect_matches_oracle(b, want, got, setup, backend_tolerance(*backend));
    }
}

INSTANTIATE_TEST_SUITE_P(GdnPrefill, GdnPrefillSingle,
                         ::testing::ValuesIn([] {
                           std::vector<SingleCase> cases;
                           for (int T : {1, 2, 63, 64, 65, 127, 128, 1000, 4096})
                             for (bool with_initial : {false, true}) cases.push_back({T, with_initial});
                           return cases;
                         }()),
                         [](const ::testing::TestParamInfo<SingleCase>& info) {
                           return fmt::format("T{}_{}", info.param.T, info.param.with_initial ? "state" : "zero");
                         });

// ---------------------------------------------------------------------------------------------
// Batches: variable lengths (one of them empty), permuted slots, state in place, no final state.

class GdnPrefillBatch : public di::testing::SeededGpuTest<std::mt19937> {
 protected:
  // A permutation of `n` distinct slots out of `pool` (so some slots belong to no sequence).
  std::vector<int32_t> permuted_slots(int n, int pool) {
    std::vector<int32_t> all(static_cast<size_t>(pool));
    std::iota(all.begin(), all.end(), 0);
    std::shuffle(all.begin(), all.end(), rng_);
    return std::vector<int32_t>(all.begin(), all.begin() + n);
  }
};

const std::vector<int> kVarLengths = {1, 64, 65, 0, 1000, 127};

TEST_F(GdnPrefillBatch, VariableLengthsMatchOracle) {
  SCOPED_TRACE(seed_trace(seed_));
  const Batch b = make_batch(kQwenSmall, kVarLengths, rng_);
  const int N = b.num_seqs(), Hv = kQwenSmall.num_v_heads;
  const std::vector<float> initial = random_states(N, Hv, rng_);
  for (bool with_initial : {false, true}) {
    const Reference<double> want = oracle(b, with_initial ? initial : std::vector<float>{}, kScale);
    for (const di_gdn_prefill_backend* backend : backends_on_this_gpu(kQwenSmall))
      for (di_gdn_state_layout layout : kLayouts)
        for (bool permute : {false, true}) {
          SCOPED_TRACE(fmt::format("backend {}, {}, {} initial state, {} slots", backend->name, layout_str(layout),
                                   with_initial ? "random" : "NULL", permute ? "permuted" : "identity"));
          RunSetup setup;
          setup.layout = layout;
          setup.with_initial = with_initial;
          setup.pool_slots = permute ? N + 3 : N;
          if (permute) setup.slots = permuted_slots(N, setup.pool_slots);
          const GpuResult got = run_backend(*backend, b, initial, kScale, setup, stream_, rng_);
          expect_matches_oracle(b, want, got, setup, backend_tolerance(*backend));
        }
  }
}

// A sequence's output and final state do not depend on what else the launch holds: alone it is 32
// (sequence, head) pairs, which sm90 runs in half-head CTAs; in a batch of four, 128 pairs, in
// whole-head CTAs (where the state warpgroups make P, not the auxiliary ones). Both must give the same
// bits (and so must every other backend), with q and k normalised ahead or by the kernel.
TEST_F(GdnPrefillBatch, ASequenceGivesTheSameBitsAloneAndBatched) {
  SCOPED_TRACE(seed_trace(seed_));
  const Batch batch = make_batch(kQwenSmall, {200, 130, 1, 65}, rng_);
  const int pick = 1, Hk = kQwenSmall.num_k_heads, Hv = kQwenSmall.num_v_heads;
  const int64_t t0 = batch.cu_seqlens[pick], t1 = batch.cu_seqlens[pick + 1];
  Batch alone;
  alone.geometry = batch.geometry;
  alone.cu_seqlens = {0, int32_t(t1 - t0)};
  auto rows = [](const auto& x, int64_t from, int64_t to, int64_t width) {
    return std::decay_t<decltype(x)>(x.begin() + ptrdiff_t(from * width), x.begin() + ptrdiff_t(to * width));
  };
  alone.q = rows(batch.q, t0, t1, Hk * kDim), alone.k = rows(batch.k, t0, t1, Hk * kDim);
  alone.v = rows(batch.v, t0, t1, Hv * kDim);
  alone.g = rows(batch.g, t0, t1, Hv), alone.beta = rows(batch.beta, t0, t1, Hv);
  const std::vector<float> initial = random_states(batch.num_seqs(), Hv, rng_);
  for (const di_gdn_prefill_backend* backend : backends_on_this_gpu(kQwenSmall))
    for (di_gdn_state_layout layout : kLayouts)
      for (uint32_t flags : {0u, uint32_t(DI_GDN_QK_L2NORM)}) {
        SCOPED_TRACE(fmt::format("backend {}, {}, flags {}", backend->name, layout_str(layout), flags));
        RunSetup setup;
        setup.layout = layout;
        setup.flags = flags;
        setup.pool_slots = batch.num_seqs();
        const GpuResult batched = run_backend(*backend, batch, initial, kScale, setup, stream_, rng_);
        setup.pool_slots = 1;
        const GpuResult single = run_backend(*backend, alone, slot_of(initial, pick, Hv), kScale, setup, stream_, rng_);
        ASSERT_EQ(batched.status, DI_GDN_OK);
        ASSERT_EQ(single.status, DI_GDN_OK);
        ASSERT_TRUE(std::none_of(single.out.begin(), single.out.end(), [](float x) { return std::isnan(x); }));
        const std::vector<float> out_in_batch = rows(batched.out, t0, t1, Hv * kDim);
        ASSERT_EQ(out_in_batch.size(), single.out.size());
        EXPECT_EQ(std::memcmp(out_in_batch.data(), single.out.data(), single.out.size() * sizeof(float)), 0)
            << "the output differs alone and batched";
        const std::vector<float> state_in_batch = slot_of(batched.pool_after, pick, Hv);
        const std::vector<float> state_alone = slot_of(single.pool_after, 0, Hv);
        EXPECT_EQ(std::memcmp(state_in_batch.data(), state_alone.data(), state_alone.size() * sizeof(float)), 0)
            << "the final state differs alone and batched";
      }
}

// DI_GDN_QK_L2NORM: raw q and k rows of any magnitude (including all-zero rows), normalised by the
// backend in float32, against the oracle that normalises the same bf16 rows in float64.
TEST_F(GdnPrefillBatch, RawQkNormalisedInKernelMatchesOracle) {
  SCOPED_TRACE(seed_trace(seed_));
  Batch b = make_batch(kQwenSmall, {1, 63, 64, 65, 300}, rng_);
  std::uniform_real_distribution<float> magnitude(0.05f, 30.0f);
  for (std::vector<uint16_t>* x : {&b.q, &b.k})
    for (size_t r = 0; r < x->size() / kDim; ++r) {
      const float m = r % 97 == 5 ? 0.0f : magnitude(rng_);  // a few all-zero rows: their norm is sqrt(1e-6)
      for (int i = 0; i < kDim; ++i) (*x)[r * kDim + i] = f32_to_bf16(bf16_to_f32((*x)[r * kDim + i]) * m);
    }
  const int N = b.num_seqs(), Hv = kQwenSmall.num_v_heads;
  const std::vector<float> initial = random_states(N, Hv, rng_);
  const Reference<double> want = oracle(b, initial, kScale, /*normalize_qk=*/true);
  for (const di_gdn_prefill_backend* backend : backends_on_this_gpu(kQwenSmall))
    for (di_gdn_state_layout layout : kLayouts) {
      SCOPED_TRACE(fmt::format("backend {}, {}", backend->name, layout_str(layout)));
      RunSetup setup;
      setup.layout = layout;
      setup.pool_slots = N;
      setup.flags = DI_GDN_QK_L2NORM;
      const GpuResult got = run_backend(*backend, b, initial, kScale, setup, stream_, rng_);
      expect_matches_oracle(b, want, got, setup, backend_tolerance(*backend));
    }
}

// Value columns up to four orders of magnitude above the rest (|v| to 30,000, still bf16; their
// initial state columns scaled alike): no backend may lose those columns' precision, and one whose
// operands have a narrower range than bf16 (fp16 ends at 65504) must scale around it. Every value
// column is its own linear problem, so out and state divided by the column's factor are held to the
// ordinary tolerances; a NaN or an infinity from an overflow fails them.
TEST_F(GdnPrefillBatch, LargeValueColumnsKeepTheirPrecision) {
  SCOPED_TRACE(seed_trace(seed_));
  Batch b = make_batch(kQwenSmall, {64, 200, 1}, rng_);
  std::uniform_real_distribution<float> magnitude(2000.f, 30000.f);
  const int N = b.num_seqs(), Hv = kQwenSmall.num_v_heads;
  const size_t columns = size_t(Hv) * kDim;
  std::vector<float> factor(columns, 1.f);
  for (size_t c = 0; c < columns; ++c)
    if (c % 13 == 5) factor[c] = magnitude(rng_);
  for (size_t i = 0; i < b.v.size(); ++i) b.v[i] = f32_to_bf16(bf16_to_f32(b.v[i]) * factor[i % columns]);
  auto state_column = [&](size_t i) { return (i / (size_t(kDim) * kDim)) % Hv * kDim + i % kDim; };
  std::vector<float> initial = random_states(N, Hv, rng_);
  for (size_t i = 0; i < initial.size(); ++i) initial[i] *= factor[state_column(i)];
  Reference<double> want = oracle(b, initial, kScale);
  for (size_t i = 0; i < want.out.size(); ++i) want.out[i] /= factor[i % columns];
  for (size_t i = 0; i < want.state.size(); ++i) want.state[i] /= factor[state_column(i)];
  for (const di_gdn_prefill_backend* backend : backends_on_this_gpu(kQwenSmall)) {
    SCOPED_TRACE(fmt::format("backend {}", backend->name));
    RunSetup setup;
    setup.pool_slots = N;
    GpuResult got = run_backend(*backend, b, initial, kScale, setup, stream_, rng_);
    for (size_t i = 0; i < got.out.size(); ++i) got.out[i] /= factor[i % columns];
    for (size_t i = 0; i < got.pool_after.size(); ++i) got.pool_after[i] /= factor[state_column(i)];
    expect_matches_oracle(b, want, got, setup, backend_tolerance(*backend));
  }
}

// initial_state == final_state: each CTA reads its whole slice before writing it, so updating the
// pool in place gives the oracle's states, and slots of no sequence keep their bits.
TEST_F(GdnPrefillBatch, StateUpdatedInPlace) {
  SCOPED_TRACE(seed_trace(seed_));
  const Batch b = make_batch(kQwenSmall, {65, 0, 130, 7, 64}, rng_);
  const int N = b.num_seqs(), Hv = kQwenSmall.num_v_heads;
  const std::vector<float> initial = random_states(N, Hv, rng_);
  const Reference<double> want = oracle(b, initial, kScale);
  for (const di_gdn_prefill_backend* backend : backends_on_this_gpu(kQwenSmall))
    for (di_gdn_state_layout layout : kLayouts) {
      SCOPED_TRACE(fmt::format("backend {}, {}", backend->name, layout_str(layout)));
      RunSetup setup;
      setup.layout = layout;
      setup.pool_slots = N + 4;
      setup.slots = permuted_slots(N, setup.pool_slots);
      setup.in_place = true;
      const GpuResult got = run_backend(*backend, b, initial, kScale, setup, stream_, rng_);
      expect_matches_oracle(b, want, got, setup, backend_tolerance(*backend));
    }
}

// final_state NULL: the output is still right and nothing else is written.
TEST_F(GdnPrefillBatch, NullFinalStateStillWritesOutput) {
  SCOPED_TRACE(seed_trace(seed_));
  const Batch b = make_batch(kQwenSmall, {100, 3}, rng_);
  const std::vector<float> initial = random_states(b.num_seqs(), kQwenSmall.num_v_heads, rng_);
  const Reference<double> want = oracle(b, initial, kScale);
  RunSetup setup;
  setup.pool_slots = b.num_seqs();
  setup.write_final = false;
  for (const di_gdn_prefill_backend* backend : backends_on_this_gpu(kQwenSmall)) {
    SCOPED_TRACE(fmt::format("backend {}", backend->name));
    const GpuResult got = run_backend(*backend, b, initial, kScale, setup, stream_, rng_);
    expect_matches_oracle(b, want, got, setup, backend_tolerance(*backend));
  }
}

// Other GVA ratios: value head h reads key head h / (Hv / Hk).
TEST_F(GdnPrefillBatch, GroupedValueHeadsReadTheirKeyHead) {
  SCOPED_TRACE(seed_trace(seed_));
  for (di_gdn_geometry geometry : {di_gdn_geometry{4, 4, kDim, kDim}, di_gdn_geometry{2, 6, kDim, kDim}}) {
    SCOPED_TRACE(fmt::format("Hk {} Hv {}", geometry.num_k_heads, geometry.num_v_heads));
    const Batch b = make_batch(geometry, {70, 129}, rng_);
    const std::vector<float> initial = random_states(b.num_seqs(), geometry.num_v_heads, rng_);
    const Reference<double> want = oracle(b, initial, kScale);
    RunSetup setup;
    setup.pool_slots = b.num_seqs();
    setup.layout = DI_GDN_STATE_VK;
    for (const di_gdn_prefill_backend* backend : backends_on_this_gpu(geometry)) {
      SCOPED_TRACE(fmt::format("backend {}", backend->name));
      const GpuResult got = run_backend(*backend, b, initial, kScale, setup, stream_, rng_);
      expect_matches_oracle(b, want, got, setup, backend_tolerance(*backend));
    }
  }
}

// ---------------------------------------------------------------------------------------------
// sm90's context split: each sequence cut into segments that run side by side, their entry states
// carried by transfer matrices (gdn/context_split.h). Forced to segments of one to three chunks, a
// small batch cuts into dozens of them: sequences of one segment, of a partial last one, empty ones,
// at 2/8 heads (the shapes it is for) and 16/32, in both layouts, from zero and random states in
// permuted slots of a larger pool, and in place.

bool sm90_runs_here(const di_gdn_geometry& geometry) {
  for (const di_gdn_prefill_backend* b : backends_on_this_gpu(geometry))
    if (b == &gdn_sm90_backend()) return true;
  return false;
}

TEST_F(GdnPrefillBatch, Sm90ContextSplitMatchesOracle) {
  SCOPED_TRACE(seed_trace(seed_));
  for (di_gdn_geometry geometry : {di_gdn_geometry{2, 8, kDim, kDim}, kQwenSmall}) {
    if (!sm90_runs_here(geometry)) GTEST_SKIP() << "sm90 does not run on this GPU";
    const Batch b = make_batch(geometry, {1000, 0, 64, 65, 321, 1}, rng_);
    const int N = b.num_seqs(), Hv = geometry.num_v_heads;
    const std::vector<float> initial = random_states(N, Hv, rng_);
    for (bool with_initial : {false, true}) {
      const Reference<double> want = oracle(b, with_initial ? initial : std::vector<float>{}, kScale);
      for (int32_t segment_tokens : {64, 128, 192})
        for (di_gdn_state_layout layout : kLayouts) {
          SCOPED_TRACE(fmt::format("Hk {} Hv {}, segments of {} tokens, {}, {} initial state", geometry.num_k_heads,
                                   Hv, segment_tokens, layout_str(layout), with_initial ? "random" : "NULL"));
          RunSetup setup;
          setup.layout = layout;
          setup.with_initial = with_initial;
          setup.pool_slots = N + 3;
          setup.slots = permuted_slots(N, setup.pool_slots);
          setup.segment_tokens = segment_tokens;
          setup.in_place = with_initial && segment_tokens == 128;
          const GpuResult got = run_backend(gdn_sm90_backend(), b, initial, kScale, setup, stream_, rng_);
          expect_matches_oracle(b, want, got, setup, backend_tolerance(gdn_sm90_backend()));
        }
    }
  }
}

// The split the backend chooses itself: one sequence of 8192 tokens over 2/8 heads (16 half-head
// CTAs unsplit) is split on an H200-sized GPU. Both runs against the oracle; the split run twice
// gives the same bits.
TEST_F(GdnPrefillBatch, Sm90SplitsALongSequenceOfFewHeads) {
  SCOPED_TRACE(seed_trace(seed_));
  const di_gdn_geometry geometry{2, 8, kDim, kDim};
  if (!sm90_runs_here(geometry)) GTEST_SKIP() << "sm90 does not run on this GPU";
  const Batch b = make_batch(geometry, {8192}, rng_);
  const di_gdn_prefill_shape shape{geometry, 1, b.total_tokens()};
  if (cuda::current_device().num_sms < 100) GTEST_SKIP() << "the split policy is tuned for H100/H200-sized GPUs";
  ASSERT_GT(gdn_sm90_backend().scratch_bytes(&shape), 0u) << "the backend did not split 2/8 1x8192";
  EXPECT_EQ(sm90_split_scratch_bytes(&shape, -1), 0u);
  const std::vector<float> initial = random_states(1, geometry.num_v_heads, rng_);
  const Reference<double> want = oracle(b, initial, kScale);
  RunSetup setup;
  setup.pool_slots = 1;
  std::vector<float> split_out;
  for (int32_t segment_tokens : {0, -1, 0}) {
    SCOPED_TRACE(segment_tokens == 0 ? "the backend's split" : "unsplit");
    setup.segment_tokens = segment_tokens;
    const GpuResult got = run_backend(gdn_sm90_backend(), b, initial, kScale, setup, stream_, rng_);
    expect_matches_oracle(b, want, got, setup, backend_tolerance(gdn_sm90_backend()));
    if (segment_tokens != 0) continue;
    if (split_out.empty()) {
      split_out = got.out;
    } else {
      EXPECT_EQ(std::memcmp(split_out.data(), got.out.data(), got.out.size() * sizeof(float)), 0)
          << "two split runs gave different bits";
    }
  }
}

// The longest-sequence hint plans the split and changes no result: one long sequence among short ones
// over 2/8 heads, unsplit without the hint and split with it (on an H200-sized GPU), and a batch of
// equal lengths given a hint that is wrong but possible (the whole batch), which splits it. Every run
// against the oracle, each sequence from a random initial state.
TEST_F(GdnPrefillBatch, Sm90LengthHintChangesNoResult) {
  SCOPED_TRACE(seed_trace(seed_));
  const di_gdn_geometry geometry{2, 8, kDim, kDim};
  if (!sm90_runs_here(geometry)) GTEST_SKIP() << "sm90 does not run on this GPU";
  const bool h200_sized = cuda::current_device().num_sms >= 100;
  struct Case {
    std::vector<int> lengths;
    int64_t hint;
    bool splits;  // on an H200-sized GPU
  };
  for (const Case& c : {Case{{5300, 600, 100}, 0, false}, Case{{5300, 600, 100}, 5300, true},
                        Case{{2000, 2000, 2000}, 6000, true}}) {
    SCOPED_TRACE(fmt::format("{} sequences, hint {}", c.lengths.size(), c.hint));
    const Batch b = make_batch(geometry, c.lengths, rng_);
    const di_gdn_prefill_shape shape{geometry, b.num_seqs(), b.total_tokens(), c.hint};
    if (h200_sized) {
      EXPECT_EQ(gdn_sm90_backend().scratch_bytes(&shape) > 0, c.splits);
    }
    const std::vector<float> initial = random_states(b.num_seqs(), geometry.num_v_heads, rng_);
    const Reference<double> want = oracle(b, initial, kScale);
    RunSetup setup;
    setup.pool_slots = b.num_seqs() + 1;
    setup.slots = permuted_slots(b.num_seqs(), setup.pool_slots);
    setup.max_seq_tokens = c.hint;
    const GpuResult got = run_backend(gdn_sm90_backend(), b, initial, kScale, setup, stream_, rng_);
    expect_matches_oracle(b, want, got, setup, backend_tolerance(gdn_sm90_backend()));
  }
}

// A split needs its scratch: run() refuses too little, or none, before it launches anything; a
// segment length that is not a multiple of the chunk is refused too.
TEST_F(GdnPrefillBatch, Sm90SplitRefusesMissingScratch) {
  const di_gdn_geometry geometry{2, 8, kDim, kDim};
  if (!sm90_runs_here(geometry)) GTEST_SKIP() << "sm90 does not run on this GPU";
  const Batch b = make_batch(geometry, {300, 20}, rng_);
  const di_gdn_prefill_shape shape{geometry, b.num_seqs(), b.total_tokens()};
  const size_t need = sm90_split_scratch_bytes(&shape, 64);
  ASSERT_GT(need, 0u);
  cuda::DeviceBuffer<int32_t> cu_seqlens{std::span<const int32_t>(b.cu_seqlens)};
  cuda::DeviceBuffer<uint16_t> q{std::span<const uint16_t>(b.q)}, k{std::span<const uint16_t>(b.k)},
      v{std::span<const uint16_t>(b.v)};
  cuda::DeviceBuffer<float> g{std::span<const float>(b.g)}, beta{std::span<const float>(b.beta)};
  cuda::DeviceBuffer<uint16_t> out(size_t(b.total_tokens()) * geometry.num_v_heads * kDim);
  cuda::DeviceBuffer<uint8_t> scratch(need);
  di_gdn_prefill_args args{};
  args.abi_version = DI_GDN_ABI_VERSION;
  args.geometry = geometry;
  args.num_seqs = b.num_seqs();
  args.total_tokens = b.total_tokens();
  args.scale = kScale;
  args.cu_seqlens = cu_seqlens.data();
  args.q = q.data(), args.k = k.data(), args.v = v.data();
  args.g = g.data(), args.beta = beta.data();
  args.out = out.data();
  const auto s = reinterpret_cast<di_gdn_stream>(stream_);
  EXPECT_EQ(sm90_run_split(&args, nullptr, 0, s, 64), DI_GDN_INVALID_ARGUMENT);
  EXPECT_EQ(sm90_run_split(&args, scratch.data(), need - 1, s, 64), DI_GDN_INVALID_ARGUMENT);
  EXPECT_EQ(sm90_run_split(&args, scratch.data() + 4, need - 4, s, 64), DI_GDN_INVALID_ARGUMENT);
  EXPECT_EQ(sm90_run_split(&args, scratch.data(), need, s, 100), DI_GDN_INVALID_ARGUMENT);
  EXPECT_EQ(sm90_run_split(&args, scratch.data(), need, s, 64), DI_GDN_OK);
  DI_CUDA_CHECK(cudaStreamSynchronize(stream_));
}

// ---------------------------------------------------------------------------------------------
// The ABI: argument checks and refusals. run() checks its arguments before any CUDA call, so these
// run without a GPU.

// Arguments that pass every check, over fake (never dereferenced) 256-byte-aligned addresses.
di_gdn_prefill_args valid_looking_args() {
  static constexpr uintptr_t kFake = 0x10000;
  auto at = [](int i) { return reinterpret_cast<void*>(kFake * uintptr_t(i + 1)); };
  di_gdn_prefill_args a{};
  a.abi_version = DI_GDN_ABI_VERSION;
  a.geometry = kQwenSmall;
  a.state_layout = DI_GDN_STATE_KV;
  a.num_seqs = 2;
  a.total_tokens = 10;
  a.scale = kScale;
  a.cu_seqlens = static_cast<const int32_t*>(at(0));
  a.q = at(1), a.k = at(2), a.v = at(3);
  a.g = static_cast<const float*>(at(4)), a.beta = static_cast<const float*>(at(5));
  a.initial_state = static_cast<const float*>(at(6));
  a.final_state = static_cast<float*>(at(7));
  a.state_indices = nullptr;
  a.out = at(8);
  return a;
}

TEST(GdnPrefillAbi, InvalidArgumentsAreRefused) {
  for (const di_gdn_prefill_backend* each : prefill_backends()) {
  SCOPED_TRACE(each->name);
  const di_gdn_prefill_backend& backend = *each;
  auto run = [&](const di_gdn_prefill_args& a) { return backend.run(&a, nullptr, 0, nullptr); };
  EXPECT_EQ(backend.run(nullptr, nullptr, 0, nullptr), DI_GDN_INVALID_ARGUMENT);
  struct Case {
    const char* what;
    void (*mutate)(di_gdn_prefill_args&);
  };
  const Case cases[] = {
      {"abi_version 0", [](di_gdn_prefill_args& a) { a.abi_version = 0; }},
      {"abi_version + 1", [](di_gdn_prefill_args& a) { a.abi_version = DI_GDN_ABI_VERSION + 1; }},
      {"num_seqs -1", [](di_gdn_prefill_args& a) { a.num_seqs = -1; }},
      {"total_tokens -1", [](di_gdn_prefill_args& a) { a.total_tokens = -1; }},
      {"max_seq_tokens -1", [](di_gdn_prefill_args& a) { a.max_seq_tokens = -1; }},
      {"max_seq_tokens past total_tokens", [](di_gdn_prefill_args& a) { a.max_seq_tokens = a.total_tokens + 1; }},
      {"max_seq_tokens under the sequences' share",
       [](di_gdn_prefill_args& a) { a.max_seq_tokens = a.total_tokens / a.num_seqs - 1; }},
      {"num_k_heads 0", [](di_gdn_prefill_args& a) { a.geometry.num_k_heads = 0; }},
      {"num_v_heads -4", [](di_gdn_prefill_args& a) { a.geometry.num_v_heads = -4; }},
      {"state layout 7", [](di_gdn_prefill_args& a) { a.state_layout = di_gdn_state_layout(7); }},
      {"cu_seqlens NULL", [](di_gdn_prefill_args& a) { a.cu_seqlens = nullptr; }},
      {"q NULL", [](di_gdn_prefill_args& a) { a.q = nullptr; }},
      {"k NULL", [](di_gdn_prefill_args& a) { a.k = nullptr; }},
      {"v NULL", [](di_gdn_prefill_args& a) { a.v = nullptr; }},
      {"g NULL", [](di_gdn_prefill_args& a) { a.g = nullptr; }},
      {"beta NULL", [](di_gdn_prefill_args& a) { a.beta = nullptr; }},
      {"out NULL", [](di_gdn_prefill_args& a) { a.out = nullptr; }},
      {"q misaligned", [](di_gdn_prefill_args& a) { a.q = static_cast<const char*>(a.q) + 2; }},
      {"out misaligned", [](di_gdn_prefill_args& a) { a.out = static_cast<char*>(a.out) + 4; }},
      {"final_state misaligned", [](di_gdn_prefill_args& a) { a.final_state += 1; }},
  };
  for (const Case& c : cases) {
    di_gdn_prefill_args a = valid_looking_args();
    c.mutate(a);
    EXPECT_EQ(run(a), DI_GDN_INVALID_ARGUMENT) << c.what;
  }
  // Unsupported geometry: DI_GDN_UNSUPPORTED, not a launch.
  di_gdn_prefill_args a = valid_looking_args();
  a.geometry.k_dim = a.geometry.v_dim = 64;
  EXPECT_EQ(run(a), DI_GDN_UNSUPPORTED);
  a = valid_looking_args();
  a.geometry.num_v_heads = 40;
  EXPECT_EQ(run(a), DI_GDN_UNSUPPORTED);
  // An empty batch is a valid no-op; with no tokens, q .. out may be NULL.
  a = valid_looking_args();
  a.num_seqs = 0;
  EXPECT_EQ(run(a), DI_GDN_OK);
  }
}

TEST(GdnPrefillAbi, Sm90SupportsGivesSpecificReasons) {
  const di_gdn_prefill_backend& backend = gdn_sm90_backend();
  EXPECT_STREQ(backend.name, "sm90");
  auto reason_for = [&](di_gdn_geometry g, di_gdn_device d, di_gdn_state_layout layout = DI_GDN_STATE_KV) {
    char reason[256];
    std::memset(reason, 'x', sizeof reason);
    const int status = backend.supports(&g, &d, layout, reason, sizeof reason);
    return std::pair<int, std::string>(status, reason);
  };
  const di_gdn_device h200{9, 0, 132, 232448};
  for (di_gdn_state_layout layout : kLayouts) EXPECT_EQ(reason_for(kQwenSmall, h200, layout).first, DI_GDN_OK);
  for (di_gdn_geometry g : {di_gdn_geometry{16, 48, kDim, kDim}, di_gdn_geometry{16, 64, kDim, kDim},
                            di_gdn_geometry{2, 8, kDim, kDim}, di_gdn_geometry{4, 16, kDim, kDim}})
    EXPECT_EQ(reason_for(g, h200).first, DI_GDN_OK);
  const auto a100 = reason_for(kQwenSmall, {8, 0, 108, 166912});
  EXPECT_EQ(a100.first, DI_GDN_UNSUPPORTED);
  EXPECT_NE(a100.second.find("sm_80 unsupported"), std::string::npos) << a100.second;
  const auto b200 = reason_for(kQwenSmall, {10, 0, 148, 232448});
  EXPECT_EQ(b200.first, DI_GDN_UNSUPPORTED);
  EXPECT_NE(b200.second.find("compute capability 9.0"), std::string::npos) << b200.second;
  const auto small_smem = reason_for(kQwenSmall, {9, 0, 132, 101376});
  EXPECT_EQ(small_smem.first, DI_GDN_UNSUPPORTED);
  EXPECT_NE(small_smem.second.find(fmt::format("needs {} bytes of shared memory", sm90_prefill_smem_bytes())),
            std::string::npos)
      << small_smem.second;
  const auto k64 = reason_for({16, 32, 64, 64}, h200);
  EXPECT_EQ(k64.first, DI_GDN_UNSUPPORTED);
  EXPECT_NE(k64.second.find("sm90 needs k_dim == v_dim == 128"), std::string::npos) << k64.second;
  const di_gdn_prefill_shape shape{kQwenSmall, 4, 5000};
  EXPECT_EQ(backend.scratch_bytes(&shape), 0u);
}

TEST(GdnPrefillAbi, BaselineSupportsGivesSpecificReasons) {
  const di_gdn_prefill_backend& backend = gdn_baseline_backend();
  EXPECT_STREQ(backend.name, "baseline");
  const di_gdn_device h200{9, 0, 132, 232448};
  auto reason_for = [&](di_gdn_geometry g, di_gdn_device d, di_gdn_state_layout layout = DI_GDN_STATE_KV) {
    char reason[256];
    std::memset(reason, 'x', sizeof reason);
    const int status = backend.supports(&g, &d, layout, reason, sizeof reason);
    return std::pair<int, std::string>(status, reason);
  };
  for (di_gdn_state_layout layout : kLayouts) {
    const auto [status, reason] = reason_for(kQwenSmall, h200, layout);
    EXPECT_EQ(status, DI_GDN_OK) << reason;
    EXPECT_EQ(reason, "");
  }
  EXPECT_EQ(reason_for({16, 48, kDim, kDim}, h200).first, DI_GDN_OK);
  EXPECT_EQ(reason_for(kQwenSmall, {8, 0, 108, 166912}).first, DI_GDN_OK);  // A100
  EXPECT_EQ(reason_for(kQwenSmall, {8, 9, 128, 101376}).first, DI_GDN_OK);  // L40 / 4090: 99 KiB opt-in

  const auto k64 = reason_for({16, 32, 64, 64}, h200);
  EXPECT_EQ(k64.first, DI_GDN_UNSUPPORTED);
  EXPECT_NE(k64.second.find("k_dim 64, v_dim 64 unsupported"), std::string::npos) << k64.second;
  EXPECT_NE(k64.second.find("k_dim == v_dim == 128"), std::string::npos) << k64.second;

  const auto ratio = reason_for({16, 40, kDim, kDim}, h200);
  EXPECT_EQ(ratio.first, DI_GDN_UNSUPPORTED);
  EXPECT_NE(ratio.second.find("num_v_heads (40) is not a multiple of num_k_heads (16)"), std::string::npos)
      << ratio.second;

  const auto turing = reason_for(kQwenSmall, {7, 5, 40, 65536});
  EXPECT_EQ(turing.first, DI_GDN_UNSUPPORTED);
  EXPECT_NE(turing.second.find("sm_75 unsupported"), std::string::npos) << turing.second;
  EXPECT_NE(turing.second.find("sm_80 or newer"), std::string::npos) << turing.second;

  const auto small_smem = reason_for(kQwenSmall, {8, 0, 108, 49152});
  EXPECT_EQ(small_smem.first, DI_GDN_UNSUPPORTED);
  EXPECT_NE(small_smem.second.find(fmt::format("needs {} bytes of shared memory", baseline_prefill_smem_bytes())),
            std::string::npos)
      << small_smem.second;

  const auto bad_layout = reason_for(kQwenSmall, h200, di_gdn_state_layout(5));
  EXPECT_EQ(bad_layout.first, DI_GDN_UNSUPPORTED);
  EXPECT_NE(bad_layout.second.find("state layout 5 unknown"), std::string::npos) << bad_layout.second;

  // A short buffer gets a truncated, NUL-terminated reason.
  di_gdn_geometry g{16, 32, 64, 64};
  char tiny[8];
  std::memset(tiny, 'x', sizeof tiny);
  EXPECT_EQ(backend.supports(&g, &h200, DI_GDN_STATE_KV, tiny, sizeof tiny), DI_GDN_UNSUPPORTED);
  EXPECT_EQ(std::strlen(tiny), sizeof tiny - 1);
  EXPECT_EQ(backend.supports(&g, &h200, DI_GDN_STATE_KV, nullptr, 0), DI_GDN_UNSUPPORTED);

  const di_gdn_prefill_shape shape{kQwenSmall, 4, 5000};
  EXPECT_EQ(backend.scratch_bytes(&shape), 0u);
}

// ---------------------------------------------------------------------------------------------
// The Hv48 diagnostic: how far the GPU kernel and the CPU float32 chunked form sit from the oracle
// at 16/48 heads (the 27B's ratio of 3), printed as a table.

struct ErrorStats {
  double max_abs = 0, mean_abs = 0, p99_abs = 0;
  int64_t past_tolerance = 0, count = 0;
};

template <typename A>
ErrorStats error_stats(const std::vector<A>& actual, const std::vector<double>& expected, Tolerance tol) {
  ErrorStats s;
  s.count = int64_t(expected.size());
  std::vector<double> err(expected.size());
  double sum = 0;
  for (size_t i = 0; i < expected.size(); ++i) {
    const double e = std::fabs(double(actual[i]) - expected[i]);
    err[i] = std::isfinite(e) ? e : INFINITY;
    sum += err[i];
    if (!(e <= tol.atol + tol.rtol * std::fabs(expected[i]))) ++s.past_tolerance;
  }
  if (err.empty()) return s;
  s.mean_abs = sum / double(err.size());
  s.max_abs = *std::max_element(err.begin(), err.end());
  const size_t p99 = std::min(err.size() - 1, size_t(0.99 * double(err.size())));
  std::nth_element(err.begin(), err.begin() + ptrdiff_t(p99), err.end());
  s.p99_abs = err[p99];
  return s;
}

class GdnDiagnostic : public GdnGpuTest {};

TEST_F(GdnDiagnostic, Hv48) {
  const uint32_t seed = fresh_seed();
  SCOPED_TRACE(seed_trace(seed));
  std::mt19937 rng(seed);
  const di_gdn_geometry geometry{16, 48, kDim, kDim};
  std::string table = fmt::format(
      "GDN Hv48 diagnostic: Hk/Hv/K/V 16/48/128/128, random initial state, {}\n"
      "{:>5}  {:<13} {:<6} {:>10} {:>10} {:>10} {:>9} {:>9}  {}\n",
      seed_trace(seed), "T", "path", "what", "max_abs", "mean_abs", "p99_abs", "past_tol", "of", "tolerance");
  auto row = [&](int T, const char* path, const char* what, const ErrorStats& s, Tolerance tol) {
    table += fmt::format("{:>5}  {:<13} {:<6} {:>10.3e} {:>10.3e} {:>10.3e} {:>9} {:>9}  {} ({:g} / {:g})\n", T, path,
                         what, s.max_abs, s.mean_abs, s.p99_abs, s.past_tolerance, s.count, tol.name, tol.atol,
                         tol.rtol);
  };
  for (int T : {128, 4096}) {
    SCOPED_TRACE(fmt::format("T {}", T));
    const Batch b = make_batch(geometry, {T}, rng);
    const std::vector<float> initial = random_states(1, geometry.num_v_heads, rng);
    const Reference<double> want = oracle(b, initial, kScale);
    const Reference<float> cpu32 = reference<float>(b, initial, kScale, /*chunked=*/true);
    RunSetup setup;
    setup.pool_slots = 1;
    for (const di_gdn_prefill_backend* backend : backends_on_this_gpu(geometry)) {
      SCOPED_TRACE(fmt::format("backend {}", backend->name));
      const GpuResult gpu = run_backend(*backend, b, initial, kScale, setup, stream_, rng);
      ASSERT_EQ(gpu.status, DI_GDN_OK);
      const BackendTolerance tol = backend_tolerance(*backend);
      const std::string path = fmt::format("gpu-{}", backend->name);
      row(T, path.c_str(), "out", error_stats(gpu.out, want.out, tol.out), tol.out);
      row(T, path.c_str(), "state", error_stats(gpu.pool_after, want.state, tol.state), tol.state);
      EXPECT_TRUE(all_close(gpu.out, want.out, tol.out, "gpu out"));
      EXPECT_TRUE(all_close(gpu.pool_after, want.state, tol.state, "gpu final state"));
    }
    row(T, "cpu-f32-chunk", "out", error_stats(cpu32.out, want.out, kBf16GdnKernelOut), kBf16GdnKernelOut);
    row(T, "cpu-f32-chunk", "state", error_stats(cpu32.state, want.state, kF32GdnKernelState), kF32GdnKernelState);
  }
  std::fputs(table.c_str(), stdout);
  std::fflush(stdout);
}

}  // namespace
}  // namespace di::gdn
