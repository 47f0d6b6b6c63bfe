// The GDN decode step (gdn/decode_step.h) against the float64 oracle, and against the prefill:
//   - batches of 1, 2, 7, 64 and 300 sequences, both state layouts, slots permuted in a larger pool:
//     the output (poisoned first) and the updated states against gdn_ref::delta_rule_recurrent<double>
//     for one token from a random state, with q/k norms and gates prepared on the host by the CPU
//     reference (ref::l2_normalize, ref::gdn_gates in Precision::bf16); slots of no sequence and
//     padding rows (state_indices < 0) are left alone;
//   - consistency: T decode steps give the outputs and final states of one baseline prefill of the
//     same T tokens;
//   - the output norm fused in (norm_weight set): bit for bit the plain step followed by
//     launch_gated_rms_norm, output and states, padding rows included;
//   - argument checks (run without a GPU).
// Inputs are fresh random numbers each run; DI_TEST_SEED replays a failure.
#include "gdn/decode_step.h"

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <numeric>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "core/bf16.h"
#include "core/cuda.h"
#include "core/tensor.h"
#include "gdn/baseline_prefill.h"
#include "gpu/gdn_test_support.h"
#include "gpu/gpu_test.h"
#include "kernels/gdn/prep_ref.h"
#include "kernels/gdn/ref.h"
#include "kernels/norm/norm.h"
#include "kernels/numerics.h"
#include "support/seed.h"
#include "support/tolerance.h"

namespace di::gdn {
namespace {

using di::testing::all_close;
using di::testing::fresh_seed;
using di::testing::kBf16GdnKernelOut;
using di::testing::kBf16TwoGdnKernels;
using di::testing::kF32GdnKernelState;
using di::testing::seed_trace;

using namespace di::gdn::testing;

template <typename T>
std::vector<T> slice(const std::vector<T>& x, size_t begin, size_t n) {
  return std::vector<T>(x.begin() + ptrdiff_t(begin), x.begin() + ptrdiff_t(begin + n));
}

// A raw b projection (bf16) whose bf16(sigmoid(b)) cannot depend on the last ulp of expf: the host's
// and the device's expf may differ by an ulp or two, which would flip beta's bf16 rounding (2^-8 of
// beta) when sigmoid(b) lies within a few float32 ulps of a bf16 rounding midpoint.
uint16_t draw_b(std::mt19937& rng) {
  std::normal_distribution<float> normal(0.0f, 1.5f);
  for (;;) {
    const uint16_t b = f32_to_bf16(normal(rng));
    const double s = 1.0 / (1.0 + std::exp(-double(bf16_to_f32(b))));
    if (round_bf16(float(s * (1 + 1e-6))) == round_bf16(float(s * (1 - 1e-6)))) return b;
  }
}

// The parameters of one GDN layer's gates: bf16-exact, so a Precision::bf16 host reference (which
// rounds parameters to bf16) and the kernel (which reads them as given) see the same values.
struct GateParams {
  std::vector<float> A_log, dt_bias;  // [Hv]
};
GateParams make_gate_params(int Hv, std::mt19937& rng) {
  std::uniform_real_distribution<float> log_a(-1.0f, 1.5f);
  std::normal_distribution<float> bias(0.0f, 1.0f);
  GateParams p;
  for (int h = 0; h < Hv; ++h) p.A_log.push_back(round_bf16(log_a(rng))), p.dt_bias.push_back(round_bf16(bias(rng)));
  return p;
}

// One decode step's inputs: rows [q | k | v] (bf16, raw conv output), a and b (bf16).
struct StepInputs {
  int num_seqs = 0;
  int64_t row_stride = 0;       // elements; a little wider than the row, as a slice of a larger buffer
  std::vector<uint16_t> qkv;    // [num_seqs, row_stride]
  std::vector<uint16_t> a, b;   // [num_seqs, Hv]
};

int64_t row_width(const di_gdn_geometry& g) { return int64_t(2 * g.num_k_heads + g.num_v_heads) * kDim; }

StepInputs random_step(const di_gdn_geometry& g, int num_seqs, std::mt19937& rng) {
  std::normal_distribution<float> normal(0.0f, 1.0f);
  StepInputs in;
  in.num_seqs = num_seqs;
  in.row_stride = row_width(g) + 8;
  in.qkv.assign(size_t(num_seqs * in.row_stride), f32_to_bf16(NAN));  // the gap must never be read
  for (int s = 0; s < num_seqs; ++s)
    for (int64_t i = 0; i < row_width(g); ++i) in.qkv[size_t(s * in.row_stride + i)] = f32_to_bf16(normal(rng));
  for (int i = 0; i < num_seqs * g.num_v_heads; ++i) {
    in.a.push_back(f32_to_bf16(normal(rng)));
    in.b.push_back(draw_b(rng));
  }
  return in;
}

// The host side of a step, as the CPU reference prepares it: q, k L2-normalised in float32
// ([num_seqs, Hk, K] each), v [num_seqs, Hv, V], g and beta [num_seqs, Hv].
struct PreparedStep {
  std::vector<float> q, k, v, g, beta;
};
PreparedStep prepare_on_host(const di_gdn_geometry& geo, const StepInputs& in, const GateParams& gates) {
  const int N = in.num_seqs, Hk = geo.num_k_heads, Hv = geo.num_v_heads;
  std::vector<float> q_raw, k_raw;
  PreparedStep p;
  for (int s = 0; s < N; ++s) {
    const uint16_t* row = in.qkv.data() + s * in.row_stride;
    for (int i = 0; i < Hk * kDim; ++i) q_raw.push_back(bf16_to_f32(row[i]));
    for (int i = 0; i < Hk * kDim; ++i) k_raw.push_back(bf16_to_f32(row[Hk * kDim + i]));
    for (int i = 0; i < Hv * kDim; ++i) p.v.push_back(bf16_to_f32(row[2 * Hk * kDim + i]));
  }
  p.q.resize(q_raw.size()), p.k.resize(k_raw.size());
  ref::l2_normalize(q_raw.data(), int64_t(N) * Hk, kDim, 1.0f, p.q.data());
  ref::l2_normalize(k_raw.data(), int64_t(N) * Hk, kDim, 1.0f, p.k.data());
  const std::vector<float> a = bf16_to_floats(in.a), b = bf16_to_floats(in.b);
  p.g.resize(a.size()), p.beta.resize(b.size());
  const TensorView A_log{gates.A_log.data(), DType::f32, {Hv}};
  const TensorView dt_bias{gates.dt_bias.data(), DType::f32, {Hv}};
  ref::gdn_gates(a.data(), b.data(), N, Hv, A_log, dt_bias, p.g.data(), p.beta.data(), Precision::bf16);
  return p;
}

// Device copies of one step's inputs and the gate parameters.
struct DeviceStep {
  cuda::DeviceBuffer<uint16_t> qkv, a, b;
  explicit DeviceStep(const StepInputs& in)
      : qkv{std::span<const uint16_t>(in.qkv)},
        a{std::span<const uint16_t>(in.a)},
        b{std::span<const uint16_t>(in.b)} {}
};

GdnDecodeParams params_for(const di_gdn_geometry& geo, di_gdn_state_layout layout, const StepInputs& in,
                           const DeviceStep& d, const cuda::DeviceBuffer<float>& A_log,
                           const cuda::DeviceBuffer<float>& dt_bias, cuda::DeviceBuffer<float>& pool,
                           const cuda::DeviceBuffer<int32_t>& slots, cuda::DeviceBuffer<uint16_t>& out) {
  GdnDecodeParams p{};
  p.geometry = geo;
  p.state_layout = layout;
  p.num_seqs = in.num_seqs;
  p.qkv = d.qkv.data();
  p.qkv_row_stride = in.row_stride;
  p.a = d.a.data(), p.b = d.b.data();
  p.A_log = A_log.data(), p.dt_bias = dt_bias.data();
  p.state = pool.data();
  p.state_indices = slots.size() ? slots.data() : nullptr;
  p.out = out.data();
  p.scale = kScale;
  return p;
}

std::vector<float> random_pool(size_t matrices, std::mt19937& rng) {
  std::normal_distribution<float> normal(0.0f, 0.25f);
  std::vector<float> pool(matrices * kDim * kDim);
  for (auto& x : pool) x = normal(rng);
  return pool;
}

// n distinct slots out of a pool of pool_slots, in random order.
std::vector<int32_t> distinct_slots(int n, int pool_slots, std::mt19937& rng) {
  std::vector<int32_t> all(static_cast<size_t>(pool_slots));
  std::iota(all.begin(), all.end(), 0);
  std::shuffle(all.begin(), all.end(), rng);
  all.resize(static_cast<size_t>(n));
  return all;
}

using GdnGpuTest = di::testing::GpuTest;

class GdnDecodeTest : public di::testing::SeededGpuTest<std::mt19937> {};

// ---------------------------------------------------------------------------------------------
// One step against the oracle.

// Runs one step for `num_seqs` sequences in `layout`; sequence s uses slots[s] of a pool with spare
// slots (slots[s] < 0: a padding row). Checks the output, every owned slot's state, and that all
// other slots kept their bits and padding rows' outputs are zero.
void check_one_step(int num_seqs, di_gdn_state_layout layout, std::vector<int32_t> slots, int pool_slots,
                    cudaStream_t stream, std::mt19937& rng) {
  const di_gdn_geometry geo = kQwenSmall;
  const int Hk = geo.num_k_heads, Hv = geo.num_v_heads;
  const size_t per_slot = size_t(Hv) * kDim * kDim;
  const GateParams gates = make_gate_params(Hv, rng);
  const StepInputs in = random_step(geo, num_seqs, rng);
  const PreparedStep prep = prepare_on_host(geo, in, gates);
  const std::vector<float> pool_before = random_pool(size_t(pool_slots) * Hv, rng);

  const DeviceStep d(in);
  const cuda::DeviceBuffer<float> A_log{std::span<const float>(gates.A_log)};
  const cuda::DeviceBuffer<float> dt_bias{std::span<const float>(gates.dt_bias)};
  cuda::DeviceBuffer<float> pool{std::span<const float>(to_layout(pool_before, layout))};
  const cuda::DeviceBuffer<int32_t> slot_buf{std::span<const int32_t>(slots)};
  cuda::DeviceBuffer<uint16_t> out(size_t(num_seqs) * Hv * kDim);
  out.fill_bytes(0xFF);
  const GdnDecodeParams p = params_for(geo, layout, in, d, A_log, dt_bias, pool, slot_buf, out);
  ASSERT_EQ(launch_gdn_decode_step(p, stream), cudaSuccess);
  DI_CUDA_CHECK(cudaStreamSynchronize(stream));
  const std::vector<float> got_out = bf16_to_floats(out.download());
  const std::vector<float> got_pool = from_layout(pool.download(), layout);

  // Oracle: one token of the recurrence per (sequence, value head) from the slot's state, one
  // sequence at a time (a batch of 300 holds 630 MB of float32 state).
  std::vector<double> want_out(size_t(num_seqs) * Hv * kDim, 0.0);
  std::vector<bool> owned(size_t(pool_slots), false);
  for (int s = 0; s < num_seqs; ++s) {
    const int32_t slot = slots[size_t(s)];
    if (slot < 0) continue;  // padding row: zero output, no state
    owned[size_t(slot)] = true;
    std::vector<double> want_state(pool_before.begin() + ptrdiff_t(size_t(slot) * per_slot),
                                   pool_before.begin() + ptrdiff_t(size_t(slot + 1) * per_slot));
    for (int h = 0; h < Hv; ++h) {
      const int kh = h / (Hv / Hk);
      std::vector<double> q(kDim), k(kDim), v(kDim);
      for (int i = 0; i < kDim; ++i) {
        q[i] = double(prep.q[size_t((s * Hk + kh) * kDim + i)]) * double(kScale);
        k[i] = prep.k[size_t((s * Hk + kh) * kDim + i)];
        v[i] = prep.v[size_t((s * Hv + h) * kDim + i)];
      }
      const double g = prep.g[size_t(s * Hv + h)], beta = prep.beta[size_t(s * Hv + h)];
      gdn_ref::delta_rule_recurrent<double>({1, 1, 1, kDim, kDim}, q.data(), k.data(), v.data(), &g, &beta,
                                            want_state.data() + size_t(h) * kDim * kDim,
                                            want_out.data() + size_t(s * Hv + h) * kDim);
    }
    EXPECT_TRUE(all_close(slice(got_pool, size_t(slot) * per_slot, per_slot), want_state, kF32GdnKernelState,
                          fmt::format("state of sequence {} (slot {})", s, slot)));
  }
  EXPECT_TRUE(all_close(got_out, want_out, kBf16GdnKernelOut, "out"));
  for (int slot = 0; slot < pool_slots; ++slot) {
    if (owned[size_t(slot)]) continue;
    EXPECT_EQ(std::memcmp(got_pool.data() + size_t(slot) * per_slot, pool_before.data() + size_t(slot) * per_slot,
                          per_slot * sizeof(float)),
              0)
        << "slot " << slot << " belongs to no sequence but changed";
  }
}

// A step of GetParam() sequences, checked in both state layouts.
class GdnDecodeBatch : public GdnDecodeTest, public ::testing::WithParamInterface<int> {
 protected:
  // check(layout, slots, pool_slots): the sequences on distinct slots, in random order, of a pool
  // `spare` slots larger than the batch.
  template <typename Check>
  void in_both_layouts(int spare, Check check) {
    SCOPED_TRACE(seed_trace(seed_));
    const int N = GetParam(), pool_slots = N + spare;
    for (di_gdn_state_layout layout : kLayouts) {
      SCOPED_TRACE(layout_str(layout));
      check(layout, distinct_slots(N, pool_slots, rng_), pool_slots);
    }
  }
};

TEST_P(GdnDecodeBatch, OneStepMatchesFloat64Oracle) {
  in_both_layouts(5, [&](di_gdn_state_layout layout, std::vector<int32_t> slots, int pool_slots) {
    check_one_step(GetParam(), layout, std::move(slots), pool_slots, stream_, rng_);
  });
}

// A negative slot marks a padding row (CUDA-graph batches padded to a bucket): zero output, no
// state read or written.
TEST_F(GdnDecodeTest, PaddingRowsAreSkipped) {
  SCOPED_TRACE(seed_trace(seed_));
  for (di_gdn_state_layout layout : kLayouts) {
    SCOPED_TRACE(layout_str(layout));
    check_one_step(5, layout, {3, -1, 0, -1, 6}, 8, stream_, rng_);
  }
}

// ---------------------------------------------------------------------------------------------
// T decode steps == one prefill of the same T tokens.

// A raw q or k head vector whose L2 normalisation is a bf16 vector up to ~5e-7: components
// ±2^-1, ±2^-2, ±2^-3 at random positions with squares summing to exactly 1, times 2^e. The decode
// step normalises it in float32 to x (1 - eps/(2 4^e)); the prefill gets x itself, exactly in bf16.
void exact_unit_vector(uint16_t* raw, float* unit, std::mt19937& rng) {
  std::uniform_int_distribution<int> coin(0, 1), exponent(-1, 2);
  const int n_half = std::uniform_int_distribution<int>(0, 2)(rng);                // 0.5^2 = 16/64
  const int n_quarter = std::uniform_int_distribution<int>(0, (64 - 16 * n_half) / 4)(rng);  // 0.25^2 = 4/64
  const int n_eighth = 64 - 16 * n_half - 4 * n_quarter;                           // 0.125^2 = 1/64
  std::vector<int> pos(kDim);
  std::iota(pos.begin(), pos.end(), 0);
  std::shuffle(pos.begin(), pos.end(), rng);
  std::fill(unit, unit + kDim, 0.0f);
  int next = 0;
  for (auto [count, value] : {std::pair{n_half, 0.5f}, std::pair{n_quarter, 0.25f}, std::pair{n_eighth, 0.125f}})
    for (int c = 0; c < count; ++c) unit[pos[size_t(next++)]] = coin(rng) ? value : -value;
  const float scale = std::ldexp(1.0f, exponent(rng));
  for (int i = 0; i < kDim; ++i) raw[i] = f32_to_bf16(unit[i] * scale);
}

TEST_F(GdnDecodeTest, StepsMatchPrefill) {
  SCOPED_TRACE(seed_trace(seed_));
  const di_gdn_geometry geo{4, 8, kDim, kDim};
  const int Hk = geo.num_k_heads, Hv = geo.num_v_heads, N = 3, T = 100;
  const size_t per_seq = size_t(Hv) * kDim * kDim;
  const GateParams gates = make_gate_params(Hv, rng_);
  const cuda::DeviceBuffer<float> A_log{std::span<const float>(gates.A_log)};
  const cuda::DeviceBuffer<float> dt_bias{std::span<const float>(gates.dt_bias)};
  std::normal_distribution<float> normal(0.0f, 1.0f);

  // Token t of sequence s: decode input steps[t] row s; prefill row s * T + t.
  std::vector<StepInputs> steps;
  std::vector<uint16_t> q_unit(size_t(N * T * Hk * kDim)), k_unit(q_unit.size()), v_all(size_t(N * T * Hv * kDim));
  std::vector<float> g_all(size_t(N * T * Hv)), beta_all(g_all.size());
  std::vector<float> unit(kDim);
  for (int t = 0; t < T; ++t) {
    StepInputs in;
    in.num_seqs = N;
    in.row_stride = row_width(geo);
    in.qkv.resize(size_t(N * in.row_stride));
    for (int s = 0; s < N; ++s) {
      uint16_t* row = in.qkv.data() + s * in.row_stride;
      const int64_t token = int64_t(s) * T + t;
      for (int part = 0; part < 2; ++part)  // q, then k
        for (int kh = 0; kh < Hk; ++kh) {
          exact_unit_vector(row + (part * Hk + kh) * kDim, unit.data(), rng_);
          uint16_t* dst = (part == 0 ? q_unit : k_unit).data() + (token * Hk + kh) * kDim;
          for (int i = 0; i < kDim; ++i) dst[i] = f32_to_bf16(unit[size_t(i)]);
        }
      for (int i = 0; i < Hv * kDim; ++i) {
        row[2 * Hk * kDim + i] = f32_to_bf16(normal(rng_));
        v_all[size_t(token * Hv * kDim + i)] = row[2 * Hk * kDim + i];
      }
      for (int h = 0; h < Hv; ++h) in.a.push_back(f32_to_bf16(normal(rng_))), in.b.push_back(draw_b(rng_));
    }
    const PreparedStep prep = prepare_on_host(geo, in, gates);  // the gates the prefill takes
    for (int s = 0; s < N; ++s)
      for (int h = 0; h < Hv; ++h) {
        g_all[size_t((s * T + t) * Hv + h)] = prep.g[size_t(s * Hv + h)];
        beta_all[size_t((s * T + t) * Hv + h)] = prep.beta[size_t(s * Hv + h)];
      }
    steps.push_back(std::move(in));
  }
  const std::vector<float> initial = random_pool(size_t(N) * Hv, rng_);

  for (di_gdn_state_layout layout : kLayouts) {
    SCOPED_TRACE(layout_str(layout));
    const std::vector<float> initial_l = to_layout(initial, layout);

    // T decode steps, the pool updated in place.
    cuda::DeviceBuffer<float> decode_pool{std::span<const float>(initial_l)};
    const cuda::DeviceBuffer<int32_t> no_slots;
    std::vector<float> decode_out(size_t(N * T * Hv * kDim));
    for (int t = 0; t < T; ++t) {
      const DeviceStep d(steps[size_t(t)]);
      cuda::DeviceBuffer<uint16_t> out(size_t(N) * Hv * kDim);
      out.fill_bytes(0xFF);
      const GdnDecodeParams p =
          params_for(geo, layout, steps[size_t(t)], d, A_log, dt_bias, decode_pool, no_slots, out);
      ASSERT_EQ(launch_gdn_decode_step(p, stream_), cudaSuccess);
      DI_CUDA_CHECK(cudaStreamSynchronize(stream_));
      const std::vector<float> o = bf16_to_floats(out.download());
      for (int s = 0; s < N; ++s)
        std::copy_n(o.begin() + ptrdiff_t(size_t(s) * Hv * kDim), Hv * kDim,
                    decode_out.begin() + ptrdiff_t(size_t(s * T + t) * Hv * kDim));
    }
    const std::vector<float> decode_state = from_layout(decode_pool.download(), layout);

    // One prefill of the same tokens.
    std::vector<int32_t> cu(size_t(N + 1));
    for (int s = 0; s <= N; ++s) cu[size_t(s)] = s * T;
    const cuda::DeviceBuffer<int32_t> cu_d{std::span<const int32_t>(cu)};
    const cuda::DeviceBuffer<uint16_t> q_d{std::span<const uint16_t>(q_unit)}, k_d{std::span<const uint16_t>(k_unit)},
        v_d{std::span<const uint16_t>(v_all)};
    const cuda::DeviceBuffer<float> g_d{std::span<const float>(g_all)}, beta_d{std::span<const float>(beta_all)};
    cuda::DeviceBuffer<float> prefill_pool{std::span<const float>(initial_l)};
    cuda::DeviceBuffer<uint16_t> prefill_out(size_t(N * T * Hv * kDim));
    prefill_out.fill_bytes(0xFF);
    di_gdn_prefill_args args{};
    args.abi_version = DI_GDN_ABI_VERSION;
    args.geometry = geo;
    args.state_layout = layout;
    args.num_seqs = N;
    args.total_tokens = int64_t(N) * T;
    args.scale = kScale;
    args.cu_seqlens = cu_d.data();
    args.q = q_d.data(), args.k = k_d.data(), args.v = v_d.data();
    args.g = g_d.data(), args.beta = beta_d.data();
    args.initial_state = prefill_pool.data();
    args.final_state = prefill_pool.data();
    args.out = prefill_out.data();
    ASSERT_EQ(gdn_baseline_backend().run(&args, nullptr, 0, reinterpret_cast<di_gdn_stream>(stream_)), DI_GDN_OK);
    DI_CUDA_CHECK(cudaStreamSynchronize(stream_));
    const std::vector<float> prefill_state = from_layout(prefill_pool.download(), layout);
    const std::vector<float> prefill_o = bf16_to_floats(prefill_out.download());

    EXPECT_TRUE(all_close(decode_out, prefill_o, kBf16TwoGdnKernels, "decode outputs vs prefill outputs"));
    for (int s = 0; s < N; ++s)
      EXPECT_TRUE(all_close(slice(decode_state, size_t(s) * per_seq, per_seq),
                            slice(prefill_state, size_t(s) * per_seq, per_seq), kF32GdnKernelState,
                            fmt::format("final state of sequence {}: decode vs prefill", s)));
  }
}

// ---------------------------------------------------------------------------------------------
// The output norm fused in == the plain step, then the gated norm kernel: the same bits.

void check_normed_step(int num_seqs, di_gdn_state_layout layout, const std::vector<int32_t>& slots,
                       int pool_slots, cudaStream_t stream, std::mt19937& rng) {
  const di_gdn_geometry geo = kQwenSmall;
  const int Hv = geo.num_v_heads;
  const size_t outputs = size_t(num_seqs) * Hv * kDim;
  const GateParams gates = make_gate_params(Hv, rng);
  const StepInputs in = random_step(geo, num_seqs, rng);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<uint16_t> z(outputs);
  for (auto& x : z) x = f32_to_bf16(normal(rng));
  std::vector<float> weight(kDim);  // a plain weight around 1, bf16-exact as the checkpoint's
  for (auto& w : weight) w = round_bf16(1.0f + 0.3f * normal(rng));
  const std::vector<float> pool_before = to_layout(random_pool(size_t(pool_slots) * Hv, rng), layout);

  const DeviceStep d(in);
  const cuda::DeviceBuffer<float> A_log{std::span<const float>(gates.A_log)};
  const cuda::DeviceBuffer<float> dt_bias{std::span<const float>(gates.dt_bias)};
  const cuda::DeviceBuffer<int32_t> slot_buf{std::span<const int32_t>(slots)};
  const cuda::DeviceBuffer<uint16_t> z_d{std::span<const uint16_t>(z)};
  const cuda::DeviceBuffer<float> weight_d{std::span<const float>(weight)};

  // The plain step, then the norm kernel on its output.
  cuda::DeviceBuffer<float> pool_plain{std::span<const float>(pool_before)};
  cuda::DeviceBuffer<uint16_t> o(outputs), y_plain(outputs);
  o.fill_bytes(0xFF), y_plain.fill_bytes(0xFF);
  ASSERT_EQ(launch_gdn_decode_step(params_for(geo, layout, in, d, A_log, dt_bias, pool_plain, slot_buf, o), stream),
            cudaSuccess);
  const kernels::GatedRmsNormParams norm{.x = o.data(), .z = z_d.data(), .weight = weight_d.data(),
                                         .out = y_plain.data(), .rows = int64_t(num_seqs) * Hv, .dim = kDim,
                                         .eps = 1e-6f};
  ASSERT_EQ(kernels::launch_gated_rms_norm(norm, stream), cudaSuccess);

  // The fused step from the same state.
  cuda::DeviceBuffer<float> pool_fused{std::span<const float>(pool_before)};
  cuda::DeviceBuffer<uint16_t> y_fused(outputs);
  y_fused.fill_bytes(0xFF);
  GdnDecodeParams p = params_for(geo, layout, in, d, A_log, dt_bias, pool_fused, slot_buf, y_fused);
  p.z = z_d.data(), p.norm_weight = weight_d.data(), p.norm_eps = 1e-6f;
  ASSERT_EQ(launch_gdn_decode_step(p, stream), cudaSuccess);
  DI_CUDA_CHECK(cudaStreamSynchronize(stream));

  // A padding row's output is +0 (the norm kernel makes -0 where w * silu(z) < 0: no row's bits to match).
  const std::vector<uint16_t> want = y_plain.download(), got = y_fused.download();
  const size_t per_seq = size_t(Hv) * kDim;
  size_t mismatched = 0, first = outputs;
  for (int s = 0; s < num_seqs; ++s)
    for (size_t i = size_t(s) * per_seq; i < size_t(s + 1) * per_seq; ++i) {
      const uint16_t expected = slots[size_t(s)] < 0 ? 0 : want[i];
      if (got[i] != expected) first = std::min(first, i), ++mismatched;
    }
  EXPECT_EQ(mismatched, 0u) << "normed outputs differ from step + gated norm; first at " << first << ": "
                            << (first < outputs ? bf16_to_f32(got[first]) : 0.0f) << " vs "
                            << (first < outputs ? bf16_to_f32(want[first]) : 0.0f);
  EXPECT_TRUE(pool_fused.download() == pool_plain.download()) << "the states differ from the plain step's";
}

TEST_P(GdnDecodeBatch, NormedStepEqualsStepThenGatedNorm) {
  in_both_layouts(3, [&](di_gdn_state_layout layout, std::vector<int32_t> slots, int pool_slots) {
    if (slots.size() > 2) slots[slots.size() / 2] = -1;  // a padding row among them
    check_normed_step(GetParam(), layout, slots, pool_slots, stream_, rng_);
  });
}

INSTANTIATE_TEST_SUITE_P(GdnDecode, GdnDecodeBatch, ::testing::Values(1, 2, 7, 64, 300),
                         [](const ::testing::TestParamInfo<int>& info) {
                           return "batch" + std::to_string(info.param);
                         });

// ---------------------------------------------------------------------------------------------
// Argument checks: cudaErrorInvalidValue before anything is launched (no GPU needed).

TEST(GdnDecodeArgs, InvalidParamsAreRefused) {
  static constexpr uintptr_t kFake = 0x10000;
  auto at = [](int i) { return reinterpret_cast<void*>(kFake * uintptr_t(i + 1)); };
  GdnDecodeParams valid{};
  valid.geometry = kQwenSmall;
  valid.state_layout = DI_GDN_STATE_KV;
  valid.num_seqs = 4;
  valid.qkv = at(0);
  valid.qkv_row_stride = row_width(kQwenSmall);
  valid.a = at(1), valid.b = at(2);
  valid.A_log = static_cast<const float*>(at(3)), valid.dt_bias = static_cast<const float*>(at(4));
  valid.state = static_cast<float*>(at(5));
  valid.out = at(6);
  valid.scale = kScale;
  struct Case {
    const char* what;
    void (*mutate)(GdnDecodeParams&);
  };
  const Case cases[] = {
      {"k_dim 64", [](GdnDecodeParams& p) { p.geometry.k_dim = 64; }},
      {"v_dim 256", [](GdnDecodeParams& p) { p.geometry.v_dim = 256; }},
      {"Hv % Hk != 0", [](GdnDecodeParams& p) { p.geometry.num_v_heads = 40; }},
      {"num_k_heads 0", [](GdnDecodeParams& p) { p.geometry.num_k_heads = 0; }},
      {"num_seqs -1", [](GdnDecodeParams& p) { p.num_seqs = -1; }},
      {"layout 3", [](GdnDecodeParams& p) { p.state_layout = di_gdn_state_layout(3); }},
      {"qkv NULL", [](GdnDecodeParams& p) { p.qkv = nullptr; }},
      {"state NULL", [](GdnDecodeParams& p) { p.state = nullptr; }},
      {"out NULL", [](GdnDecodeParams& p) { p.out = nullptr; }},
      {"A_log NULL", [](GdnDecodeParams& p) { p.A_log = nullptr; }},
      {"row stride shorter than a row", [](GdnDecodeParams& p) { p.qkv_row_stride -= 4; }},
      {"row stride not a multiple of 4", [](GdnDecodeParams& p) { p.qkv_row_stride += 2; }},
      {"state misaligned", [](GdnDecodeParams& p) { p.state += 1; }},
      {"norm weight without z", [](GdnDecodeParams& p) { p.norm_weight = p.A_log; }},
      {"z misaligned", [](GdnDecodeParams& p) {
         p.norm_weight = p.A_log;
         p.z = static_cast<const char*>(p.a) + 2;
       }},
      {"norm weight misaligned", [](GdnDecodeParams& p) {
         p.norm_weight = p.A_log + 1;
         p.z = p.a;
       }},
  };
  for (const Case& c : cases) {
    GdnDecodeParams p = valid;
    c.mutate(p);
    EXPECT_EQ(launch_gdn_decode_step(p, nullptr), cudaErrorInvalidValue) << c.what;
  }
  GdnDecodeParams empty = valid;
  empty.num_seqs = 0;
  EXPECT_EQ(launch_gdn_decode_step(empty, nullptr), cudaSuccess) << "an empty batch launches nothing";
}

}  // namespace
}  // namespace di::gdn
