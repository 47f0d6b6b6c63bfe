#pragma once
// GEMMs through cuBLASLt: bf16 operands, float32 accumulation, bf16 result rounded once (the same
// arithmetic as a bf16 torch.nn.functional.linear). The algorithm for each (M, N, K) is chosen once,
// from cuBLASLt's heuristic, and reused; the workspace is allocated once.
#include <cublasLt.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <map>
#include <string>
#include <tuple>
#include <vector>

namespace di::kernels {

class CublasLtGemm {
 public:
  explicit CublasLtGemm(size_t workspace_bytes = size_t(32) << 20);
  ~CublasLtGemm();
  CublasLtGemm(const CublasLtGemm&) = delete;
  CublasLtGemm& operator=(const CublasLtGemm&) = delete;

  // y [M, N] = x [M, K] · w [N, K]^T, all row-major bf16 (a linear layer with weight w).
  void linear(const void* x, const void* w, void* y, int64_t M, int64_t N, int64_t K, cudaStream_t stream);
  // The same with y float32, not rounded: a partial sum that other ranks' are added to first.
  void linear_f32_out(const void* x, const void* w, float* y, int64_t M, int64_t N, int64_t K, cudaStream_t stream);

  size_t workspace_bytes() const { return workspace_bytes_; }
  size_t cached_plans() const { return plans_.size(); }

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
    cublasLtMatmulAlgo_t algo{};
  };
  const Plan& plan_for(int64_t M, int64_t N, int64_t K, bool f32_out);
  std::vector<cublasLtMatmulHeuristicResult_t> heuristic(const Plan& p, int max_count) const;
  void run(const void* x, const void* w, void* y, int64_t M, int64_t N, int64_t K, bool f32_out, cudaStream_t stream);

  cublasLtHandle_t handle_ = nullptr;
  void* workspace_ = nullptr;
  size_t workspace_bytes_ = 0;
  std::map<std::tuple<int64_t, int64_t, int64_t, bool>, Plan> plans_;
};

}  // namespace di::kernels
