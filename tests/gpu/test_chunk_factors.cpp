// The chunk-parallel factor pass of a context split (gdn/chunk_factors.h) against float64: for every
// chunk and value head, Tinv' = (I + L')^-1 stored as a bf16 hi + lo pair, and 1 / |k| of every row.
// Ragged sequences (an empty one, 1, 63, 64, 65 and several chunks), GVA heads, raw (not unit) key
// rows with DI_GDN_QK_L2NORM's normalisation and unit ones without it, decays from none to strong,
// poisoned outputs, and a grid larger than the batch's chunks (its extra CTAs must write nothing).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <tuple>
#include <vector>

#include "core/bf16.h"
#include "core/cuda.h"
#include "gdn/chunk_factors.h"
#include "gpu/gpu_test.h"
#include "support/tolerance.h"

namespace di::gdn {
namespace {

using di::testing::all_close;
using di::testing::device_bf16;
using di::testing::host_floats;
using di::testing::kF32VsF64;
using di::testing::kTf32InverseVsF64;
using di::testing::seed_trace;

constexpr int kC = 64, kDim = 128;

struct Batch {
  std::vector<int32_t> cu{0}, chunk_offsets{0};
  std::vector<float> k, g, beta;  // k rounded to bf16 values
  int hk = 0, hv = 0;
  int tokens() const { return cu.back(); }
  int chunks() const { return chunk_offsets.back(); }
};

Batch draw(std::mt19937& rng, const std::vector<int>& lengths, int hk, int hv, bool unit_rows) {
  std::normal_distribution<double> normal(0.0, 1.0);
  std::uniform_real_distribution<double> uniform(0.0, 1.0);
  Batch b;
  b.hk = hk, b.hv = hv;
  for (int len : lengths) {
    b.cu.push_back(b.cu.back() + len);
    b.chunk_offsets.push_back(b.chunk_offsets.back() + (len + kC - 1) / kC);
  }
  const int T = b.tokens();
  b.k.resize(size_t(T) * hk * kDim);
  for (size_t row = 0; row < size_t(T) * hk; ++row) {
    double norm = 0;
    std::vector<double> x(kDim);
    for (double& e : x) e = normal(rng), norm += e * e;
    for (int d = 0; d < kDim; ++d)
      b.k[row * kDim + d] = bf16_to_f32(f32_to_bf16(float(unit_rows ? x[d] / std::sqrt(norm) : 0.5 * x[d])));
  }
  b.g.resize(size_t(T) * hv), b.beta.resize(size_t(T) * hv);
  for (size_t i = 0; i < b.g.size(); ++i) {
    const double u = uniform(rng);
    b.g[i] = float(u < 0.01 ? -20 * uniform(rng) : u < 0.1 ? 0.0 : std::log(0.5 + 0.5 * uniform(rng)));
    b.beta[i] = float(1.0 / (1.0 + std::exp(-1.5 * normal(rng))));
  }
  return b;
}

// The float64 factors of one (chunk, value head): Tinv' row-major [64][64] and 1 / |k| [64].
void oracle(const Batch& b, int chunk, int head, bool normalize, std::vector<double>& t_inv, std::vector<double>& k_inv) {
  int seq = 0;
  while (b.chunk_offsets[seq + 1] <= chunk) ++seq;
  const int t0 = b.cu[seq] + (chunk - b.chunk_offsets[seq]) * kC, len = std::min(kC, b.cu[seq + 1] - t0);
  const int key_head = head / (b.hv / b.hk);
  std::vector<double> a(kC * kC, 0.0), G(kC, 0.0), beta(kC, 0.0);
  for (int r = 0; r < len; ++r)
    for (int c = 0; c < len; ++c) {
      double dot = 0;
      for (int d = 0; d < kDim; ++d)
        dot += double(b.k[(size_t(t0 + r) * b.hk + key_head) * kDim + d]) * b.k[(size_t(t0 + c) * b.hk + key_head) * kDim + d];
      a[r * kC + c] = dot;
    }
  for (int r = 0; r < kC; ++r) {
    G[r] = (r ? G[r - 1] : 0.0) + (r < len ? b.g[size_t(t0 + r) * b.hv + head] : 0.0);
    beta[r] = r < len ? b.beta[size_t(t0 + r) * b.hv + head] : 0.0;
    k_inv[r] = normalize ? 1.0 / std::sqrt(a[r * kC + r] + 1e-6) : 1.0;
  }
  std::vector<double> l(kC * kC, 0.0);
  for (int r = 0; r < kC; ++r)
    for (int c = 0; c < r; ++c) l[r * kC + c] = beta[r] * k_inv[r] * k_inv[r] * std::exp(std::min(G[r] - G[c], 0.0)) * a[r * kC + c];
  std::fill(t_inv.begin(), t_inv.end(), 0.0);
  for (int j = 0; j < kC; ++j)
    for (int i = j; i < kC; ++i) {
      double x = i == j ? 1.0 : 0.0;
      for (int m = j; m < i; ++m) x -= l[i * kC + m] * t_inv[m * kC + j];
      t_inv[i * kC + j] = x;
    }
}

class ChunkFactors : public di::testing::SeededGpuTest<std::mt19937> {};

TEST_F(ChunkFactors, EveryChunkAndHeadMatchesFloat64) {
  SCOPED_TRACE(seed_trace(seed_));
  const std::vector<int> lengths{65, 0, 1, 200, 64, 63, 130};
  for (const auto& [hk, hv, normalize] : {std::tuple{2, 4, true}, std::tuple{1, 3, false}}) {
    SCOPED_TRACE(::testing::Message() << "heads " << hk << "/" << hv << (normalize ? ", raw rows normalised" : ", unit rows"));
    const Batch b = draw(rng_, lengths, hk, hv, !normalize);
    const int chunks = b.chunks(), grid = chunks + 3;  // three CTAs past the batch's chunks
    auto k = device_bf16(b.k);
    cuda::DeviceBuffer<float> g{std::span<const float>(b.g)}, beta{std::span<const float>(b.beta)};
    cuda::DeviceBuffer<int32_t> cu{std::span<const int32_t>(b.cu)}, offsets{std::span<const int32_t>(b.chunk_offsets)};
    const size_t pair = size_t(grid) * hv * kC * kC;
    cuda::DeviceBuffer<uint16_t> t_hi(pair), t_lo(pair);
    cuda::DeviceBuffer<float> k_inv(size_t(grid) * hk * kC);
    t_hi.fill_bytes(0xFF), t_lo.fill_bytes(0xFF), k_inv.fill_bytes(0xFF);  // NaN: what is not written shows
    ChunkFactorsParams p;
    p.k = k.data(), p.g = g.data(), p.beta = beta.data(), p.cu_seqlens = cu.data(), p.chunk_offsets = offsets.data();
    p.t_hi = t_hi.data(), p.t_lo = t_lo.data(), p.k_inv = k_inv.data();
    p.num_seqs = int32_t(lengths.size()), p.num_k_heads = hk, p.num_v_heads = hv, p.max_chunks = grid;
    p.normalize_k = normalize;
    ASSERT_EQ(launch_chunk_factors(p, stream_), cudaSuccess);
    sync();

    const std::vector<float> hi = host_floats(t_hi), lo = host_floats(t_lo), kinv = k_inv.download();
    std::vector<float> got(size_t(kC) * kC), got_kinv(kC);
    std::vector<double> want(size_t(kC) * kC), want_kinv(kC);
    int diagonal_or_upper_off = 0;
    for (int chunk = 0; chunk < chunks; ++chunk)
      for (int head = 0; head < hv; ++head) {
        SCOPED_TRACE(::testing::Message() << "chunk " << chunk << ", value head " << head);
        oracle(b, chunk, head, normalize, want, want_kinv);
        const size_t base = (size_t(chunk) * hv + head) * kC * kC;
        for (int e = 0; e < kC * kC; ++e) {
          got[e] = hi[base + e] + lo[base + e];
          const int r = e / kC, c = e % kC;
          if (c >= r && !(hi[base + e] == (c == r ? 1.0f : 0.0f) && lo[base + e] == 0.0f)) ++diagonal_or_upper_off;
        }
        EXPECT_TRUE(all_close(got, want, kTf32InverseVsF64, "Tinv' = hi + lo"));
        if (head % (hv / hk) == 0) {
          const int key_head = head / (hv / hk);
          for (int r = 0; r < kC; ++r) got_kinv[r] = kinv[(size_t(chunk) * hk + key_head) * kC + r];
          EXPECT_TRUE(all_close(got_kinv, want_kinv, kF32VsF64, "1 / |k|"));
        }
      }
    EXPECT_EQ(diagonal_or_upper_off, 0) << "the diagonal is exactly 1 and the upper triangle exactly 0";
    int written_past = 0;
    for (size_t e = size_t(chunks) * hv * kC * kC; e < pair; ++e) written_past += !std::isnan(hi[e]) || !std::isnan(lo[e]);
    for (size_t e = size_t(chunks) * hk * kC; e < kinv.size(); ++e) written_past += !std::isnan(kinv[e]);
    EXPECT_EQ(written_past, 0) << "CTAs past the batch's chunks wrote nothing";
  }
}

}  // namespace
}  // namespace di::gdn
