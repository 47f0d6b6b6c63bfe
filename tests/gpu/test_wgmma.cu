// The wgmma building blocks of kernels/wgmma.cuh on their own: the operand layout and descriptor
// (one 64 x 64 x kd product against a host GEMM of the same bf16 values, exact up to f32 summation
// order), in the core-matrix and the piece-major (TMA box) layouts, with A from registers too, and the fragment offsets (every element's direct and transposed
// offset equals the layout formula; ldmatrix .trans reads the transposed fragment). A failure here localises a wrong descriptor before it shows up as a wrong GDN state.
#include <cuda_bf16.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "core/bf16.h"
#include "core/cuda.h"
#include "gpu/gpu_test.h"
#include "kernels/cuda_common.cuh"
#include "kernels/wgmma.cuh"

namespace di::kernels {
namespace {

namespace wg = wgmma;
using di::testing::seed_trace;

// D = A Bᵀ for row-major A [64][kd] and B [64][kd] (bf16), D row-major [64][64] f32. One warpgroup.
// K-major operands are stored as [64][kd] tiles; an MN-major A as rows 64..127 of a [kd][128] tile
// (the sm90 kernel's Kᵀ read from its K tile), an MN-major B as a [kd][64] tile.
// With `pieces` (both K-major): A and B as piece-major [64][kd] tiles (the Gram products of Q and K).
template <int kd, bool a_mn, bool b_mn, bool pieces = false>
__global__ void gemm_abt_kernel(const __nv_bfloat16* a, const __nv_bfloat16* b, float* d, int accumulate_twice) {
#if defined(__CUDA_ARCH__) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
  static_assert(!pieces || (!a_mn && !b_mn), "piece-major operands are tested K-major here");
  __shared__ __align__(128) unsigned char a_s[(a_mn ? 128 : 64) * kd * 2];
  __shared__ __align__(128) unsigned char b_s[64 * kd * 2];
  for (int e = threadIdx.x; e < 64 * kd; e += blockDim.x) {
    const int r = e / kd, k = e % kd;
    *reinterpret_cast<__nv_bfloat16*>(a_s + (pieces ? wg::piece_offset(r, k, 64) : a_mn ? wg::operand_offset(k, 64 + r, 128) : wg::operand_offset(r, k, kd))) = a[e];
    *reinterpret_cast<__nv_bfloat16*>(b_s + (pieces ? wg::piece_offset(r, k, 64) : b_mn ? wg::operand_offset(k, r, 64) : wg::operand_offset(r, k, kd))) = b[e];
  }
  wg::fence_async_shared();
  __syncthreads();
  float acc[32];
  for (float& x : acc) x = 0.f;
  const auto op_a = [&] {
    if constexpr (pieces) return wg::k_major_pieces(a_s, 64);
    else if constexpr (a_mn) return wg::mn_major(a_s + wg::operand_offset(0, 64, 128), 128);
    else return wg::k_major(a_s, kd);
  }();
  const auto op_b = [&] {
    if constexpr (pieces) return wg::k_major_pieces(b_s, 64);
    else if constexpr (b_mn) return wg::mn_major(b_s, 64);
    else return wg::k_major(b_s, kd);
  }();
  wg::wgmma_fence();
  wg::mma<kd>(acc, op_a, op_b, false);
  if (accumulate_twice) wg::mma<kd>(acc, op_a, op_b, true);
  wg::wgmma_commit();
  wg::wgmma_wait<0>();
  wg::fence_registers(acc);
  const wg::Fragment f(threadIdx.x);
  for (int i = 0; i < 32; ++i) d[f.row(i) * 64 + f.col(i)] = acc[i];
#endif
}

// For every thread and element: out[(t * 32 + i) * 4 + {0..3}] = row, col, direct offset, transposed
// offset (kd = 64, row shift 64 for the transposed one, as the state operand uses).
__global__ void fragment_offsets_kernel(uint32_t* out) {
  const wg::Fragment f(threadIdx.x);
  for (int i = 0; i < 32; ++i) {
    uint32_t* o = out + (threadIdx.x * 32 + i) * 4;
    o[0] = f.row(i), o[1] = f.col(i), o[2] = f.direct_offset(i, 64), o[3] = f.transposed_offset(i, 128, 64);
  }
}

// Fragment::store_pairs against pair stores at direct_offset, and load_pairs reading them back: a
// warpgroup's tagged pairs (thread t, pair p -> t * 16 + p + 1) into [128][64] tiles (rows 64 .. 127
// with row_shift 64, as the state operand), and what load_pairs reads from the pair-stored tile.
__global__ void store_pairs_kernel(uint32_t* by_stmatrix, uint32_t* by_pairs, uint32_t* loaded) {
  __shared__ __align__(128) unsigned char a[128 * 64 * 2], b[128 * 64 * 2];
  for (int e = threadIdx.x; e < 128 * 64 / 2; e += blockDim.x)
    reinterpret_cast<uint32_t*>(a)[e] = reinterpret_cast<uint32_t*>(b)[e] = 0;
  __syncthreads();
  const wg::Fragment f(threadIdx.x);
  for (int shift : {0, 64}) {
    uint32_t pairs[16];
    for (int p = 0; p < 16; ++p) pairs[p] = threadIdx.x * 16 + p + 1 + (shift ? 0x10000u : 0u);
    f.store_pairs(a, 64, pairs, shift);
    for (int p = 0; p < 16; ++p) *reinterpret_cast<uint32_t*>(b + f.direct_offset(2 * p, 64, shift)) = pairs[p];
  }
  __syncthreads();
  uint32_t back[16];
  f.load_pairs(b, 64, back);
  for (int p = 0; p < 16; ++p) loaded[threadIdx.x * 16 + p] = back[p];
  for (int e = threadIdx.x; e < 128 * 64 / 2; e += blockDim.x) {
    by_stmatrix[e] = reinterpret_cast<const uint32_t*>(a)[e];
    by_pairs[e] = reinterpret_cast<const uint32_t*>(b)[e];
  }
}

// D = A Bᵀ with A from registers, as the sm90 kernel's transposed products take it: each thread packs
// its fragment of A ([64][kd] row-major, 64 columns per accumulator-shaped block) into bf16 pairs, and
// wgmma reads them as the A operand (mma_rs); B is stored as in gemm_abt_kernel.
// With `pieces`, B is in the piece-major layout as the sm90 kernel's K tile [64 tokens][128 keys]:
// K-major, B [64][kd] is the tile's rows (kd = 128); MN-major, B's row n is key 64 + n of a [64][128]
// tile, the contraction along its 64 rows (the state update's keys 64 .. 127).
template <int kd, bool b_mn, bool pieces = false>
__global__ void gemm_rs_kernel(const __nv_bfloat16* a, const __nv_bfloat16* b, float* d) {
#if defined(__CUDA_ARCH__) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
  __shared__ __align__(128) unsigned char b_s[(pieces && b_mn ? 128 : 64) * kd * 2];
  for (int e = threadIdx.x; e < 64 * kd; e += blockDim.x) {
    const int r = e / kd, k = e % kd;
    const uint32_t at = pieces ? (b_mn ? wg::piece_offset(k, 64 + r, kd) : wg::piece_offset(r, k, 64))
                               : (b_mn ? wg::operand_offset(k, r, 64) : wg::operand_offset(r, k, kd));
    *reinterpret_cast<__nv_bfloat16*>(b_s + at) = b[e];
  }
  wg::fence_async_shared();
  __syncthreads();
  const wg::Fragment f(threadIdx.x);
  uint32_t pairs[kd / 64 * 16];
  for (int block = 0; block < kd / 64; ++block)
    for (int i = 0; i < 32; i += 2) {
      const __nv_bfloat16* at = a + f.row(i) * kd + 64 * block + f.col(i);
      pairs[block * 16 + i / 2] = pack_bf16x2(__bfloat162float(at[0]), __bfloat162float(at[1]));
    }
  float acc[32];
  for (float& x : acc) x = 0.f;
  const auto op_b = [&] {
    if constexpr (pieces && b_mn) return wg::mn_major_pieces(b_s + wg::piece_offset(0, 64, kd), kd);
    else if constexpr (pieces) return wg::k_major_pieces(b_s, 64);
    else if constexpr (b_mn) return wg::mn_major(b_s, 64);
    else return wg::k_major(b_s, kd);
  }();
  wg::wgmma_fence();
  wg::mma_rs<kd>(acc, pairs, op_b, false);
  wg::wgmma_commit();
  wg::wgmma_wait<0>();
  wg::fence_registers(acc);
  for (int i = 0; i < 32; ++i) d[f.row(i) * 64 + f.col(i)] = acc[i];
#endif
}

// What Fragment::load_pairs_transposed reads from a [64][64] tile whose element (r, c) holds the tag
// 64 r + c: loaded[t * 16 + p] for thread t's pair p.
// With `pieces`, from the piece-major tile by load_pairs_transposed_pieces (the sm90 kernel's V tile).
template <bool pieces>
__global__ void transposed_pairs_kernel(uint32_t* loaded) {
  __shared__ __align__(128) unsigned char tile[64 * 64 * 2];
  for (int e = threadIdx.x; e < 64 * 64; e += blockDim.x)
    *reinterpret_cast<uint16_t*>(tile + (pieces ? wg::piece_offset(e / 64, e % 64, 64)
                                                : wg::operand_offset(e / 64, e % 64, 64))) = uint16_t(e);
  __syncthreads();
  const wg::Fragment f(threadIdx.x);
  uint32_t pairs[16];
  if (pieces) f.load_pairs_transposed_pieces(tile, 64, pairs);
  else f.load_pairs_transposed(tile, 64, pairs);
  for (int p = 0; p < 16; ++p) loaded[threadIdx.x * 16 + p] = pairs[p];
}

uint32_t layout_offset(int r, int k, int kd) { return uint32_t(((r / 8) * (kd / 8) + k / 8) * 128 + (r % 8) * 16 + (k % 8) * 2); }

bool is_hopper() {
  const cuda::DeviceInfo d = cuda::current_device();
  return d.sm_major == 9 && d.sm_minor == 0;
}

class Wgmma : public di::testing::SeededGpuTest<std::mt19937> {};

// D [64][64] against `times` the float64 product A Bᵀ of bf16 A and B, both [64][kd]: bf16 products
// are exact in f32, so only the f32 summation order differs. The first five misses are reported.
void expect_product(const std::vector<float>& d, const std::vector<uint16_t>& a, const std::vector<uint16_t>& b,
                    int kd, int times) {
  int bad = 0;
  for (int i = 0; i < 64; ++i)
    for (int j = 0; j < 64; ++j) {
      double want = 0;
      for (int k = 0; k < kd; ++k) want += double(bf16_to_f32(a[i * kd + k])) * double(bf16_to_f32(b[j * kd + k]));
      want *= times;
      if (!(std::fabs(d[i * 64 + j] - want) <= 1e-4 * (1 + std::fabs(want))) && bad++ < 5)
        ADD_FAILURE() << "D[" << i << "][" << j << "] = " << d[i * 64 + j] << ", want " << want;
    }
  EXPECT_EQ(bad, 0);
}

// A and B [64][kd] drawn N(0, 1) in bf16, on the host and on the device, and the device's D [64][64]
// poisoned (NaN) before the kernel writes it.
struct RandomOperands {
  std::vector<uint16_t> a, b;
  cuda::DeviceBuffer<uint16_t> da, db;
  cuda::DeviceBuffer<float> dd{64 * 64};
  RandomOperands(int kd, std::mt19937& rng) : a(size_t(64) * kd), b(size_t(64) * kd) {
    std::normal_distribution<float> normal(0.f, 1.f);
    for (auto& x : a) x = f32_to_bf16(normal(rng));
    for (auto& x : b) x = f32_to_bf16(normal(rng));
    da = cuda::DeviceBuffer<uint16_t>{std::span<const uint16_t>(a)};
    db = cuda::DeviceBuffer<uint16_t>{std::span<const uint16_t>(b)};
    dd.fill_bytes(0xFF);
  }
  const __nv_bfloat16* device_a() const { return reinterpret_cast<const __nv_bfloat16*>(da.data()); }
  const __nv_bfloat16* device_b() const { return reinterpret_cast<const __nv_bfloat16*>(db.data()); }
};

// One product per operand layout against a host GEMM of the same bf16 values.
template <int kd, bool a_mn, bool b_mn, bool pieces = false>
void check_product(std::mt19937& rng, cudaStream_t stream) {
  SCOPED_TRACE(::testing::Message() << "kd " << kd << ", A " << (a_mn ? "MN" : "K") << "-major, B "
                                    << (b_mn ? "MN" : "K") << "-major" << (pieces ? ", piece-major tiles" : ""));
  for (int twice : {0, 1}) {
    RandomOperands ops(kd, rng);
    gemm_abt_kernel<kd, a_mn, b_mn, pieces><<<1, 128, 0, stream>>>(ops.device_a(), ops.device_b(), ops.dd.data(), twice);
    DI_CUDA_CHECK(cudaGetLastError());
    DI_CUDA_CHECK(cudaStreamSynchronize(stream));
    SCOPED_TRACE(twice ? "accumulated twice" : "once");
    expect_product(ops.dd.download(), ops.a, ops.b, kd, twice ? 2 : 1);
  }
}

TEST_F(Wgmma, ProductMatchesHostGemm) {
  if (!is_hopper()) GTEST_SKIP() << "wgmma needs compute capability 9.0";
  SCOPED_TRACE(seed_trace(seed_));
  check_product<128, false, false>(rng_, stream_);
  check_product<64, false, false>(rng_, stream_);
}

TEST_F(Wgmma, MnMajorOperandsMatchHostGemm) {
  if (!is_hopper()) GTEST_SKIP() << "wgmma needs compute capability 9.0";
  SCOPED_TRACE(seed_trace(seed_));
  check_product<128, false, true>(rng_, stream_);  // K S: the state as a [keys][values] tile
  check_product<64, false, true>(rng_, stream_);   // Tinv X, P Vnew
  check_product<64, true, true>(rng_, stream_);    // Kᵀ W, Kᵀ read from the [tokens][keys] K tile
  check_product<64, true, false>(rng_, stream_);
}

// A from registers against a host GEMM of the same bf16 values.
template <int kd, bool b_mn, bool pieces = false>
void check_register_product(std::mt19937& rng, cudaStream_t stream) {
  SCOPED_TRACE(::testing::Message() << "kd " << kd << ", A from registers, B " << (b_mn ? "MN" : "K") << "-major"
                                    << (pieces ? ", piece-major tile" : ""));
  RandomOperands ops(kd, rng);
  gemm_rs_kernel<kd, b_mn, pieces><<<1, 128, 0, stream>>>(ops.device_a(), ops.device_b(), ops.dd.data());
  DI_CUDA_CHECK(cudaGetLastError());
  DI_CUDA_CHECK(cudaStreamSynchronize(stream));
  expect_product(ops.dd.download(), ops.a, ops.b, kd, 1);
}

TEST_F(Wgmma, RegisterOperandProductMatchesHostGemm) {
  if (!is_hopper()) GTEST_SKIP() << "wgmma needs compute capability 9.0";
  SCOPED_TRACE(seed_trace(seed_));
  check_register_product<128, false>(rng_, stream_);  // (K S)ᵀ = Sᵀ Kᵀ: B the K tile as loaded
  check_register_product<64, false>(rng_, stream_);   // Xᵀ Tinvᵀ, Vnewᵀ Pᵀ: B an [i][j] tile
  check_register_product<64, true>(rng_, stream_);    // Wᵀ K: B the K tile read MN-major
}

// The sm90 kernel's input tiles as the tensor maps' boxes write them.
TEST_F(Wgmma, PieceMajorOperandsMatchHostGemm) {
  if (!is_hopper()) GTEST_SKIP() << "wgmma needs compute capability 9.0";
  SCOPED_TRACE(seed_trace(seed_));
  check_product<128, false, false, true>(rng_, stream_);          // Q Kᵀ, K Kᵀ
  check_register_product<128, false, true>(rng_, stream_);        // Sᵀ Kᵀ, Sᵀ Qᵀ
  check_register_product<64, true, true>(rng_, stream_);          // Wᵀ K, keys 64 .. 127
}

TEST_F(Wgmma, TransposedPairsFollowTheFragment) {
  for (const bool pieces : {false, true}) {
    SCOPED_TRACE(pieces ? "piece-major tile" : "core-matrix tile");
    cuda::DeviceBuffer<uint32_t> loaded(128 * 16);
    loaded.fill_bytes(0xFF);
    if (pieces) transposed_pairs_kernel<true><<<1, 128, 0, stream_>>>(loaded.data());
    else transposed_pairs_kernel<false><<<1, 128, 0, stream_>>>(loaded.data());
    DI_CUDA_CHECK(cudaGetLastError());
    DI_CUDA_CHECK(cudaStreamSynchronize(stream_));
    const std::vector<uint32_t> l = loaded.download();
    for (int t = 0; t < 128; ++t)
      for (int p = 0; p < 16; ++p) {
        const int i = 2 * p, row = 16 * (t / 32) + (t % 32) / 4 + 8 * ((i >> 1) & 1), col = 8 * (i >> 2) + 2 * (t % 4);
        const uint32_t want = uint32_t(col * 64 + row) | (uint32_t((col + 1) * 64 + row) << 16);  // (T[col][row], T[col + 1][row])
        EXPECT_EQ(l[t * 16 + p], want) << "thread " << t << ", pair " << p;
      }
  }
}

TEST_F(Wgmma, StmatrixAndLdmatrixFollowTheFragment) {
  cuda::DeviceBuffer<uint32_t> by_stmatrix(128 * 64 / 2), by_pairs(128 * 64 / 2), loaded(128 * 16);
  store_pairs_kernel<<<1, 128, 0, stream_>>>(by_stmatrix.data(), by_pairs.data(), loaded.data());
  DI_CUDA_CHECK(cudaGetLastError());
  DI_CUDA_CHECK(cudaStreamSynchronize(stream_));
  const std::vector<uint32_t> a = by_stmatrix.download(), b = by_pairs.download(), l = loaded.download();
  EXPECT_EQ(a, b) << "stmatrix put the pairs elsewhere than direct_offset";
  EXPECT_TRUE(std::none_of(b.begin(), b.end(), [](uint32_t x) { return x == 0; })) << "the pairs cover both tiles";
  for (int t = 0; t < 128; ++t)
    for (int p = 0; p < 16; ++p) EXPECT_EQ(l[t * 16 + p], uint32_t(t * 16 + p + 1)) << "thread " << t << ", pair " << p;
}

TEST_F(Wgmma, FragmentOffsetsFollowTheLayout) {
  cuda::DeviceBuffer<uint32_t> out(128 * 32 * 4);
  fragment_offsets_kernel<<<1, 128, 0, stream_>>>(out.data());
  DI_CUDA_CHECK(cudaGetLastError());
  DI_CUDA_CHECK(cudaStreamSynchronize(stream_));
  const std::vector<uint32_t> o = out.download();
  std::vector<int> seen(64 * 64, 0);
  for (int t = 0; t < 128; ++t)
    for (int i = 0; i < 32; ++i) {
      const uint32_t* e = o.data() + (t * 32 + i) * 4;
      const int row = int(e[0]), col = int(e[1]);
      ASSERT_LT(row, 64);
      ASSERT_LT(col, 64);
      ++seen[row * 64 + col];
      EXPECT_EQ(e[2], layout_offset(row, col, 64)) << "direct, thread " << t << " element " << i;
      EXPECT_EQ(e[3], layout_offset(col, row + 64, 128)) << "transposed, thread " << t << " element " << i;
    }
  for (int x : seen) EXPECT_EQ(x, 1);  // the fragments tile the 64 x 64 accumulator exactly once
}

}  // namespace
}  // namespace di::kernels
