// cuBLASLt's algorithms for the 4B geometry's GEMMs, timed against each other: for each shape, the
// candidates its heuristic offers (best guess first: the one CublasLtGemm runs), each timed the way
// the engine runs it. Decode-sized rows (M <= 64) are weight streams: 20 launches a repetition over
// weight sets rotated past the L2, reported as a fraction of the measured copy bandwidth; larger M
// are compute: 3 launches a repetition, reported against the measured bf16 tensor rate. Two passes,
// the candidates in order and then reversed, the mean of the two medians of 15 repetitions. Each
// candidate's output is compared bit for bit with the first's (a different algorithm may sum in a
// different order). Prints a table per shape and the best against the first; --json writes it all.
#include <CLI/CLI.hpp>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <random>

#include "core/bf16.h"
#include "core/cuda.h"
#include "core/error.h"
#include "gpu_timing.h"
#include "hashed_values.h"
#include "kernels/gemm/cuda_gemm.h"

namespace di::bench {
namespace {

constexpr double kRotateBytes = 200e6;  // four times the L2
constexpr int64_t kStreamRows = 64;     // up to here a GEMM is a weight stream

struct Shape {
  std::string name;
  int64_t N, K;
};

// The 4B geometry: hidden 2560, intermediate 9216, GDN 16/32 heads of 128 (in_proj: q k v 8192,
// z 4096, b and a 32 each), attention 16/4 heads of 256 (q with its gate 8192, k and v 1024 each).
const std::vector<Shape> kShapes = {
    {"gdn in_proj qkv", 8192, 2560}, {"gdn in_proj z", 4096, 2560},  {"gdn in_proj b, a", 32, 2560},
    {"attention q + gate", 8192, 2560}, {"attention k, v", 1024, 2560}, {"mlp gate, up", 9216, 2560},
    {"mlp down", 2560, 9216},        {"gdn out_proj, o_proj", 2560, 4096}, {"lm_head", 248320, 2560},
};

std::vector<uint16_t> random_bits(int64_t n, float scale, std::mt19937_64& rng) {
  return hashed_bf16(n, scale, static_cast<uint32_t>(rng()));
}

nlohmann::json run_shape(const Shape& s, int64_t M, int max_candidates, kernels::CublasLtGemm& gemm,
                         cudaStream_t stream, std::mt19937_64& rng) {
  const bool stream_bound = M <= kStreamRows;
  const double weight_bytes = 2.0 * double(s.N) * double(s.K), flops = 2.0 * double(M) * double(s.N) * double(s.K);
  const int sets = int(std::max(1.0, std::ceil(kRotateBytes / weight_bytes)));
  const int launches = stream_bound ? 20 : 3;
  const auto w_bits = random_bits(s.N * s.K, 1.0f / std::sqrt(float(s.K)), rng);
  std::vector<cuda::DeviceBuffer<uint16_t>> w;
  for (int i = 0; i < sets; ++i) w.emplace_back(std::span<const uint16_t>(w_bits));
  const auto x_bits = random_bits(M * s.K, 1.0f, rng);
  cuda::DeviceBuffer<uint16_t> x{std::span<const uint16_t>(x_bits)}, y(size_t(M * s.N));

  const std::vector<kernels::CublasLtGemm::Candidate> cands = gemm.candidates(M, s.N, s.K, false, max_candidates);
  if (cands.empty()) throw std::runtime_error("cuBLASLt offers no algorithm for " + s.name);
  std::vector<uint16_t> first;
  std::vector<int64_t> differing(cands.size(), 0);
  for (size_t c = 0; c < cands.size(); ++c) {
    y.fill_bytes(0xFF);  // NaN: an output a candidate leaves unwritten counts as differing
    gemm.run_candidate(cands[c], x.data(), w[0].data(), y.data(), M, s.N, s.K, false, stream);
    DI_CUDA_CHECK(cudaStreamSynchronize(stream));
    std::vector<uint16_t> out = y.download();
    if (c == 0) first = std::move(out);
    else
      for (size_t i = 0; i < out.size(); ++i) differing[c] += out[i] != first[i];
  }
  const auto timed = [&](size_t c) {
    return time_on_stream(stream, 2, 15, [&](int rep) {
      for (int l = 0; l < launches; ++l)
        gemm.run_candidate(cands[c], x.data(), w[size_t((rep * launches + l) % sets)].data(), y.data(), M, s.N, s.K,
                           false, stream);
    });
  };
  std::vector<double> pass1(cands.size()), pass2(cands.size());
  for (size_t c = 0; c < cands.size(); ++c) pass1[c] = timed(c).median_ms;
  for (size_t c = cands.size(); c-- > 0;) pass2[c] = timed(c).median_ms;

  std::printf("\n%s, M=%lld N=%lld K=%lld (%s)\n", s.name.c_str(), static_cast<long long>(M),
              static_cast<long long>(s.N), static_cast<long long>(s.K),
              stream_bound ? "weight stream: of 4.3 TB/s" : "compute: of 784 TFLOP/s");
  std::printf("| # | us | of the ceiling | against #0 | differing outputs | waves | workspace | configuration |\n");
  std::printf("|---|---|---|---|---|---|---|---|\n");
  nlohmann::json rows = nlohmann::json::array();
  size_t best = 0;
  std::vector<double> us(cands.size());
  for (size_t c = 0; c < cands.size(); ++c) {
    us[c] = 1e3 * 0.5 * (pass1[c] + pass2[c]) / launches;
    if (us[c] < us[best]) best = c;
  }
  for (size_t c = 0; c < cands.size(); ++c) {
    const double frac = stream_bound ? weight_bytes / (us[c] * 1e6) / kCopyTBps : flops / (us[c] * 1e6) / kBf16TensorTflops;
    const std::string config = kernels::CublasLtGemm::describe(cands[c].algo);
    std::printf("| %zu%s | %.2f | %.1f%% | %.3f | %lld | %.2f | %zu | %s |\n", c, c == best ? " (best)" : "", us[c],
                100.0 * frac, us[c] / us[0], static_cast<long long>(differing[c]), cands[c].waves,
                cands[c].workspace_bytes, config.c_str());
    rows.push_back({{"index", c}, {"us", us[c]}, {"fraction_of_ceiling", frac}, {"against_first", us[c] / us[0]},
                    {"pass_medians_ms", {pass1[c], pass2[c]}}, {"differing_outputs", differing[c]},
                    {"waves", cands[c].waves}, {"workspace_bytes", cands[c].workspace_bytes}, {"configuration", config}});
  }
  std::printf("best: #%zu at %.3f of #0's time\n", best, us[best] / us[0]);
  std::fflush(stdout);
  return {{"shape", s.name}, {"M", M}, {"N", s.N}, {"K", s.K}, {"launches_per_rep", launches}, {"weight_sets", sets},
          {"ceiling", stream_bound ? "copy bandwidth 4.3 TB/s" : "bf16 tensor rate 784 TFLOP/s"},
          {"candidates", rows}, {"best", best}, {"best_against_first", us[best] / us[0]}};
}

}  // namespace
}  // namespace di::bench

int main(int argc, char** argv) {
  using namespace di;
  using namespace di::bench;
  CLI::App app{"cuBLASLt's algorithms for the 4B geometry's GEMMs, timed against each other"};
  std::string json_path, only;
  std::vector<int64_t> rows = {1, 16, 64, 1024, 8192};
  int max_candidates = 24;
  app.add_option("--json", json_path, "write the report here");
  app.add_option("--shape", only, "only the shapes whose name contains this (e.g. 'down')");
  app.add_option("--rows", rows, "the row counts M to run")->delimiter(',')->check(CLI::Range(int64_t(1), int64_t(65536)));
  app.add_option("--candidates", max_candidates, "at most this many of the heuristic's algorithms a shape")
      ->check(CLI::Range(1, 256));
  CLI11_PARSE(app, argc, argv);
  try {
    cudaStream_t stream;
    DI_CUDA_CHECK(cudaStreamCreate(&stream));
    kernels::CublasLtGemm gemm;
    std::mt19937_64 rng(20261202);
    nlohmann::json report = {{"provenance", provenance()}, {"cublaslt_version", cublasLtGetVersion()},
                             {"max_candidates", max_candidates}, {"shapes", nlohmann::json::array()}};
    std::vector<std::string> summary;
    for (const Shape& s : kShapes) {
      if (s.name.find(only) == std::string::npos) continue;
      for (int64_t M : rows) {
        if (s.N > 65536 && M > kStreamRows) continue;  // the engine runs the lm_head on the last tokens only
        nlohmann::json r = run_shape(s, M, max_candidates, gemm, stream, rng);
        const auto& b = r["candidates"][r["best"].get<size_t>()];
        summary.push_back(fmt::format("| {} | {} | {:.2f} | {:.2f} | {:.3f} | {} | {} |", s.name, M,
                                      r["candidates"][0]["us"].get<double>(), b["us"].get<double>(),
                                      r["best_against_first"].get<double>(), b["differing_outputs"].get<int64_t>(),
                                      b["configuration"].get<std::string>()));
        report["shapes"].push_back(std::move(r));
      }
    }
    if (summary.empty()) throw std::runtime_error("no shape's name contains '" + only + "'");
    std::printf("\n| shape | M | #0 us | best us | best / #0 | differing outputs | best's configuration |\n");
    std::printf("|---|---|---|---|---|---|---|\n");
    for (const auto& line : summary) std::printf("%s\n", line.c_str());
    if (!json_path.empty()) std::ofstream(json_path) << report.dump(2) << "\n";
    cudaStreamDestroy(stream);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
  return 0;
}
