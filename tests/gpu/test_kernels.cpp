// The element-wise, norm, rope, GEMM and GDN preparation kernels against their CPU references in
// Precision::bf16 (the same rounding points), on odd sizes with fresh random inputs and poisoned
// outputs. Attention, the GDN delta rule and sampling have test files of their own.
#include <gtest/gtest.h>

#include <array>
#include <cmath>
#include <cstring>
#include <numeric>

#include "gdn/prep.h"
#include "gpu/gpu_test.h"
#include "kernels/elementwise/elementwise.h"
#include "kernels/gdn/prep_ref.h"
#include "kernels/gemm/cuda_gemm.h"
#include "kernels/gemm/ref.h"
#include "kernels/gemm/small_batch_linear.h"
#include "kernels/mlp/ref.h"
#include "kernels/norm/norm.h"
#include "kernels/norm/ref.h"
#include "kernels/rope/ref.h"
#include "kernels/rope/rope.h"
#include "support/seed.h"
#include "support/tolerance.h"

namespace di {
namespace {

using testing::all_close;
using testing::device_bf16;
using testing::host_floats;
using testing::kBf16RoundingFlips;
using testing::kExactF32;
using testing::random_bf16_values;

class KernelTest : public testing::SeededGpuTest<> {
 protected:
  // An output buffer of n bf16 values, every one NaN.
  cuda::DeviceBuffer<uint16_t> poisoned_bf16(size_t n) {
    cuda::DeviceBuffer<uint16_t> b(n);
    b.fill_bytes(0xFF);
    return b;
  }
  TensorView host_view(const std::vector<float>& v) const { return {v.data(), DType::f32, {int64_t(v.size())}}; }
};

constexpr int64_t kRows[] = {1, 2, 63, 65, 1000};

TEST_F(KernelTest, RmsNormMatchesReference) {
  SCOPED_TRACE(testing::seed_trace(seed_));
  for (int64_t dim : {64, 256, 2560, 5120, 9000}) {  // warp-per-row (<= 1024) and block-per-row forms; 9000
                                                     // is past what a thread of a block holds in registers
    for (int64_t rows : kRows) {
      SCOPED_TRACE("rows " + std::to_string(rows) + " dim " + std::to_string(dim));
      const auto x = random_bf16_values(size_t(rows * dim), rng_, 3.0f);
      const auto w = random_bf16_values(size_t(dim), rng_, 0.2f);
      std::vector<float> expected(x.size());
      ref::rms_norm(x.data(), rows, dim, host_view(w), 1e-6, expected.data(), Precision::bf16);
      auto dx = device_bf16(x);
      cuda::DeviceBuffer<float> dw{std::span<const float>(w)};
      auto out = poisoned_bf16(x.size());
      kernels::RmsNormParams p{.x = dx.data(), .weight = dw.data(), .out = out.data(), .rows = rows, .dim = dim,
                               .eps = 1e-6f, .zero_centred = true};
      ASSERT_EQ(kernels::launch_rms_norm(p, stream_), cudaSuccess);
      sync();
      EXPECT_TRUE(all_close(host_floats(out), expected, kBf16RoundingFlips, "rms_norm"));
    }
  }
}

TEST_F(KernelTest, GatedRmsNormMatchesReference) {
  SCOPED_TRACE(testing::seed_trace(seed_));
  const int64_t dim = 128;
  for (int64_t rows : kRows) {
    const auto x = random_bf16_values(size_t(rows * dim), rng_, 0.5f);
    const auto z = random_bf16_values(x.size(), rng_, 2.0f);
    const auto w = random_bf16_values(size_t(dim), rng_, 1.0f);
    std::vector<float> expected(x.size());
    ref::gated_rms_norm(x.data(), z.data(), rows, dim, host_view(w), 1e-6, expected.data(), Precision::bf16);
    auto dx = device_bf16(x), dz = device_bf16(z);
    cuda::DeviceBuffer<float> dw{std::span<const float>(w)};
    auto out = poisoned_bf16(x.size());
    kernels::GatedRmsNormParams p{.x = dx.data(), .z = dz.data(), .weight = dw.data(), .out = out.data(),
                                  .rows = rows, .dim = dim, .eps = 1e-6f};
    ASSERT_EQ(kernels::launch_gated_rms_norm(p, stream_), cudaSuccess);
    sync();
    EXPECT_TRUE(all_close(host_floats(out), expected, testing::kBf16ThreeRoundingFlips,
                          "gated_rms_norm rows " + std::to_string(rows)));
  }
}

TEST_F(KernelTest, RopeMatchesReference) {
  SCOPED_TRACE(testing::seed_trace(seed_));
  const int64_t heads = 16, head_dim = 256, rotary_dim = 64;
  for (int64_t tokens : kRows) {
    // Components in [-1, 1], the range kBf16RopeFlips is written for.
    std::uniform_real_distribution<float> component(-1.0f, 1.0f);
    std::vector<float> x(size_t(tokens * heads * head_dim));
    for (auto& e : x) e = round_bf16(component(rng_));
    std::vector<int64_t> pos(static_cast<size_t>(tokens));
    std::uniform_int_distribution<int64_t> any_pos(0, 262143);
    for (auto& p : pos) p = any_pos(rng_);
    std::vector<int32_t> pos32(pos.begin(), pos.end());
    auto dx = device_bf16(x);
    cuda::DeviceBuffer<int32_t> dpos{std::span<const int32_t>(pos32)};
    kernels::RopeParams p{.x = dx.data(), .positions = dpos.data(), .tokens = tokens, .heads = heads,
                          .head_dim = head_dim, .rotary_dim = rotary_dim, .theta = 10000000.0f};
    ASSERT_EQ(kernels::launch_rope(p, stream_), cudaSuccess);
    sync();
    ref::rope(x.data(), tokens, heads, head_dim, rotary_dim, pos.data(), 10000000.0, Precision::bf16);
    EXPECT_TRUE(all_close(host_floats(dx), x, testing::kBf16RopeFlips, "rope tokens " + std::to_string(tokens)));
  }
}

// The attention's q/gate split with its per-head q and k norms, and the rotation of q and k in one
// launch: the bits of the split kernel, the norm kernel and one rope launch per tensor.
TEST_F(KernelTest, AttentionQkNormAndRopeEqualTheSeparateKernels) {
  SCOPED_TRACE(testing::seed_trace(seed_));
  const int64_t Hq = 6, Hkv = 2, D = 96, rotary = 32;
  const auto qw = random_bf16_values(size_t(D), rng_, 0.3f), kw = random_bf16_values(size_t(D), rng_, 0.3f);
  cuda::DeviceBuffer<float> dqw{std::span<const float>(qw)}, dkw{std::span<const float>(kw)};
  for (int64_t N : {int64_t(1), int64_t(7), int64_t(65)}) {
    SCOPED_TRACE("tokens " + std::to_string(N));
    const auto qg = random_bf16_values(size_t(N * Hq * 2 * D), rng_, 3.0f);
    const auto k = random_bf16_values(size_t(N * Hkv * D), rng_, 3.0f);
    std::vector<int32_t> pos(static_cast<size_t>(N));
    std::uniform_int_distribution<int32_t> any_pos(0, 100000);
    for (auto& p : pos) p = any_pos(rng_);
    auto dqg = device_bf16(qg), dk = device_bf16(k);
    cuda::DeviceBuffer<int32_t> dpos{std::span<const int32_t>(pos)};
    auto q1 = poisoned_bf16(size_t(N * Hq * D)), g1 = poisoned_bf16(size_t(N * Hq * D)), k1 = poisoned_bf16(k.size());
    kernels::AttentionQkNormParams fused{.q_and_gate = dqg.data(), .k = dk.data(), .q_weight = dqw.data(),
                                         .k_weight = dkw.data(), .q_out = q1.data(), .gate_out = g1.data(),
                                         .k_out = k1.data(), .tokens = N, .q_heads = Hq, .k_heads = Hkv,
                                         .head_dim = D, .eps = 1e-6f};
    ASSERT_EQ(kernels::launch_attention_qk_norm(fused, stream_), cudaSuccess);
    kernels::RopeParams both{.x = q1.data(), .positions = dpos.data(), .tokens = N, .heads = Hq, .x2 = k1.data(),
                             .heads2 = Hkv, .head_dim = D, .rotary_dim = rotary, .theta = 10000000.0f};
    ASSERT_EQ(kernels::launch_rope(both, stream_), cudaSuccess);

    auto q_raw = poisoned_bf16(size_t(N * Hq * D)), g2 = poisoned_bf16(size_t(N * Hq * D));
    auto q2 = poisoned_bf16(size_t(N * Hq * D)), k2 = poisoned_bf16(k.size());
    ASSERT_EQ(kernels::launch_split_q_gate(dqg.data(), N, Hq, D, q_raw.data(), g2.data(), stream_), cudaSuccess);
    kernels::RmsNormParams qn{.x = q_raw.data(), .weight = dqw.data(), .out = q2.data(), .rows = N * Hq, .dim = D,
                              .eps = 1e-6f, .zero_centred = true};
    kernels::RmsNormParams kn{.x = dk.data(), .weight = dkw.data(), .out = k2.data(), .rows = N * Hkv, .dim = D,
                              .eps = 1e-6f, .zero_centred = true};
    ASSERT_EQ(kernels::launch_rms_norm(qn, stream_), cudaSuccess);
    ASSERT_EQ(kernels::launch_rms_norm(kn, stream_), cudaSuccess);
    for (auto [x, heads] : {std::pair{q2.data(), Hq}, std::pair{k2.data(), Hkv}}) {
      kernels::RopeParams one{.x = x, .positions = dpos.data(), .tokens = N, .heads = heads, .head_dim = D,
                              .rotary_dim = rotary, .theta = 10000000.0f};
      ASSERT_EQ(kernels::launch_rope(one, stream_), cudaSuccess);
    }
    sync();
    EXPECT_EQ(q1.download(), q2.download());
    EXPECT_EQ(g1.download(), g2.download());
    EXPECT_EQ(k1.download(), k2.download());
  }
}

TEST_F(KernelTest, ElementwiseOpsMatchReference) {
  SCOPED_TRACE(testing::seed_trace(seed_));
  for (int64_t n : {int64_t(1), int64_t(1000), int64_t(65537)}) {
    SCOPED_TRACE("n " + std::to_string(n));
    const auto a = random_bf16_values(size_t(n), rng_, 4.0f), b = random_bf16_values(size_t(n), rng_, 4.0f);
    auto da = device_bf16(a), db = device_bf16(b);
    auto out = poisoned_bf16(size_t(n));
    std::vector<float> expected(static_cast<size_t>(n));

    ASSERT_EQ(kernels::launch_add(da.data(), db.data(), n, out.data(), stream_), cudaSuccess);
    sync();
    for (int64_t i = 0; i < n; ++i) expected[size_t(i)] = round_bf16(a[size_t(i)] + b[size_t(i)]);
    EXPECT_TRUE(all_close(host_floats(out), expected, kExactF32, "add"));

    out.fill_bytes(0xFF);
    ASSERT_EQ(kernels::launch_swiglu(da.data(), db.data(), n, out.data(), stream_), cudaSuccess);
    sync();
    ref::swiglu(a.data(), b.data(), n, expected.data(), Precision::bf16);
    EXPECT_TRUE(all_close(host_floats(out), expected, kBf16RoundingFlips, "swiglu"));

    out.fill_bytes(0xFF);
    ASSERT_EQ(kernels::launch_sigmoid_gate(da.data(), db.data(), n, out.data(), stream_), cudaSuccess);
    sync();
    for (int64_t i = 0; i < n; ++i)
      expected[size_t(i)] = round_bf16(a[size_t(i)] * round_bf16(sigmoid(b[size_t(i)])));
    EXPECT_TRUE(all_close(host_floats(out), expected, kBf16RoundingFlips, "sigmoid_gate"));
  }
}

// The element-wise kernels take 16-byte vectors where every pointer is 16-byte aligned, one element at
// a time otherwise: both forms give the same bits, over lengths with and without a last partial vector.
TEST_F(KernelTest, ElementwiseVectorAndScalarFormsKeepTheBits) {
  SCOPED_TRACE(testing::seed_trace(seed_));
  using Launch = cudaError_t (*)(const void*, const void*, int64_t, void*, cudaStream_t);
  const std::pair<const char*, Launch> ops[] = {
      {"add", kernels::launch_add}, {"swiglu", kernels::launch_swiglu}, {"sigmoid_gate", kernels::launch_sigmoid_gate}};
  for (int64_t n : {int64_t(8), int64_t(1003), int64_t(300007)}) {
    SCOPED_TRACE("n " + std::to_string(n));
    // Each operand twice: at the start of its buffer (16-byte aligned) and one element in (2 bytes off).
    auto a = random_bf16_values(size_t(n + 1), rng_, 4.0f), b = random_bf16_values(size_t(n + 1), rng_, 4.0f);
    auto da = device_bf16(a), db = device_bf16(b);
    a.erase(a.begin()), b.erase(b.begin());
    auto da_aligned = device_bf16(a), db_aligned = device_bf16(b);
    for (const auto& [name, launch] : ops) {
      SCOPED_TRACE(name);
      auto vectors = poisoned_bf16(size_t(n)), scalars = poisoned_bf16(size_t(n + 1));
      ASSERT_EQ(launch(da_aligned.data(), db_aligned.data(), n, vectors.data(), stream_), cudaSuccess);
      ASSERT_EQ(launch(da.data() + 1, db.data() + 1, n, scalars.data() + 1, stream_), cudaSuccess);
      sync();
      std::vector<uint16_t> got = scalars.download();
      got.erase(got.begin());
      EXPECT_TRUE(vectors.download() == got) << "the vector and scalar forms differ";
    }
  }
}

TEST_F(KernelTest, GatherAndSplitCopyExactly) {
  SCOPED_TRACE(testing::seed_trace(seed_));
  const int64_t vocab = 1001, width = 72, heads = 3, head_dim = 24;
  const auto table = random_bf16_values(size_t(vocab * width), rng_);
  std::vector<int32_t> ids(65);
  std::uniform_int_distribution<int32_t> any(0, int32_t(vocab - 1));
  for (auto& id : ids) id = any(rng_);
  auto dt = device_bf16(table);
  cuda::DeviceBuffer<int32_t> did{std::span<const int32_t>(ids)};
  auto out = poisoned_bf16(ids.size() * size_t(width));
  ASSERT_EQ(kernels::launch_embed_rows(dt.data(), did.data(), int64_t(ids.size()), width, out.data(), stream_),
            cudaSuccess);
  sync();
  std::vector<float> expected;
  for (int32_t id : ids) expected.insert(expected.end(), table.begin() + id * width, table.begin() + (id + 1) * width);
  EXPECT_TRUE(all_close(host_floats(out), expected, kExactF32, "embed rows"));

  // split_q_gate on [tokens, heads, 2, head_dim]: the width 72 = 3 heads x 24 of q and of gate.
  const int64_t tokens = 65;
  const auto qg = random_bf16_values(size_t(tokens * 2 * heads * head_dim), rng_);
  auto dqg = device_bf16(qg);
  auto q = poisoned_bf16(size_t(tokens * heads * head_dim)), gate = poisoned_bf16(size_t(tokens * heads * head_dim));
  ASSERT_EQ(kernels::launch_split_q_gate(dqg.data(), tokens, heads, head_dim, q.data(), gate.data(), stream_),
            cudaSuccess);
  sync();
  std::vector<float> eq, eg;
  for (int64_t t = 0; t < tokens; ++t)
    for (int64_t h = 0; h < heads; ++h) {
      const auto* src = qg.data() + (t * heads + h) * 2 * head_dim;
      eq.insert(eq.end(), src, src + head_dim);
      eg.insert(eg.end(), src + head_dim, src + 2 * head_dim);
    }
  EXPECT_TRUE(all_close(host_floats(q), eq, kExactF32, "q"));
  EXPECT_TRUE(all_close(host_floats(gate), eg, kExactF32, "gate"));
}

TEST_F(KernelTest, CublasLtLinearMatchesReference) {
  SCOPED_TRACE(testing::seed_trace(seed_));
  kernels::CublasLtGemm gemm;
  for (auto [N, K] : {std::pair<int64_t, int64_t>{160, 64}, {2560, 9216}, {1000, 2560}}) {
    const auto w = random_bf16_values(size_t(N * K), rng_, 1.0f / std::sqrt(float(K)));
    std::vector<uint16_t> w_bits(w.size());
    for (size_t i = 0; i < w.size(); ++i) w_bits[i] = f32_to_bf16(w[i]);
    const TensorView w_view{w_bits.data(), DType::bf16, {N, K}};
    auto dw = device_bf16(w);
    for (int64_t M : kRows) {
      SCOPED_TRACE("M " + std::to_string(M) + " N " + std::to_string(N) + " K " + std::to_string(K));
      const auto x = random_bf16_values(size_t(M * K), rng_);
      std::vector<float> expected(size_t(M * N));
      ref::linear(x.data(), M, K, w_view, expected.data(), Precision::bf16);
      auto dx = device_bf16(x);
      auto out = poisoned_bf16(size_t(M * N));
      gemm.linear(dx.data(), dw.data(), out.data(), M, N, K, stream_);
      sync();
      const testing::Tolerance tol{testing::kBf16GemmVsRef.atol * std::sqrt(double(K)), testing::kBf16GemmVsRef.rtol,
                                   testing::kBf16GemmVsRef.name};
      EXPECT_TRUE(all_close(host_floats(out), expected, tol, "linear"));
    }
  }
}

// A bf16 weight [N, K] on the host (as bits, for the reference's TensorView) and on the device.
struct TestWeight {
  int64_t N = 0, K = 0;
  std::vector<uint16_t> bits;
  cuda::DeviceBuffer<uint16_t> device;
  TensorView view() const { return {bits.data(), DType::bf16, {N, K}}; }
};
TestWeight random_weight(int64_t N, int64_t K, std::mt19937_64& rng) {
  const auto w = random_bf16_values(size_t(N * K), rng, 1.0f / std::sqrt(float(K)));
  TestWeight t{N, K, std::vector<uint16_t>(w.size()), device_bf16(w)};
  for (size_t i = 0; i < w.size(); ++i) t.bits[i] = f32_to_bf16(w[i]);
  return t;
}
testing::Tolerance gemm_tolerance(int64_t K) {
  return {testing::kBf16GemmVsRef.atol * std::sqrt(double(K)), testing::kBf16GemmVsRef.rtol,
          testing::kBf16GemmVsRef.name};
}

// Every row count the kernel takes, odd widths (N not a multiple of its 16-row tiles, K not of its
// 32-column steps), up to the 4B's down projection; one to four weights per launch.
TEST_F(KernelTest, SmallBatchLinearMatchesReference) {
  SCOPED_TRACE(testing::seed_trace(seed_));
  const std::vector<std::vector<std::pair<int64_t, int64_t>>> launches = {
      {{37, 72}}, {{160, 64}}, {{2560, 9216}}, {{48, 2568}, {16, 2568}, {5, 2568}, {1000, 2568}}};
  for (const auto& shapes : launches) {
    const int64_t K = shapes[0].second;
    std::vector<TestWeight> weights;
    for (auto [N, k] : shapes) weights.push_back(random_weight(N, k, rng_));
    for (int64_t M = 1; M <= kernels::SmallBatchLinearParams::kMaxRows; ++M) {
      SCOPED_TRACE("M " + std::to_string(M) + " K " + std::to_string(K) + " outputs " + std::to_string(shapes.size()));
      const auto x = random_bf16_values(size_t(M * K), rng_);
      auto dx = device_bf16(x);
      std::vector<cuda::DeviceBuffer<uint16_t>> out;
      kernels::SmallBatchLinearParams p{.x = dx.data(), .rows = M, .in_features = K,
                                        .num_outputs = int(weights.size())};
      for (size_t i = 0; i < weights.size(); ++i) {
        out.push_back(poisoned_bf16(size_t(M * weights[i].N)));
        p.outputs[i] = {weights[i].device.data(), out[i].data(), weights[i].N};
      }
      ASSERT_EQ(kernels::small_batch_linear_error(p), "");
      ASSERT_EQ(kernels::launch_small_batch_linear(p, stream_), cudaSuccess);
      sync();
      for (size_t i = 0; i < weights.size(); ++i) {
        std::vector<float> expected(size_t(M * weights[i].N));
        ref::linear(x.data(), M, K, weights[i].view(), expected.data(), Precision::bf16);
        EXPECT_TRUE(all_close(host_floats(out[i]), expected, gemm_tolerance(K), "output " + std::to_string(i)));
      }
    }
  }
}

// The float32 epilogue (tensor-parallel partial sums) and the SwiGLU epilogue (gate and up in one
// pass, rounded where the separate GEMMs and the SwiGLU kernel round).
TEST_F(KernelTest, SmallBatchLinearEpilogues) {
  SCOPED_TRACE(testing::seed_trace(seed_));
  const int64_t N = 200, K = 328;
  const TestWeight gate = random_weight(N, K, rng_), up = random_weight(N, K, rng_);
  for (int64_t M : {int64_t(1), int64_t(3), int64_t(8), int64_t(13)}) {
    SCOPED_TRACE("M " + std::to_string(M));
    const auto x = random_bf16_values(size_t(M * K), rng_);
    auto dx = device_bf16(x);
    std::vector<float> g(size_t(M * N)), u(g.size()), expected(g.size());

    cuda::DeviceBuffer<float> partial(g.size());
    partial.fill_bytes(0xFF);
    kernels::SmallBatchLinearParams p{.x = dx.data(), .rows = M, .in_features = K, .num_outputs = 1,
                                      .epilogue = kernels::SmallBatchEpilogue::f32};
    p.outputs[0] = {gate.device.data(), partial.data(), N};
    ASSERT_EQ(kernels::launch_small_batch_linear(p, stream_), cudaSuccess);
    sync();
    ref::linear(x.data(), M, K, gate.view(), expected.data(), Precision::bf16, /*round_output=*/false);
    EXPECT_TRUE(all_close(partial.download(), expected, testing::Tolerance{testing::kF32DotVsF64.atol * std::sqrt(double(K)),
                                                                          testing::kF32DotVsF64.rtol,
                                                                          testing::kF32DotVsF64.name},
                          "f32 partial sums"));

    auto act = poisoned_bf16(g.size());
    p.epilogue = kernels::SmallBatchEpilogue::swiglu;
    p.num_outputs = 2;
    p.outputs[0] = {gate.device.data(), act.data(), N};
    p.outputs[1] = {up.device.data(), nullptr, N};
    ASSERT_EQ(kernels::launch_small_batch_linear(p, stream_), cudaSuccess);
    sync();
    ref::linear(x.data(), M, K, gate.view(), g.data(), Precision::bf16);
    ref::linear(x.data(), M, K, up.view(), u.data(), Precision::bf16);
    ref::swiglu(g.data(), u.data(), M * N, expected.data(), Precision::bf16);
    EXPECT_TRUE(all_close(host_floats(act), expected, gemm_tolerance(K), "swiglu"));
  }
}

// A row's result does not depend on the rows beside it: sixteen rows at once give, bit for bit, what
// each gives alone (a sequence's decode tokens do not depend on its batch). For a lone weight and the
// SwiGLU pair (the resident kernels at 16 rows, the one-tile kernels alone), plain and with the RMS
// norm on the way in (from the rows' partial sums of squares, staged by every block).
TEST_F(KernelTest, SmallBatchLinearRowsAreIndependentOfTheBatch) {
  SCOPED_TRACE(testing::seed_trace(seed_));
  const int64_t M = kernels::SmallBatchLinearParams::kMaxRows, N = 300, K = 2560;
  const TestWeight w = random_weight(N, K, rng_), up = random_weight(N, K, rng_);
  const auto x = random_bf16_values(size_t(M * K), rng_);
  auto dx = device_bf16(x);
  const auto norm_w = random_bf16_values(size_t(K), rng_, 0.3f);
  cuda::DeviceBuffer<float> dnorm{std::span<const float>(norm_w)};
  // Each row's sum of squares in parts of 16 features, as a residual projection leaves them.
  const int64_t parts = kernels::small_batch_sum_sq_parts(K);
  std::vector<float> sums(size_t(M * parts), 0.0f);
  for (int64_t m = 0; m < M; ++m)
    for (int64_t k = 0; k < K; ++k) sums[size_t(m * parts + k / 16)] += x[size_t(m * K + k)] * x[size_t(m * K + k)];
  cuda::DeviceBuffer<float> dsums{std::span<const float>(sums)};
  for (const bool swiglu : {false, true})
    for (const bool normed : {false, true}) {
      SCOPED_TRACE(std::string(swiglu ? "swiglu" : "one weight") + (normed ? ", RMS norm on the way in" : ""));
      auto batched = poisoned_bf16(size_t(M * N));
      kernels::SmallBatchLinearParams p{.x = dx.data(), .rows = M, .in_features = K, .num_outputs = 1};
      p.outputs[0] = {w.device.data(), batched.data(), N};
      if (swiglu) {
        p.epilogue = kernels::SmallBatchEpilogue::swiglu;
        p.num_outputs = 2;
        p.outputs[1] = {up.device.data(), nullptr, N};
      }
      if (normed) {
        p.input = kernels::SmallBatchInput::rms_norm;
        p.norm_weight = dnorm.data();
        p.input_sum_sq = dsums.data();
        p.input_sum_sq_parts = parts;
      }
      ASSERT_EQ(kernels::small_batch_linear_error(p), "");
      ASSERT_EQ(kernels::launch_small_batch_linear(p, stream_), cudaSuccess);
      sync();
      const std::vector<uint16_t> all = batched.download();
      for (int64_t m = 0; m < M; ++m) {
        auto one = poisoned_bf16(size_t(N));
        p.x = dx.data() + m * K;
        p.rows = 1;
        p.outputs[0].out = one.data();
        if (normed) p.input_sum_sq = dsums.data() + m * parts;
        ASSERT_EQ(kernels::launch_small_batch_linear(p, stream_), cudaSuccess);
        sync();
        const std::vector<uint16_t> alone = one.download();
        EXPECT_TRUE(std::equal(alone.begin(), alone.end(), all.begin() + m * N)) << "row " << m;
      }
    }
}

// Parameters the kernel cannot run are refused with the reason (the caller then takes the general
// GEMM), before anything touches a device.
TEST(SmallBatchLinear, RefusesWhatItCannotRun) {
  alignas(16) static const uint16_t x[64] = {}, w[64] = {};
  uint16_t out[64] = {};
  float squares[64] = {};
  const auto params = [&] {
    kernels::SmallBatchLinearParams p{.x = x, .rows = 2, .in_features = 16, .num_outputs = 1};
    p.outputs[0] = {w, out, 4};
    return p;
  };
  EXPECT_EQ(kernels::small_batch_linear_error(params()), "");
  const auto refused = [&](auto edit, const std::string& why) {
    kernels::SmallBatchLinearParams p = params();
    edit(p);
    EXPECT_NE(kernels::small_batch_linear_error(p).find(why), std::string::npos)
        << "got '" << kernels::small_batch_linear_error(p) << "', expected it to name '" << why << "'";
    EXPECT_EQ(kernels::launch_small_batch_linear(p, nullptr), cudaErrorInvalidValue);
  };
  using P = kernels::SmallBatchLinearParams;
  refused([](P& p) { p.rows = 17; }, "17 rows");
  refused([](P& p) { p.steps_in_flight = 6; }, "6 steps in flight");
  refused(
      [](P& p) {
        p.steps_in_flight = 8;
        p.rows = 9;
      },
      "8 steps in flight take one weight per tile and up to 8 rows");
  refused([](P& p) { p.weight_tile_rows = 12; }, "12 weight rows a tile");
  refused(
      [](P& p) {
        p.weight_tile_rows = 8;
        p.epilogue = kernels::SmallBatchEpilogue::swiglu;
        p.num_outputs = 2;
        p.outputs[1] = p.outputs[0];
      },
      "8-row weight tiles take one weight a tile");
  refused(
      [&](P& p) {
        p.weight_tile_rows = 8;
        p.rows = 9;
        p.residual = x;
        p.out_sum_sq = squares;
      },
      "8-row weight tiles take one weight a tile, without sums of squares");
  refused([](P& p) { p.rows = 0; }, "0 rows");
  refused([](P& p) { p.in_features = 12; }, "12 input features");
  refused([](P& p) { p.x = x + 1; }, "input is null or not 16-byte aligned");
  refused([](P& p) { p.outputs[0].weight = w + 4; }, "weight 0 is null or not 16-byte aligned");
  refused([](P& p) { p.num_outputs = 5; }, "5 outputs");
  refused([](P& p) { p.outputs[0].features = 0; }, "output 0 has 0 features");
  refused([](P& p) { p.outputs[0].out = nullptr; }, "output 0 is null");
  refused([](P& p) { p.epilogue = kernels::SmallBatchEpilogue::swiglu; }, "swiglu takes two weights");
  refused(
      [](P& p) {
        p.epilogue = kernels::SmallBatchEpilogue::swiglu;
        p.num_outputs = 2;
        p.outputs[1] = {w, nullptr, 8};
      },
      "swiglu takes two weights");
  refused(
      [](P& p) {
        p.epilogue = kernels::SmallBatchEpilogue::swiglu;
        p.num_outputs = 2;
        p.outputs[1] = {w, nullptr, 4};
        p.input = kernels::SmallBatchInput::sigmoid_gate;
        p.gate = x;
      },
      "swiglu takes a plain or RMS-normed input");
  refused([](P& p) { p.input = kernels::SmallBatchInput::rms_norm; }, "norm weight is null");
  alignas(16) static const float sums[4] = {};
  refused(
      [](P& p) {
        p.input = kernels::SmallBatchInput::rms_norm;
        p.norm_weight = sums;
      },
      "needs its rows' partial sums of squares");
  refused(
      [](P& p) {
        p.input = kernels::SmallBatchInput::sigmoid_gate;
        p.gate = x;
        p.rows = 16;
        p.in_features = 8192;
      },
      "16 rows of 8192 features to stage");
  refused([](P& p) { p.out_sum_sq = const_cast<float*>(sums); },
          "sums of squares are written for a residual output only");
  refused([](P& p) { p.input = kernels::SmallBatchInput::sigmoid_gate; }, "gate is null");
  alignas(16) static const float norm[16] = {};
  const auto gated = [](int64_t group) {
    return [group](P& p) {
      p.input = kernels::SmallBatchInput::gated_rms_norm;
      p.norm_weight = norm;
      p.gate = x;
      p.group = group;
    };
  };
  refused(gated(0), "a norm group of 0");
  refused(gated(12), "a norm group of 12");
  refused(gated(32), "a norm group of 32 (a multiple of 8 that divides the 16 input features)");
  refused(
      [&](P& p) {
        gated(8)(p);
        p.in_features = 8 * 1024;
      },
      "2 rows of 1024 norm groups");
  refused(
      [](P& p) {
        p.residual = x;
        p.epilogue = kernels::SmallBatchEpilogue::f32;
      },
      "a residual is added to one bf16 output only");
}

// The ops fused into the projections give the bits of their own kernels: a gate or the GDN output
// norm applied on the way in equals that op's kernel and then the plain projection; the residual
// added on the way out equals the plain projection and then the add kernel. Odd row counts, odd
// group sizes, poisoned outputs.
TEST_F(KernelTest, SmallBatchLinearInputOpsEqualTheirKernels) {
  SCOPED_TRACE(testing::seed_trace(seed_));
  using Input = kernels::SmallBatchInput;
  struct Case {
    Input input;
    int64_t K, group;
  };
  const Case cases[] = {{Input::gated_rms_norm, 4096, 128}, {Input::gated_rms_norm, 192, 64},
                        {Input::sigmoid_gate, 1032, 0}, {Input::plain, 328, 0}};
  const int64_t N = 77;
  for (const Case& c : cases) {
    const TestWeight w = random_weight(N, c.K, rng_);
    const auto norm_w = random_bf16_values(size_t(std::max<int64_t>(c.group, 8)), rng_, 0.5f);
    cuda::DeviceBuffer<float> dnorm{std::span<const float>(norm_w)};
    for (int64_t M : {int64_t(1), int64_t(5), int64_t(16)}) {
      SCOPED_TRACE("input " + std::to_string(int(c.input)) + " K " + std::to_string(c.K) + " M " + std::to_string(M));
      const auto x = random_bf16_values(size_t(M * c.K), rng_, 2.0f);
      const auto gate = random_bf16_values(x.size(), rng_, 3.0f);
      const auto residual = random_bf16_values(size_t(M * N), rng_, 2.0f);
      auto dx = device_bf16(x), dgate = device_bf16(gate), dres = device_bf16(residual);
      // The op on its own, by its kernel.
      auto op_out = poisoned_bf16(x.size());
      if (c.input == Input::gated_rms_norm) {
        kernels::GatedRmsNormParams n{.x = dx.data(), .z = dgate.data(), .weight = dnorm.data(), .out = op_out.data(),
                                      .rows = M * c.K / c.group, .dim = c.group, .eps = 1e-6f};
        ASSERT_EQ(kernels::launch_gated_rms_norm(n, stream_), cudaSuccess);
      } else if (c.input == Input::sigmoid_gate) {
        ASSERT_EQ(kernels::launch_sigmoid_gate(dx.data(), dgate.data(), M * c.K, op_out.data(), stream_), cudaSuccess);
      } else {
        DI_CUDA_CHECK(cudaMemcpyAsync(op_out.data(), dx.data(), x.size() * 2, cudaMemcpyDeviceToDevice, stream_));
      }
      // Then the plain projection and the add, against the fused launches.
      auto plain = poisoned_bf16(size_t(M * N)), fused = poisoned_bf16(size_t(M * N));
      kernels::SmallBatchLinearParams p{.x = op_out.data(), .rows = M, .in_features = c.K, .num_outputs = 1};
      p.outputs[0] = {w.device.data(), plain.data(), N};
      ASSERT_EQ(kernels::launch_small_batch_linear(p, stream_), cudaSuccess);
      auto plain_sum = poisoned_bf16(size_t(M * N));
      ASSERT_EQ(kernels::launch_add(dres.data(), plain.data(), M * N, plain_sum.data(), stream_), cudaSuccess);

      p.x = dx.data();
      p.input = c.input;
      p.norm_weight = c.input == Input::gated_rms_norm ? dnorm.data() : nullptr;
      p.gate = c.input == Input::plain ? nullptr : dgate.data();
      p.group = c.group;
      p.eps = 1e-6f;
      p.outputs[0].out = fused.data();
      if (kernels::small_batch_staging_bytes(p) > kernels::kMaxSmallBatchStagingBytes) {  // too wide to stage
        EXPECT_NE(kernels::small_batch_linear_error(p).find("to stage"), std::string::npos);
        sync();
        continue;
      }
      ASSERT_EQ(kernels::small_batch_linear_error(p), "");
      ASSERT_EQ(kernels::launch_small_batch_linear(p, stream_), cudaSuccess);
      auto fused_sum = poisoned_bf16(size_t(M * N));
      p.residual = dres.data();
      p.outputs[0].out = fused_sum.data();
      ASSERT_EQ(kernels::small_batch_linear_error(p), "");
      ASSERT_EQ(kernels::launch_small_batch_linear(p, stream_), cudaSuccess);
      sync();
      EXPECT_EQ(fused.download(), plain.download());
      EXPECT_EQ(fused_sum.download(), plain_sum.download());
    }
  }
}

// How many steps of weights a warp keeps in flight (4, 8, or the kernel's choice) does not change a
// bit: narrow and wide launches, a K over 4,096, with and without the residual add.
TEST_F(KernelTest, SmallBatchLinearStepsInFlightKeepTheBits) {
  SCOPED_TRACE(testing::seed_trace(seed_));
  struct Shape {
    int64_t N, K;
  };
  for (const Shape& shape : {Shape{77, 328}, Shape{4200, 1032}, Shape{200, 9216}}) {
    const TestWeight w = random_weight(shape.N, shape.K, rng_);
    for (int64_t M : {int64_t(1), int64_t(5), int64_t(8)}) {
      SCOPED_TRACE("N " + std::to_string(shape.N) + " K " + std::to_string(shape.K) + " M " + std::to_string(M));
      const auto x = random_bf16_values(size_t(M * shape.K), rng_, 2.0f);
      const auto residual = random_bf16_values(size_t(M * shape.N), rng_, 2.0f);
      auto dx = device_bf16(x), dres = device_bf16(residual);
      for (bool add : {false, true}) {
        std::vector<std::vector<uint16_t>> results;
        for (int steps : {0, 4, 8}) {
          auto out = poisoned_bf16(size_t(M * shape.N));
          kernels::SmallBatchLinearParams p{.x = dx.data(), .rows = M, .in_features = shape.K, .num_outputs = 1};
          p.outputs[0] = {w.device.data(), out.data(), shape.N};
          p.residual = add ? dres.data() : nullptr;
          p.steps_in_flight = steps;
          ASSERT_EQ(kernels::small_batch_linear_error(p), "");
          ASSERT_EQ(kernels::launch_small_batch_linear(p, stream_), cudaSuccess);
          sync();
          results.push_back(out.download());
        }
        EXPECT_EQ(results[1], results[0]) << "4 steps against the kernel's choice" << (add ? ", residual" : "");
        EXPECT_EQ(results[2], results[0]) << "8 steps against the kernel's choice" << (add ? ", residual" : "");
      }
    }
  }
}

// A row's sum of squares from its partial sums, added as the kernel's warp adds them: lane l takes
// parts l, l + 32, ... in order, then a xor-shuffle tree.
float warp_order_sum(const float* parts, int64_t n) {
  std::array<float, 32> lane{};
  for (int l = 0; l < 32; ++l)
    for (int64_t j = l; j < n; j += 32) lane[size_t(l)] += parts[j];
  for (int offset = 16; offset > 0; offset /= 2) {
    std::array<float, 32> next{};
    for (int l = 0; l < 32; ++l) next[size_t(l)] = lane[size_t(l)] + lane[size_t(l ^ offset)];
    lane = next;
  }
  return lane[0];
}

// A residual projection leaves its rows' partial sums of squares, and the next projection applies the
// RMS norm from them: x1 = r + h W1^T (the add kernel's bits), then y = RMSNorm1p(x1) W2^T (and the
// SwiGLU pair). The partial sums are checked against the float64 sum of squares; the normalised
// input is rebuilt on the host from them (the kernel's factor, in its order) and the projections
// checked against the reference GEMM of it. (The norm kernel sums a row in another order, so its
// factor may differ by an ulp, and a normalised value by a rounding flip.) Both row forms (one and
// two input tiles), an odd width, M = 1..16.
TEST_F(KernelTest, SmallBatchLinearNormsFromTheResidualSums) {
  SCOPED_TRACE(testing::seed_trace(seed_));
  const int64_t K1 = 520, N2 = 45;
  for (int64_t H : {int64_t(2560), int64_t(328)}) {
    const TestWeight w1 = random_weight(H, K1, rng_), w2 = random_weight(N2, H, rng_), w3 = random_weight(N2, H, rng_);
    const auto norm_w = random_bf16_values(size_t(H), rng_, 0.3f);
    cuda::DeviceBuffer<float> dnorm{std::span<const float>(norm_w)};
    for (int64_t M : {int64_t(1), int64_t(3), int64_t(8), int64_t(11), int64_t(16)}) {
      SCOPED_TRACE("H " + std::to_string(H) + " M " + std::to_string(M));
      const auto h = random_bf16_values(size_t(M * K1), rng_, 1.0f);
      const auto r = random_bf16_values(size_t(M * H), rng_, 2.0f);
      auto dh = device_bf16(h), dr = device_bf16(r);
      auto x1 = poisoned_bf16(size_t(M * H)), plain = poisoned_bf16(size_t(M * H)), plain_x1 = poisoned_bf16(size_t(M * H));
      const int64_t parts = kernels::small_batch_sum_sq_parts(H);
      cuda::DeviceBuffer<float> sum_sq(size_t(M * parts));
      sum_sq.fill_bytes(0xFF);
      kernels::SmallBatchLinearParams p1{.x = dh.data(), .rows = M, .in_features = K1, .num_outputs = 1};
      p1.outputs[0] = {w1.device.data(), plain.data(), H};
      ASSERT_EQ(kernels::launch_small_batch_linear(p1, stream_), cudaSuccess);
      ASSERT_EQ(kernels::launch_add(dr.data(), plain.data(), M * H, plain_x1.data(), stream_), cudaSuccess);
      p1.outputs[0].out = x1.data();
      p1.residual = dr.data();
      p1.out_sum_sq = sum_sq.data();
      ASSERT_EQ(kernels::small_batch_linear_error(p1), "");
      ASSERT_EQ(kernels::launch_small_batch_linear(p1, stream_), cudaSuccess);

      auto y = poisoned_bf16(size_t(M * N2)), act = poisoned_bf16(size_t(M * N2));
      kernels::SmallBatchLinearParams p2{.x = x1.data(), .rows = M, .in_features = H, .num_outputs = 1,
                                         .input = kernels::SmallBatchInput::rms_norm, .norm_weight = dnorm.data(),
                                         .eps = 1e-6f, .input_sum_sq = sum_sq.data(), .input_sum_sq_parts = parts};
      p2.outputs[0] = {w2.device.data(), y.data(), N2};
      ASSERT_EQ(kernels::small_batch_linear_error(p2), "");
      ASSERT_EQ(kernels::launch_small_batch_linear(p2, stream_), cudaSuccess);
      p2.epilogue = kernels::SmallBatchEpilogue::swiglu;
      p2.num_outputs = 2;
      p2.outputs[0] = {w2.device.data(), act.data(), N2};
      p2.outputs[1] = {w3.device.data(), nullptr, N2};
      ASSERT_EQ(kernels::small_batch_linear_error(p2), "");
      ASSERT_EQ(kernels::launch_small_batch_linear(p2, stream_), cudaSuccess);
      sync();

      const std::vector<uint16_t> x1_bits = x1.download();
      ASSERT_EQ(x1_bits, plain_x1.download());
      const std::vector<float> x1_host = host_floats(x1);
      const std::vector<float> sums = sum_sq.download();
      for (int64_t m = 0; m < M; ++m) {
        double want = 0, got = 0;
        for (int64_t k = 0; k < H; ++k) want += double(x1_host[size_t(m * H + k)]) * x1_host[size_t(m * H + k)];
        for (int64_t j = 0; j < parts; ++j) got += sums[size_t(m * parts + j)];
        EXPECT_NEAR(got, want, 1e-5 * want) << "row " << m << "'s sum of squares";
      }
      std::vector<float> normed(x1_host.size()), expected(size_t(M * N2)), g(expected.size()), u(expected.size());
      for (int64_t m = 0; m < M; ++m) {
        const float s = 1.0f / std::sqrt(warp_order_sum(sums.data() + m * parts, parts) / float(H) + 1e-6f);
        for (int64_t k = 0; k < H; ++k)
          normed[size_t(m * H + k)] = round_bf16(x1_host[size_t(m * H + k)] * s * (1.0f + norm_w[size_t(k)]));
      }
      ref::linear(normed.data(), M, H, w2.view(), expected.data(), Precision::bf16);
      EXPECT_TRUE(all_close(host_floats(y), expected, gemm_tolerance(H), "normed projection"));
      ref::linear(normed.data(), M, H, w3.view(), u.data(), Precision::bf16);
      ref::swiglu(expected.data(), u.data(), M * N2, g.data(), Precision::bf16);
      EXPECT_TRUE(all_close(host_floats(act), g, gemm_tolerance(H), "normed swiglu"));
    }
  }
}

// From 9 rows the blocks stay resident and take tile after tile (each tile's first weights loaded
// while the one before is stored): with the grid capped at a few blocks, each takes many tiles, and
// every output (bf16 with and without a residual, its sums of squares, float32, SwiGLU; plain and
// staged input ops) keeps the bits of the uncapped launch, whose tiles the other tests check against
// the reference. Up to 8 rows the cap is ignored (a block per tile). Widths that leave a last partial
// tile, and blocks with unequal counts of tiles.
TEST_F(KernelTest, SmallBatchLinearBlocksTakeTileAfterTile) {
  SCOPED_TRACE(testing::seed_trace(seed_));
  using Input = kernels::SmallBatchInput;
  const int64_t K = 264, N = 1000, N2 = 77;  // 63 + 5 tiles over the capped grids
  const TestWeight w = random_weight(N, K, rng_), w2 = random_weight(N2, K, rng_), up = random_weight(N, K, rng_);
  const auto norm_w = random_bf16_values(size_t(K), rng_, 0.5f);
  cuda::DeviceBuffer<float> dnorm{std::span<const float>(norm_w)};
  for (int64_t M : {int64_t(6), int64_t(9), int64_t(16)}) {
    const auto x = random_bf16_values(size_t(M * K), rng_, 2.0f), gate = random_bf16_values(size_t(M * K), rng_, 3.0f);
    const auto residual = random_bf16_values(size_t(M * N), rng_, 2.0f);
    auto dx = device_bf16(x), dgate = device_bf16(gate), dres = device_bf16(residual);
    const int64_t parts = kernels::small_batch_sum_sq_parts(N);
    cuda::DeviceBuffer<float> sums(size_t(M * parts));
    sums.fill_bytes(0);
    struct Variant {
      const char* name;
      kernels::SmallBatchLinearParams p;
    };
    std::vector<Variant> variants;
    kernels::SmallBatchLinearParams base{.x = dx.data(), .rows = M, .in_features = K, .num_outputs = 2};
    base.outputs[0] = {w.device.data(), nullptr, N};
    base.outputs[1] = {w2.device.data(), nullptr, N2};
    variants.push_back({"two outputs", base});
    kernels::SmallBatchLinearParams f32 = base;
    f32.epilogue = kernels::SmallBatchEpilogue::f32;
    variants.push_back({"float32", f32});
    kernels::SmallBatchLinearParams swiglu = base;
    swiglu.epilogue = kernels::SmallBatchEpilogue::swiglu;
    swiglu.outputs[1] = {up.device.data(), nullptr, N};
    variants.push_back({"swiglu", swiglu});
    kernels::SmallBatchLinearParams sums_out{.x = dx.data(), .rows = M, .in_features = K, .num_outputs = 1,
                                             .residual = dres.data(), .out_sum_sq = sums.data()};
    sums_out.outputs[0] = {w.device.data(), nullptr, N};
    variants.push_back({"residual and sums of squares", sums_out});
    kernels::SmallBatchLinearParams gated = base;
    gated.num_outputs = 1;
    gated.input = Input::gated_rms_norm;
    gated.norm_weight = dnorm.data();
    gated.gate = dgate.data();
    gated.group = 88;
    variants.push_back({"gated norm", gated});
    kernels::SmallBatchLinearParams normed = swiglu;
    normed.input = Input::rms_norm;
    normed.norm_weight = dnorm.data();
    normed.input_sum_sq = sums.data();  // as the residual variant left them: both launches read the same
    normed.input_sum_sq_parts = parts;
    variants.push_back({"normed swiglu", normed});
    for (const Variant& v : variants) {
      SCOPED_TRACE(std::string(v.name) + " M " + std::to_string(M));
      const bool is_f32 = v.p.epilogue == kernels::SmallBatchEpilogue::f32;
      const int written = v.p.epilogue == kernels::SmallBatchEpilogue::swiglu ? 1 : v.p.num_outputs;
      // Each output as raw bytes, and the sums of squares where written.
      const auto run = [&](int64_t max_blocks) {
        std::vector<cuda::DeviceBuffer<uint16_t>> out;
        kernels::SmallBatchLinearParams p = v.p;
        p.max_blocks = max_blocks;
        for (int i = 0; i < written; ++i) {
          out.push_back(poisoned_bf16(size_t(M * p.outputs[i].features * (is_f32 ? 2 : 1))));
          p.outputs[i].out = out.back().data();
        }
        if (p.out_sum_sq) sums.fill_bytes(0xFF);
        EXPECT_EQ(kernels::small_batch_linear_error(p), "");
        EXPECT_EQ(kernels::launch_small_batch_linear(p, stream_), cudaSuccess);
        sync();
        std::vector<std::vector<uint16_t>> bits;
        for (auto& o : out) bits.push_back(o.download());
        if (p.out_sum_sq) {
          const std::vector<float> s = sums.download();
          std::vector<uint16_t> raw(s.size() * 2);
          std::memcpy(raw.data(), s.data(), raw.size() * 2);
          bits.push_back(raw);
        }
        return bits;
      };
      const auto whole = run(0);
      for (int64_t cap : {int64_t(1), int64_t(3), int64_t(7)}) EXPECT_EQ(run(cap), whole) << "blocks capped at " << cap;
    }
  }
}

// At any row count, 8-row weight tiles with the operands swapped (the input rows the mma's 16-row operand)
// give each output the bits of the 16-row tiles: the same products in the same k slots, the same
// warps' slices added in the same order. Every input op and epilogue the swapped form takes, odd
// widths and a K that is not a multiple of 32, two weights in one launch, 4 and 8 steps in flight,
// the grid capped so that blocks take tile after tile. A row alone (the up-to-8-row kernel) is the anchor of batch
// invariance, so the swapped rows are also checked against one row at a time.
TEST_F(KernelTest, SmallBatchLinearSwappedTilesKeepTheBits) {
  SCOPED_TRACE(testing::seed_trace(seed_));
  using Input = kernels::SmallBatchInput;
  struct Shape {
    int64_t N, K;
  };
  int compared = 0;  // cases compared; the plain input alone gives 3 shapes x 6 row counts x 3 epilogues
  for (const Shape& shape : {Shape{77, 328}, Shape{2560, 1032}, Shape{203, 9216}}) {
    const TestWeight w = random_weight(shape.N, shape.K, rng_);
    const int64_t group = shape.K % 24 == 0 ? 24 : shape.K;  // the gated norm's group, a multiple of 8 dividing K
    const auto norm_w = random_bf16_values(size_t(shape.K), rng_, 0.5f);
    cuda::DeviceBuffer<float> dnorm{std::span<const float>(norm_w)};
    for (int64_t M : {int64_t(1), int64_t(5), int64_t(8), int64_t(9), int64_t(13), int64_t(16)}) {
      const auto x = random_bf16_values(size_t(M * shape.K), rng_, 2.0f);
      const auto gate = random_bf16_values(size_t(M * shape.K), rng_, 3.0f);
      const auto residual = random_bf16_values(size_t(M * shape.N), rng_, 2.0f);
      auto dx = device_bf16(x), dgate = device_bf16(gate), dres = device_bf16(residual);
      const int64_t parts = kernels::small_batch_sum_sq_parts(shape.K);
      std::vector<float> sums(size_t(M * parts), 0.0f);
      for (int64_t m = 0; m < M; ++m)
        for (int64_t k = 0; k < shape.K; ++k)
          sums[size_t(m * parts + k / 16)] += x[size_t(m * shape.K + k)] * x[size_t(m * shape.K + k)];
      cuda::DeviceBuffer<float> dsums{std::span<const float>(sums)};
      for (const Input input : {Input::plain, Input::rms_norm, Input::gated_rms_norm, Input::sigmoid_gate})
        for (const int epilogue : {0, 1, 2}) {  // bf16, bf16 with the residual, float32
          kernels::SmallBatchLinearParams p{.x = dx.data(), .rows = M, .in_features = shape.K, .num_outputs = 1};
          p.input = input;
          if (input == Input::rms_norm) {
            p.norm_weight = dnorm.data();
            p.input_sum_sq = dsums.data();
            p.input_sum_sq_parts = parts;
          } else if (input == Input::gated_rms_norm) {
            p.norm_weight = dnorm.data();
            p.gate = dgate.data();
            p.group = group;
          } else if (input == Input::sigmoid_gate) {
            p.gate = dgate.data();
          }
          if (epilogue == 1) p.residual = dres.data();
          if (epilogue == 2) p.epilogue = kernels::SmallBatchEpilogue::f32;
          // Cases the kernel refuses in any tile form (the staging or the norm groups past their limits).
          kernels::SmallBatchLinearParams placed = p;  // an output in place, as run() gives it
          placed.outputs[0] = {w.device.data(), dres.data(), shape.N};
          if (!kernels::small_batch_linear_error(placed).empty()) continue;
          SCOPED_TRACE("N " + std::to_string(shape.N) + " K " + std::to_string(shape.K) + " M " + std::to_string(M) +
                       " input " + std::to_string(int(input)) + " epilogue " + std::to_string(epilogue));
          const int64_t elements = M * shape.N * (epilogue == 2 ? 2 : 1);  // in bf16 units
          const auto run = [&](kernels::SmallBatchLinearParams q) {
            auto out = poisoned_bf16(size_t(elements));
            q.outputs[0] = {w.device.data(), out.data(), shape.N};
            EXPECT_EQ(kernels::small_batch_linear_error(q), "");
            EXPECT_EQ(kernels::launch_small_batch_linear(q, stream_), cudaSuccess);
            sync();
            return out.download();
          };
          kernels::SmallBatchLinearParams sixteen = p;
          sixteen.weight_tile_rows = 16;
          const std::vector<uint16_t> expected = run(sixteen);
          for (const int steps : {4, 8})
            for (const int64_t cap : {int64_t(0), int64_t(5)}) {
              kernels::SmallBatchLinearParams eight = p;
              eight.weight_tile_rows = 8;
              eight.steps_in_flight = steps;
              eight.max_blocks = cap;
              EXPECT_EQ(run(eight), expected) << steps << " steps in flight, blocks capped at " << cap;
            }
          ++compared;
          if (input == Input::plain && epilogue != 1) {  // two weights of one input, tiles of both in one launch
            const TestWeight w2 = random_weight(45, shape.K, rng_);
            const auto two = [&](int rows_a_tile) {
              kernels::SmallBatchLinearParams q = p;
              q.num_outputs = 2;
              q.weight_tile_rows = rows_a_tile;
              auto out = poisoned_bf16(size_t(elements)), out2 = poisoned_bf16(size_t(M * 45 * (epilogue == 2 ? 2 : 1)));
              q.outputs[0] = {w.device.data(), out.data(), shape.N};
              q.outputs[1] = {w2.device.data(), out2.data(), 45};
              EXPECT_EQ(kernels::small_batch_linear_error(q), "");
              EXPECT_EQ(kernels::launch_small_batch_linear(q, stream_), cudaSuccess);
              sync();
              return std::make_pair(out.download(), out2.download());
            };
            const auto expected_two = two(16);
            EXPECT_EQ(expected_two.first, expected);
            EXPECT_EQ(two(8), expected_two) << "two weights in 8-row tiles";
          }
          if (input != Input::plain || epilogue != 1) continue;
          for (int64_t m : {int64_t(0), M - 1}) {  // the first and last rows alone (the up-to-8-row kernel)
            kernels::SmallBatchLinearParams one = p;
            one.x = dx.data() + m * shape.K;
            one.residual = dres.data() + m * shape.N;
            one.rows = 1;
            auto out = poisoned_bf16(size_t(shape.N));
            one.outputs[0] = {w.device.data(), out.data(), shape.N};
            ASSERT_EQ(kernels::launch_small_batch_linear(one, stream_), cudaSuccess);
            sync();
            const std::vector<uint16_t> alone = out.download();
            EXPECT_TRUE(std::equal(alone.begin(), alone.end(), expected.begin() + m * shape.N)) << "row " << m;
          }
        }
    }
  }
  EXPECT_GT(compared, 3 * 6 * 3);  // and some with an input op
}

// Sequences of a batch as (n_tokens, slot) with the conv state carried in a pool of slots; then a
// decode step (one token each, the fused form).
class ConvTest : public KernelTest, public ::testing::WithParamInterface<bool> {
 protected:
  void conv_matches_reference(int32_t channels);
};

// Channel counts: odd (the scalar prefill kernel, partial channel blocks) and a multiple of 8 (the
// vector prefill kernel, 16-byte rows), whose output is also checked bit for bit against the scalar
// kernel's on the same inputs placed 2 bytes off (which the vector kernel refuses).
TEST_P(ConvTest, ConvSiluWithStateMatchesReference) {
  for (const int32_t C : {6144 + 7, 6144 + 8}) {
    SCOPED_TRACE("channels " + std::to_string(C));
    conv_matches_reference(C);
  }
}

void ConvTest::conv_matches_reference(int32_t C) {
  SCOPED_TRACE(testing::seed_trace(seed_));
  const bool one_token_each = GetParam();
  const int32_t K = 4, slots = 5;
  const std::vector<int64_t> lengths = one_token_each ? std::vector<int64_t>{1, 1, 1, 1} : std::vector<int64_t>{1, 65, 2, 3, 130};
  const std::vector<int32_t> slot_of = one_token_each ? std::vector<int32_t>{3, 0, 4, 2} : std::vector<int32_t>{3, 0, 4, 1, 2};
  const int64_t N = std::accumulate(lengths.begin(), lengths.end(), int64_t(0));
  const auto x = random_bf16_values(size_t(N * C), rng_, 2.0f);
  const auto w = random_bf16_values(size_t(C * K), rng_, 0.5f);
  auto state = random_bf16_values(size_t(slots * C * K), rng_, 2.0f);
  const auto state_before = state;  // the reference steps `state` on
  std::vector<int32_t> cu = {0}, token_seq;
  for (size_t s = 0; s < lengths.size(); ++s) {
    cu.push_back(cu.back() + int32_t(lengths[s]));
    token_seq.insert(token_seq.end(), size_t(lengths[s]), int32_t(s));
  }
  auto dx = device_bf16(x), dstate = device_bf16(state);
  cuda::DeviceBuffer<float> dw{std::span<const float>(w)};
  cuda::DeviceBuffer<int32_t> dcu{std::span<const int32_t>(cu)}, dts{std::span<const int32_t>(token_seq)},
      dslot{std::span<const int32_t>(slot_of)};
  auto out = poisoned_bf16(size_t(N * C));
  gdn::ConvParams p{.x = dx.data(), .weight = dw.data(), .conv_state = dstate.data(), .cu_seqlens = dcu.data(),
                    .token_seq = dts.data(), .seq_slot = dslot.data(), .out = out.data(), .tokens = N,
                    .num_seqs = int32_t(lengths.size()), .channels = C, .kernel = K,
                    .one_token_each = one_token_each};
  ASSERT_EQ(gdn::launch_conv1d_silu(p, stream_), cudaSuccess);
  sync();
  std::vector<float> expected(size_t(N * C));
  const TensorView w_view{w.data(), DType::f32, {C, 1, K}};
  for (size_t s = 0; s < lengths.size(); ++s)
    ref::causal_conv1d_silu(x.data() + cu[s] * int64_t(C), lengths[s], C, K, w_view,
                            state.data() + size_t(slot_of[s]) * C * K, expected.data() + cu[s] * int64_t(C),
                            Precision::bf16);
  EXPECT_TRUE(all_close(host_floats(out), expected, kBf16RoundingFlips, "conv1d + silu"));
  EXPECT_TRUE(all_close(host_floats(dstate), state, kExactF32, "conv state after the step"));
  if (!one_token_each && C % 8 == 0) {  // the scalar kernel on the same inputs, 2 bytes off
    std::vector<float> x_off(x.size() + 1, 0.0f);
    std::copy(x.begin(), x.end(), x_off.begin() + 1);
    auto dx_off = device_bf16(x_off), dstate_again = device_bf16(state_before);
    auto out_off = poisoned_bf16(size_t(N * C) + 1);
    gdn::ConvParams q = p;
    q.x = dx_off.data() + 1, q.out = out_off.data() + 1, q.conv_state = dstate_again.data();
    ASSERT_EQ(gdn::launch_conv1d_silu(q, stream_), cudaSuccess);
    sync();
    std::vector<uint16_t> scalar = out_off.download();
    scalar.erase(scalar.begin());
    EXPECT_TRUE(out.download() == scalar) << "the vector kernel's output differs from the scalar kernel's";
    EXPECT_TRUE(dstate_again.download() == dstate.download()) << "the states differ";
  }
  if (one_token_each) {  // the flag promises one token per sequence: a plan that breaks it is refused
    p.tokens = N + 1;
    EXPECT_EQ(gdn::launch_conv1d_silu(p, stream_), cudaErrorInvalidValue);
  }
}
INSTANTIATE_TEST_SUITE_P(Steps, ConvTest, ::testing::Values(false, true),
                         [](const auto& info) { return info.param ? "DecodeFused" : "Prefill"; });

TEST_F(KernelTest, GdnPrefillInputsMatchReference) {
  SCOPED_TRACE(testing::seed_trace(seed_));
  const int32_t Hk = 16, Hv = 32, dk = 128, dv = 128;
  const int64_t C = 2 * Hk * dk + Hv * dv;
  for (int64_t N : kRows) {
    const auto qkv = random_bf16_values(size_t(N * C), rng_, 1.5f);
    const auto a = random_bf16_values(size_t(N * Hv), rng_, 3.0f), b = random_bf16_values(size_t(N * Hv), rng_, 3.0f);
    const auto A_log = random_bf16_values(size_t(Hv), rng_, 1.0f), dt_bias = random_bf16_values(size_t(Hv), rng_, 1.0f);
    auto dqkv = device_bf16(qkv), da = device_bf16(a), db = device_bf16(b);
    cuda::DeviceBuffer<float> dA{std::span<const float>(A_log)}, ddt{std::span<const float>(dt_bias)};
    auto q = poisoned_bf16(size_t(N * Hk * dk)), k = poisoned_bf16(size_t(N * Hk * dk)), v = poisoned_bf16(size_t(N * Hv * dv));
    cuda::DeviceBuffer<float> g(size_t(N * Hv)), beta(size_t(N * Hv));
    g.fill_bytes(0xFF);
    beta.fill_bytes(0xFF);
    gdn::PrefillInputParams p{.qkv = dqkv.data(), .a = da.data(), .b = db.data(), .A_log = dA.data(),
                              .dt_bias = ddt.data(), .q = q.data(), .k = k.data(), .v = v.data(), .g = g.data(),
                              .beta = beta.data(), .tokens = N, .num_k_heads = Hk, .num_v_heads = Hv, .k_dim = dk,
                              .v_dim = dv};
    ASSERT_EQ(gdn::launch_prefill_inputs(p, stream_), cudaSuccess);
    sync();
    std::vector<float> eq(size_t(N * Hk * dk)), ek(eq.size()), ev, eg(size_t(N * Hv)), eb(eg.size());
    for (int64_t t = 0; t < N; ++t) {
      ref::l2_normalize(qkv.data() + t * C, Hk, dk, 1.0f, eq.data() + t * Hk * dk);
      ref::l2_normalize(qkv.data() + t * C + Hk * dk, Hk, dk, 1.0f, ek.data() + t * Hk * dk);
      ev.insert(ev.end(), qkv.begin() + t * C + 2 * Hk * dk, qkv.begin() + (t + 1) * C);
    }
    for (auto* e : {&eq, &ek})
      for (auto& x : *e) x = round_bf16(x);
    ref::gdn_gates(a.data(), b.data(), N, Hv, TensorView{A_log.data(), DType::f32, {Hv}},
                   TensorView{dt_bias.data(), DType::f32, {Hv}}, eg.data(), eb.data(), Precision::bf16);
    SCOPED_TRACE("tokens " + std::to_string(N));
    EXPECT_TRUE(all_close(host_floats(q), eq, kBf16RoundingFlips, "q / |q|"));
    EXPECT_TRUE(all_close(host_floats(k), ek, kBf16RoundingFlips, "k / |k|"));
    EXPECT_TRUE(all_close(host_floats(v), ev, kExactF32, "v"));
    EXPECT_TRUE(all_close(g.download(), eg, testing::kF32VsF64, "g"));
    EXPECT_TRUE(all_close(beta.download(), eb, kBf16RoundingFlips, "beta"));
  }
}

}  // namespace
}  // namespace di
