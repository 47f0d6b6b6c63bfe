// Decode-sized linear layers of the 4B geometry: the small-batch kernel (one launch per group of
// projections that share an input, kernels/gemm/small_batch_linear.h) against cuBLASLt (one GEMM per
// weight, and the SwiGLU kernel after gate and up). A decode step of M sequences streams each
// weight once, so the figure of merit is the weight bytes over the time, as a fraction of the
// measured copy bandwidth (4.3 TB/s). Each timed repetition runs 20 launches back to back over
// weight sets rotated past the L2, as a decode step runs its layers; the median of 30 repetitions.
// Prints a table; --json writes the report.
#include <CLI/CLI.hpp>

#include <cmath>
#include <cstdio>
#include <fstream>
#include <random>

#include "core/bf16.h"
#include "core/cuda.h"
#include "core/error.h"
#include "gpu_timing.h"
#include "kernels/elementwise/elementwise.h"
#include "kernels/gemm/cuda_gemm.h"
#include "kernels/gemm/small_batch_linear.h"

namespace di::bench {
namespace {

constexpr double kRotateBytes = 200e6;  // four times the L2
constexpr int kLaunchesPerRep = 20;

struct Case {
  const char* name;
  std::vector<int64_t> features;  // one weight [N_i, K] per output
  int64_t K;
  bool swiglu = false;
};

// The 4B geometry: hidden 2560, intermediate 9216, GDN 16/32 heads of 128, attention 16/4 of 256.
const std::vector<Case> kCases = {
    {"gdn in_proj (qkv, z, b, a)", {8192, 4096, 32, 32}, 2560},
    {"attention q, k, v", {8192, 1024, 1024}, 2560},
    {"mlp gate + up, SwiGLU", {9216, 9216}, 2560, true},
    {"mlp down", {2560}, 9216},
    {"gdn out_proj", {2560}, 4096},
    {"lm_head", {248320}, 2560},
};

struct WeightSet {
  std::vector<cuda::DeviceBuffer<uint16_t>> w;
};

nlohmann::json run_case(const Case& c, int64_t M, kernels::CublasLtGemm& gemm, cudaStream_t stream,
                        std::mt19937_64& rng) {
  int64_t weight_elems = 0, out_elems = 0;
  for (int64_t n : c.features) weight_elems += n * c.K, out_elems += M * n;
  const double weight_bytes = 2.0 * double(weight_elems);
  const int sets = int(std::max(1.0, std::ceil(kRotateBytes / weight_bytes)));

  // Values do not change the time; a cheap hash keeps the 1.27 GB lm_head quick to fill.
  std::uniform_int_distribution<uint32_t> seed_of(0, ~0u);
  const auto random_bits = [&](int64_t n, float scale) {
    std::vector<uint16_t> bits(static_cast<size_t>(n));
    uint32_t h = seed_of(rng);
    for (auto& b : bits) {
      h = h * 1664525u + 1013904223u;
      b = f32_to_bf16(scale * (float(h >> 8) / float(1 << 24) * 2.0f - 1.0f));
    }
    return bits;
  };
  std::vector<WeightSet> weights(static_cast<size_t>(sets));
  for (int64_t n : c.features) {
    const auto bits = random_bits(n * c.K, 1.0f / std::sqrt(float(c.K)));
    for (auto& s : weights) s.w.emplace_back(std::span<const uint16_t>(bits));
  }
  const auto x_bits = random_bits(M * c.K, 1.0f);
  cuda::DeviceBuffer<uint16_t> x{std::span<const uint16_t>(x_bits)};
  std::vector<cuda::DeviceBuffer<uint16_t>> out;
  for (int64_t n : c.features) out.emplace_back(size_t(M * n));

  const auto small_batch = [&](int rep) {
    for (int l = 0; l < kLaunchesPerRep; ++l) {
      const WeightSet& s = weights[size_t((rep * kLaunchesPerRep + l) % sets)];
      kernels::SmallBatchLinearParams p{.x = x.data(), .rows = M, .in_features = c.K,
                                        .num_outputs = int(c.features.size()),
                                        .epilogue = c.swiglu ? kernels::SmallBatchEpilogue::swiglu
                                                             : kernels::SmallBatchEpilogue::bf16};
      for (size_t i = 0; i < c.features.size(); ++i)
        p.outputs[i] = {s.w[i].data(), c.swiglu && i == 1 ? nullptr : out[i].data(), c.features[i]};
      DI_CUDA_CHECK(kernels::launch_small_batch_linear(p, stream));
    }
  };
  cuda::DeviceBuffer<uint16_t> act(size_t(M * c.features[0]));
  const auto cublas = [&](int rep) {
    for (int l = 0; l < kLaunchesPerRep; ++l) {
      const WeightSet& s = weights[size_t((rep * kLaunchesPerRep + l) % sets)];
      for (size_t i = 0; i < c.features.size(); ++i)
        gemm.linear(x.data(), s.w[i].data(), out[i].data(), M, c.features[i], c.K, stream);
      if (c.swiglu)
        DI_CUDA_CHECK(kernels::launch_swiglu(out[0].data(), out[1].data(), M * c.features[0], act.data(), stream));
    }
  };
  // Interleaved: small batch, cuBLASLt, cuBLASLt, small batch.
  Timing sb1 = time_on_stream(stream, 3, 15, small_batch), cb1 = time_on_stream(stream, 3, 15, cublas);
  Timing cb2 = time_on_stream(stream, 0, 15, cublas), sb2 = time_on_stream(stream, 0, 15, small_batch);
  const double sb_us = 1e3 * 0.5 * (sb1.median_ms + sb2.median_ms) / kLaunchesPerRep;
  const double cb_us = 1e3 * 0.5 * (cb1.median_ms + cb2.median_ms) / kLaunchesPerRep;
  const double sb_tbps = weight_bytes / (sb_us * 1e6), cb_tbps = weight_bytes / (cb_us * 1e6);
  std::printf("| %s | %lld | %.1f | %.2f | %.2f | %.1f%% | %.2f | %.2f | %.1f%% | %.2fx |\n", c.name,
              static_cast<long long>(M), weight_bytes / 1e6, sb_us, sb_tbps, 100.0 * sb_tbps / kCopyTBps, cb_us,
              cb_tbps, 100.0 * cb_tbps / kCopyTBps, cb_us / sb_us);
  std::fflush(stdout);
  return {{"case", c.name}, {"M", M}, {"K", c.K}, {"features", c.features}, {"weight_bytes", weight_bytes},
          {"small_batch_us", sb_us}, {"small_batch_tbps", sb_tbps}, {"cublaslt_us", cb_us},
          {"cublaslt_tbps", cb_tbps}, {"small_batch_ms_medians", {sb1.median_ms, sb2.median_ms}},
          {"cublaslt_ms_medians", {cb1.median_ms, cb2.median_ms}}, {"launches_per_rep", kLaunchesPerRep},
          {"weight_sets", sets}};
}

}  // namespace
}  // namespace di::bench

int main(int argc, char** argv) {
  using namespace di;
  using namespace di::bench;
  CLI::App app{"decode-sized linear layers: small-batch kernel against cuBLASLt"};
  std::string json_path, only_layer;
  std::vector<int64_t> rows = {1, 2, 4, 8, 16};
  app.add_option("--json", json_path, "write the report here");
  app.add_option("--layer", only_layer, "only the layers whose name contains this (e.g. 'out_proj')");
  app.add_option("--rows", rows, "the row counts M to run (1 to 16)")->check(CLI::Range(1, 16));
  CLI11_PARSE(app, argc, argv);
  try {
    cudaStream_t stream;
    DI_CUDA_CHECK(cudaStreamCreate(&stream));
    kernels::CublasLtGemm gemm;
    std::mt19937_64 rng(20261130);
    std::printf("| layer | M | weight MB | small-batch us | TB/s | of 4.3 | cuBLASLt us | TB/s | of 4.3 | speed-up |\n");
    std::printf("|---|---|---|---|---|---|---|---|---|---|\n");
    nlohmann::json report = {{"provenance", provenance()}, {"rows", nlohmann::json::array()}};
    int ran = 0;
    for (const Case& c : kCases) {
      if (std::string(c.name).find(only_layer) == std::string::npos) continue;
      for (int64_t M : rows) report["rows"].push_back(run_case(c, M, gemm, stream, rng)), ++ran;
    }
    if (ran == 0) throw std::runtime_error("no layer's name contains '" + only_layer + "'");
    if (!json_path.empty()) std::ofstream(json_path) << report.dump(2) << "\n";
    cudaStreamDestroy(stream);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
  return 0;
}
