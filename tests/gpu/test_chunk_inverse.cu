// The inverse of the unit lower-triangular (I + L) that the GDN prefill kernels share
// (gdn/chunk_math.cuh), on its own: the register-tiled FMA form and the tensor-core forms (tf32
// operands split in three products, or rounded once: the sm90 kernel's) against a float64 forward
// substitution. L is drawn as the
// kernels see it, L[i][j] = beta_i exp(G_i - G_j) k_i . k_j (i > j) with unit-norm keys: once with
// independent keys (|L| mostly below 0.2) and once with keys that share a direction (|L| up to 0.9,
// where the inverse's entries grow and its products cancel). A failure here localises a wrong
// fragment mapping before it shows up as a wrong GDN state.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "core/cuda.h"
#include "gdn/chunk_math.cuh"
#include "gpu/gpu_test.h"
#include "support/tolerance.h"

namespace di::gdn {
namespace {

using di::testing::all_close;
using di::testing::kF32VsF64;
using di::testing::kTf32InverseVsF64;
using di::testing::seed_trace;

constexpr int kN = kGdnChunk;
constexpr int kStride = kN + 4;  // as the sm90 kernel's f32 inverse

enum class Form { fma, tensor_cores_split, tensor_cores_tf32 };

// One warpgroup inverts l (row-major [64][64], strictly lower) into t (row-major, the whole matrix).
template <Form form>
__global__ void invert_kernel(const float* l, float* t) {
  __shared__ __align__(16) float m[kN * kStride];
  __shared__ __align__(16) float scratch[1024];
  for (int e = threadIdx.x; e < kN * kN; e += blockDim.x) m[(e / kN) * kStride + e % kN] = l[e];
  __syncthreads();
  if constexpr (form == Form::tensor_cores_split)
    invert_unit_lower_mma<kStride, BlockSync, MergeProducts::split_3xtf32>(m, int(threadIdx.x));
  else if constexpr (form == Form::tensor_cores_tf32)
    invert_unit_lower_mma<kStride, BlockSync, MergeProducts::tf32>(m, int(threadIdx.x));
  else
    invert_unit_lower_tiled<128, kStride, BlockSync>(m, scratch, int(threadIdx.x));
  __syncthreads();
  for (int e = threadIdx.x; e < kN * kN; e += blockDim.x) t[e] = m[(e / kN) * kStride + e % kN];
}

// L as the kernels make it, from keys around a shared direction (`shared` of its weight).
std::vector<float> draw_l(std::mt19937& rng, double shared) {
  std::normal_distribution<double> normal(0.0, 1.0);
  std::uniform_real_distribution<double> uniform(0.0, 1.0);
  constexpr int kDim = 128;
  std::vector<double> base(kDim), keys(size_t(kN) * kDim), G(kN), beta(kN);
  for (double& x : base) x = normal(rng);
  for (int i = 0; i < kN; ++i) {
    double norm = 0;
    for (int d = 0; d < kDim; ++d) {
      double& x = keys[size_t(i) * kDim + d];
      x = shared * base[d] + (1 - shared) * normal(rng);
      norm += x * x;
    }
    for (int d = 0; d < kDim; ++d) keys[size_t(i) * kDim + d] /= std::sqrt(norm);
    G[i] = (i ? G[i - 1] : 0.0) + std::log(0.9 + 0.1 * uniform(rng));
    beta[i] = 1.0 / (1.0 + std::exp(-1.5 * normal(rng)));
  }
  std::vector<float> l(size_t(kN) * kN, 0.0f);
  for (int i = 0; i < kN; ++i)
    for (int j = 0; j < i; ++j) {
      double dot = 0;
      for (int d = 0; d < kDim; ++d) dot += keys[size_t(i) * kDim + d] * keys[size_t(j) * kDim + d];
      l[size_t(i) * kN + j] = float(beta[i] * std::exp(G[i] - G[j]) * dot);
    }
  return l;
}

// (I + L)^-1 in float64 by forward substitution, on the float32 values the kernel reads.
std::vector<double> oracle(const std::vector<float>& l) {
  std::vector<double> t(size_t(kN) * kN, 0.0);
  for (int j = 0; j < kN; ++j)
    for (int i = j; i < kN; ++i) {
      double x = i == j ? 1.0 : 0.0;
      for (int k = j; k < i; ++k) x -= double(l[size_t(i) * kN + k]) * t[size_t(k) * kN + j];
      t[size_t(i) * kN + j] = x;
    }
  return t;
}

class ChunkInverse : public di::testing::SeededGpuTest<std::mt19937> {};

TEST_F(ChunkInverse, EveryFormMatchesFloat64) {
  SCOPED_TRACE(seed_trace(seed_));
  for (double shared : {0.0, 0.7}) {
    SCOPED_TRACE(::testing::Message() << "keys sharing " << shared << " of a direction");
    const std::vector<float> l = draw_l(rng_, shared);
    const std::vector<double> want = oracle(l);
    cuda::DeviceBuffer<float> dl{std::span<const float>(l)};
    for (Form form : {Form::fma, Form::tensor_cores_split, Form::tensor_cores_tf32}) {
      SCOPED_TRACE(form == Form::fma ? "FMA" : form == Form::tensor_cores_split ? "tensor cores, 3 x tf32" : "tensor cores, tf32");
      cuda::DeviceBuffer<float> dt(size_t(kN) * kN);
      dt.fill_bytes(0xFF);
      if (form == Form::fma)
        invert_kernel<Form::fma><<<1, 128, 0, stream_>>>(dl.data(), dt.data());
      else if (form == Form::tensor_cores_split)
        invert_kernel<Form::tensor_cores_split><<<1, 128, 0, stream_>>>(dl.data(), dt.data());
      else
        invert_kernel<Form::tensor_cores_tf32><<<1, 128, 0, stream_>>>(dl.data(), dt.data());
      DI_CUDA_CHECK(cudaGetLastError());
      DI_CUDA_CHECK(cudaStreamSynchronize(stream_));
      EXPECT_TRUE(all_close(dt.download(), want, form == Form::tensor_cores_tf32 ? kTf32InverseVsF64 : kF32VsF64,
                            "(I + L)^-1"));
    }
  }
}

}  // namespace
}  // namespace di::gdn
