#pragma once
// Base fixture of the GPU tests: skips (with the reason) when no GPU is visible, so the CPU-only CI
// builds these tests without running them; otherwise checks that the test left no CUDA error behind.
#include <gtest/gtest.h>

#include <random>
#include <vector>

#include "core/bf16.h"
#include "core/cuda.h"
#include "support/seed.h"

namespace di::testing {

class GpuTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (cuda::device_count() == 0) GTEST_SKIP() << "no CUDA device visible";
    DI_CUDA_CHECK(cudaStreamCreate(&stream_));
  }
  void TearDown() override {
    if (IsSkipped()) return;
    if (stream_) {
      EXPECT_EQ(cudaStreamSynchronize(stream_), cudaSuccess);
      cudaStreamDestroy(stream_);
    }
    EXPECT_EQ(cudaGetLastError(), cudaSuccess) << "the test left a CUDA error behind";
  }
  void sync() { DI_CUDA_CHECK(cudaStreamSynchronize(stream_)); }

  cudaStream_t stream_ = nullptr;
};

// A GpuTest with fresh random inputs: the seed is drawn per test (DI_TEST_SEED replays one; tests
// print it with SCOPED_TRACE(seed_trace(seed_))) and seeds rng_.
template <typename Rng = std::mt19937_64>
class SeededGpuTest : public GpuTest {
 protected:
  void SetUp() override {
    GpuTest::SetUp();
    if (IsSkipped()) return;
    seed_ = fresh_seed();
    rng_.seed(seed_);
  }
  uint32_t seed_ = 0;
  Rng rng_;
};

// bf16 device buffers from and to host floats (values are rounded to bf16 on the way in).
inline cuda::DeviceBuffer<uint16_t> device_bf16(const std::vector<float>& values) {
  std::vector<uint16_t> bits(values.size());
  for (size_t i = 0; i < bits.size(); ++i) bits[i] = f32_to_bf16(values[i]);
  return cuda::DeviceBuffer<uint16_t>(std::span<const uint16_t>(bits));
}
inline std::vector<float> host_floats(const cuda::DeviceBuffer<uint16_t>& buffer) {
  const std::vector<uint16_t> bits = buffer.download();
  std::vector<float> out(bits.size());
  for (size_t i = 0; i < bits.size(); ++i) out[i] = bf16_to_f32(bits[i]);
  return out;
}
// n bf16-exact values drawn from N(0, stddev^2).
inline std::vector<float> random_bf16_values(size_t n, std::mt19937_64& rng, float stddev = 1.0f) {
  std::normal_distribution<float> d(0.0f, stddev);
  std::vector<float> v(n);
  for (auto& x : v) x = round_bf16(d(rng));
  return v;
}

}  // namespace di::testing
