// Decode-sized linear layers of the 4B geometry: the small-batch kernel (one launch per group of
// projections that share an input, kernels/gemm/small_batch_linear.h) against cuBLASLt (one GEMM per
// weight, and the SwiGLU kernel after gate and up). A decode step of M sequences streams each
// weight once, so the figure of merit is the weight bytes over the time, as a fraction of the
// measured copy bandwidth (4.3 TB/s). Each timed repetition runs 20 launches back to back over
// weight sets rotated past the L2, as a decode step runs its layers; the median of 30 repetitions.
// Prints a table; --json writes the report. With --fused-input, at one and two rows (where the engine
// fuses them) each layer applies the op ahead of it on the way in, as a decode step does (the RMS
// norm, the GDN output norm, attention's sigmoid gate), and cuBLASLt runs that op's kernel first.
// --steps-in-flight 4 or 8 sets how many steps of weights each warp of the small-batch kernel keeps
// in flight where it can choose (up to 8 rows, one weight per tile), rather than its own choice.
// --features N,... runs a one-weight layer (or the SwiGLU pair) at other output widths, --in-features
// K at another input width, and --max-blocks caps the resident blocks (9 to 16 rows): how the time
// follows the number of 16-row tiles, the length of each warp's slice of K, and their spread.
// --weight-tile-rows 8 or 16 sets the weight rows a tile holds at any row count but for the SwiGLU pair (8:
// the operands swapped), rather than the kernel's choice; --steps-in-flight then applies to 8 as well.
#include <CLI/CLI.hpp>

#include <cmath>
#include <cstdio>
#include <fstream>
#include <random>

#include "core/bf16.h"
#include "core/cuda.h"
#include "core/error.h"
#include "gpu_timing.h"
#include "hashed_values.h"
#include "kernels/elementwise/elementwise.h"
#include "kernels/gemm/cuda_gemm.h"
#include "kernels/gemm/small_batch_linear.h"
#include "kernels/norm/norm.h"

namespace di::bench {
namespace {

constexpr double kRotateBytes = 200e6;  // four times the L2
constexpr int kLaunchesPerRep = 20;

using Input = kernels::SmallBatchInput;

struct Case {
  const char* name;
  std::vector<int64_t> features;  // one weight [N_i, K] per output
  int64_t K;
  bool swiglu = false;
  Input fused = Input::plain;  // the op ahead of the layer in a decode step
};

// The 4B geometry: hidden 2560, intermediate 9216, GDN 16/32 heads of 128, attention 16/4 of 256.
const std::vector<Case> kCases = {
    {"gdn in_proj (qkv, z, b, a)", {8192, 4096, 32, 32}, 2560, false, Input::rms_norm},
    {"attention q, k, v", {8192, 1024, 1024}, 2560, false, Input::rms_norm},
    {"mlp gate + up, SwiGLU", {9216, 9216}, 2560, true, Input::rms_norm},
    {"mlp down", {2560}, 9216},
    {"gdn out_proj", {2560}, 4096, false, Input::gated_rms_norm},
    {"attention o_proj", {2560}, 4096, false, Input::sigmoid_gate},
    {"lm_head", {248320}, 2560},
};
constexpr int64_t kGdnHeadDim = 128;  // the GDN output norm's group
constexpr int64_t kFusedMaxRows = 2;  // as the engine fuses (CudaOps::fusable)

const char* input_name(Input in) {
  switch (in) {
    case Input::rms_norm: return " (RMS norm fused)";
    case Input::gated_rms_norm: return " (GDN output norm fused)";
    case Input::sigmoid_gate: return " (sigmoid gate fused)";
    default: return "";
  }
}

struct WeightSet {
  std::vector<cuda::DeviceBuffer<uint16_t>> w;
};

nlohmann::json run_case(const Case& c, int64_t M, bool fuse, int steps_in_flight, int weight_tile_rows,
                        int64_t max_blocks, kernels::CublasLtGemm& gemm, cudaStream_t stream, std::mt19937_64& rng) {
  const int tile_rows = !c.swiglu ? weight_tile_rows : 0;
  const Input input = fuse && M <= kFusedMaxRows ? c.fused : Input::plain;
  int64_t weight_elems = 0, out_elems = 0;
  for (int64_t n : c.features) weight_elems += n * c.K, out_elems += M * n;
  const double weight_bytes = 2.0 * double(weight_elems);
  const int sets = int(std::max(1.0, std::ceil(kRotateBytes / weight_bytes)));

  std::uniform_int_distribution<uint32_t> seed_of(0, ~0u);
  const auto random_bits = [&](int64_t n, float scale) { return hashed_bf16(n, scale, seed_of(rng)); };
  std::vector<WeightSet> weights(static_cast<size_t>(sets));
  for (int64_t n : c.features) {
    const auto bits = random_bits(n * c.K, 1.0f / std::sqrt(float(c.K)));
    for (auto& s : weights) s.w.emplace_back(std::span<const uint16_t>(bits));
  }
  const auto x_bits = random_bits(M * c.K, 1.0f);
  cuda::DeviceBuffer<uint16_t> x{std::span<const uint16_t>(x_bits)};
  std::vector<cuda::DeviceBuffer<uint16_t>> out;
  for (int64_t n : c.features) out.emplace_back(size_t(M * n));
  // The op's operands: a gate of x's shape, the norm weight, the rows' partial sums of squares as the
  // residual projection ahead leaves them (consistent with x's values: each part 16 / 3, the mean
  // square of uniform [-1, 1) over 16 features), and where cuBLASLt's side puts the op's output.
  const auto gate_bits = random_bits(M * c.K, 1.0f);
  cuda::DeviceBuffer<uint16_t> gate{std::span<const uint16_t>(gate_bits)}, op_out(size_t(M * c.K));
  const std::vector<float> norm_w(size_t(c.K), 0.05f);
  cuda::DeviceBuffer<float> dnorm_w{std::span<const float>(norm_w)};
  const int64_t parts = kernels::small_batch_sum_sq_parts(c.K);
  const std::vector<float> sums(size_t(M * parts), 16.0f / 3.0f);
  cuda::DeviceBuffer<float> dsums{std::span<const float>(sums)};

  const auto small_batch = [&](int rep) {
    for (int l = 0; l < kLaunchesPerRep; ++l) {
      const WeightSet& s = weights[size_t((rep * kLaunchesPerRep + l) % sets)];
      kernels::SmallBatchLinearParams p{.x = x.data(), .rows = M, .in_features = c.K,
                                        .num_outputs = int(c.features.size()),
                                        .epilogue = c.swiglu ? kernels::SmallBatchEpilogue::swiglu
                                                             : kernels::SmallBatchEpilogue::bf16,
                                        .input = input};
      if (input != Input::plain) {
        p.norm_weight = dnorm_w.data();
        p.gate = gate.data();
        p.group = kGdnHeadDim;
        p.input_sum_sq = dsums.data();
        p.input_sum_sq_parts = parts;
      }
      for (size_t i = 0; i < c.features.size(); ++i)
        p.outputs[i] = {s.w[i].data(), c.swiglu && i == 1 ? nullptr : out[i].data(), c.features[i]};
      if ((M <= 8 && !c.swiglu) || tile_rows == 8) p.steps_in_flight = steps_in_flight;
      p.weight_tile_rows = tile_rows;
      p.max_blocks = max_blocks;
      DI_CUDA_CHECK(kernels::launch_small_batch_linear(p, stream));
    }
  };
  cuda::DeviceBuffer<uint16_t> act(size_t(M * c.features[0]));
  const auto cublas = [&](int rep) {
    for (int l = 0; l < kLaunchesPerRep; ++l) {
      const WeightSet& s = weights[size_t((rep * kLaunchesPerRep + l) % sets)];
      const void* in = x.data();
      if (input != Input::plain) {  // the op's own kernel, then the GEMMs read its output
        in = op_out.data();
        if (input == Input::rms_norm)
          DI_CUDA_CHECK(kernels::launch_rms_norm({.x = x.data(), .weight = dnorm_w.data(), .out = op_out.data(),
                                                  .rows = M, .dim = c.K}, stream));
        else if (input == Input::gated_rms_norm)
          DI_CUDA_CHECK(kernels::launch_gated_rms_norm({.x = x.data(), .z = gate.data(), .weight = dnorm_w.data(),
                                                        .out = op_out.data(), .rows = M * c.K / kGdnHeadDim,
                                                        .dim = kGdnHeadDim}, stream));
        else
          DI_CUDA_CHECK(kernels::launch_sigmoid_gate(x.data(), gate.data(), M * c.K, op_out.data(), stream));
      }
      for (size_t i = 0; i < c.features.size(); ++i)
        gemm.linear(in, s.w[i].data(), out[i].data(), M, c.features[i], c.K, stream);
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
  const std::string name = std::string(c.name) + input_name(input);
  std::printf("| %s | %lld | %.1f | %.2f | %.2f | %.1f%% | %.2f | %.2f | %.1f%% | %.2fx |\n", name.c_str(),
              static_cast<long long>(M), weight_bytes / 1e6, sb_us, sb_tbps, 100.0 * sb_tbps / kCopyTBps, cb_us,
              cb_tbps, 100.0 * cb_tbps / kCopyTBps, cb_us / sb_us);
  std::fflush(stdout);
  return {{"case", name}, {"M", M}, {"max_blocks", max_blocks}, {"weight_tile_rows", tile_rows}, {"K", c.K}, {"features", c.features}, {"weight_bytes", weight_bytes},
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
  bool fuse = false;
  int steps_in_flight = 0, weight_tile_rows = 0;
  std::vector<int64_t> widths;
  int64_t in_features = 0, max_blocks = 0;
  app.add_option("--json", json_path, "write the report here");
  app.add_option("--layer", only_layer, "only the layers whose name contains this (e.g. 'out_proj')");
  app.add_option("--rows", rows, "the row counts M to run (1 to 16)")->delimiter(',')->check(CLI::Range(1, 16));
  app.add_flag("--fused-input", fuse, "at 1 and 2 rows, each layer applies the op ahead of it on the way in");
  app.add_option("--steps-in-flight", steps_in_flight,
                 "weight steps in flight per warp where the kernel may choose (4 or 8; default: its choice)")
      ->check(CLI::IsMember({4, 8}));
  app.add_option("--weight-tile-rows", weight_tile_rows,
                 "weight rows a tile holds, but for the SwiGLU pair (8 or 16; default: the kernel's choice)")
      ->check(CLI::IsMember({8, 16}));
  app.add_option("--features", widths,
                 "run the chosen one-weight layers (or the SwiGLU pair) at these output widths instead")
      ->delimiter(',')
      ->check(CLI::Range(int64_t(1), int64_t(1) << 20));
  app.add_option("--in-features", in_features, "run the chosen layers at this input width K instead (a multiple of 8)")
      ->check(CLI::Range(int64_t(8), int64_t(1) << 20));
  app.add_option("--max-blocks", max_blocks, "at most this many resident blocks from 9 rows (0: as many as fit)")
      ->check(CLI::Range(int64_t(0), int64_t(1) << 20));
  CLI11_PARSE(app, argc, argv);
  try {
    cudaStream_t stream;
    DI_CUDA_CHECK(cudaStreamCreate(&stream));
    kernels::CublasLtGemm gemm;
    std::mt19937_64 rng(20261130);
    if (steps_in_flight != 0) std::printf("(small batch: %d steps in flight per warp up to 8 rows)\n", steps_in_flight);
    if (weight_tile_rows != 0) std::printf("(small batch: %d-row weight tiles)\n", weight_tile_rows);
    std::printf("| layer | M | weight MB | small-batch us | TB/s | of 4.3 | cuBLASLt us | TB/s | of 4.3 | speed-up |\n");
    std::printf("|---|---|---|---|---|---|---|---|---|---|\n");
    nlohmann::json report = {{"provenance", provenance()},
                             {"steps_in_flight", steps_in_flight == 0 ? nlohmann::json("the kernel's choice")
                                                                      : nlohmann::json(steps_in_flight)},
                             {"weight_tile_rows", weight_tile_rows == 0 ? nlohmann::json("the kernel's choice")
                                                                        : nlohmann::json(weight_tile_rows)},
                             {"rows", nlohmann::json::array()}};
    int ran = 0;
    for (const Case& c : kCases) {
      if (std::string(c.name).find(only_layer) == std::string::npos) continue;
      std::vector<Case> variants = {c};
      if (in_features % 8 != 0) throw std::runtime_error("--in-features takes a multiple of 8");
      if (in_features > 0) variants[0].K = in_features;
      if (!widths.empty()) {
        if (c.features.size() != 1 && !c.swiglu)
          throw std::runtime_error(std::string("--features takes one-weight layers or the SwiGLU pair, not '") +
                                   c.name + "' (choose with --layer)");
        const Case base = variants[0];
        variants.clear();
        for (int64_t n : widths) {
          Case v = base;
          for (auto& f : v.features) f = n;
          variants.push_back(v);
        }
      }
      for (const Case& v : variants)
        for (int64_t M : rows)
          report["rows"].push_back(run_case(v, M, fuse, steps_in_flight, weight_tile_rows, max_blocks, gemm, stream, rng)), ++ran;
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
