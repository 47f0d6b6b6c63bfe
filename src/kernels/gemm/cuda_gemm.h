#pragma once
// GEMMs through cuBLASLt: bf16 operands, float32 accumulation, bf16 result rounded once (the same
// arithmetic as a bf16 torch.nn.functional.linear). The algorithm for each (M, N, K) is chosen once
// and reused (GemmAlgoChoice); the workspace is allocated once.
#include <cublasLt.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <map>
#include <string>
#include <tuple>
#include <vector>

namespace di::kernels {

// How CublasLtGemm picks the algorithm of a shape.
enum class GemmAlgoChoice {
  heuristic,  // the first of cuBLASLt's heuristic
  // From kMeasuredMinRows rows: the fastest of the heuristic's candidates that sum K in one pass, as
  // its first does, timed once per (N, K, power-of-two bucket of M) on the first call's own operands.
  // Every such algorithm gave the same bits as every other (docs/benchmarks/decode.md), so this
  // changes the time, not the result; where the first splits K, or inside a CUDA graph capture (no
  // timing there), the heuristic's first runs.
  measured,
};

class CublasLtGemm {
 public:
  // Below this many rows a GEMM streams its weight, whose time a single timed call misjudges (the
  // weight sits in the L2 after the first launch); from here it is compute-bound.
  static constexpr int64_t kMeasuredMinRows = 512;

  explicit CublasLtGemm(size_t workspace_bytes = size_t(32) << 20,
                        GemmAlgoChoice choice = GemmAlgoChoice::measured);
  ~CublasLtGemm();
  CublasLtGemm(const CublasLtGemm&) = delete;
  CublasLtGemm& operator=(const CublasLtGemm&) = delete;

  // y [M, N] = x [M, K] · w [N, K]^T, all row-major bf16 (a linear layer with weight w).
  void linear(const void* x, const void* w, void* y, int64_t M, int64_t N, int64_t K, cudaStream_t stream);
  // The same with y float32, not rounded: a partial sum that other ranks' are added to first.
  void linear_f32_out(const void* x, const void* w, float* y, int64_t M, int64_t N, int64_t K, cudaStream_t stream);

  size_t workspace_bytes() const { return workspace_bytes_; }
  size_t cached_plans() const { return plans_.size(); }
  GemmAlgoChoice choice() const { return choice_; }
  // Shapes (N, K, bucket of M) whose algorithm was chosen by timing, and of those, how many chose
  // another than the heuristic's first.
  size_t measured_shapes() const { return measured_.size(); }
  size_t measured_changes() const { return measured_changes_; }

  // The algorithms cuBLASLt offers for a shape, best guess first (the first is what linear() runs),
  // at most max_count of them; for benchmarks that time them against each other.
  struct Candidate {
    cublasLtMatmulAlgo_t algo{};
    size_t workspace_bytes = 0;
    float waves = 0;  // cuBLASLt's estimate of the waves of CTAs
  };
  std::vector<Candidate> candidates(int64_t M, int64_t N, int64_t K, bool f32_out, int max_count);
  // linear() (or linear_f32_out()) with the given algorithm rather than the chosen one.
  void run_candidate(const Candidate& c, const void* x, const void* w, void* y, int64_t M, int64_t N, int64_t K,
                     bool f32_out, cudaStream_t stream);
  // "algo 21 tile 20 stages 8 split-k 1 ..." from the algorithm's configuration attributes.
  static std::string describe(const cublasLtMatmulAlgo_t& algo);

 private:
  struct Plan {
    cublasLtMatmulDesc_t op = nullptr;
    cublasLtMatrixLayout_t w = nullptr, x = nullptr, y = nullptr;
    cublasLtMatmulAlgo_t algo{};      // the heuristic's first
    cublasLtMatmulAlgo_t chosen{};    // what runs, once `resolved`
    bool resolved = false;
  };
  using Key = std::tuple<int64_t, int64_t, int64_t, bool>;  // rows (or their bucket), N, K, f32 output
  Plan& plan_for(int64_t M, int64_t N, int64_t K, bool f32_out);
  std::vector<cublasLtMatmulHeuristicResult_t> heuristic(const Plan& p, int max_count) const;
  const cublasLtMatmulAlgo_t& algo_for(Plan& p, const void* x, const void* w, void* y, int64_t M, int64_t N,
                                       int64_t K, bool f32_out, cudaStream_t stream);
  cublasLtMatmulAlgo_t fastest(const Plan& p, const void* x, const void* w, void* y, cudaStream_t stream);
  void matmul(const Plan& p, const cublasLtMatmulAlgo_t& algo, const void* x, const void* w, void* y,
              cudaStream_t stream, const char* what);
  void run(const void* x, const void* w, void* y, int64_t M, int64_t N, int64_t K, bool f32_out, cudaStream_t stream);

  cublasLtHandle_t handle_ = nullptr;
  void* workspace_ = nullptr;
  size_t workspace_bytes_ = 0;
  GemmAlgoChoice choice_ = GemmAlgoChoice::measured;
  std::map<Key, Plan> plans_;
  std::map<Key, cublasLtMatmulAlgo_t> measured_;  // by bucket of M
  size_t measured_changes_ = 0;
};

}  // namespace di::kernels
