#include "kernels/gemm/cuda_gemm.h"

#include <fmt/format.h>

#include <algorithm>

#include "core/cuda.h"
#include "core/error.h"

namespace di::kernels {

namespace {
void check_cublas(cublasStatus_t status, const char* what) {
  if (status != CUBLAS_STATUS_SUCCESS) fail("cuBLASLt: {} failed: {} ({})", what, cublasLtGetStatusString(status),
                                            cublasLtGetStatusName(status));
}
}  // namespace

CublasLtGemm::CublasLtGemm(size_t workspace_bytes) : workspace_bytes_(workspace_bytes) {
  check_cublas(cublasLtCreate(&handle_), "cublasLtCreate");
  if (workspace_bytes_ > 0) DI_CUDA_CHECK(cudaMalloc(&workspace_, workspace_bytes_));
}

CublasLtGemm::~CublasLtGemm() {
  for (auto& [shape, p] : plans_) {
    cublasLtMatrixLayoutDestroy(p.w);
    cublasLtMatrixLayoutDestroy(p.x);
    cublasLtMatrixLayoutDestroy(p.y);
    cublasLtMatmulDescDestroy(p.op);
  }
  if (workspace_) cudaFree(workspace_);
  if (handle_) cublasLtDestroy(handle_);
}

// cuBLASLt is column-major. Row-major y [M, N] is column-major y^T [N, M], so we compute
// y^T = w · x^T: A = w (stored as column-major [K, N], used transposed), B = x^T (column-major
// [K, M]), C = D = y^T (column-major [N, M]).
const CublasLtGemm::Plan& CublasLtGemm::plan_for(int64_t M, int64_t N, int64_t K, bool f32_out) {
  const auto key = std::make_tuple(M, N, K, f32_out);
  if (auto it = plans_.find(key); it != plans_.end()) return it->second;
  Plan p;
  check_cublas(cublasLtMatmulDescCreate(&p.op, CUBLAS_COMPUTE_32F, CUDA_R_32F), "matmul descriptor");
  const cublasOperation_t transpose = CUBLAS_OP_T, keep = CUBLAS_OP_N;
  check_cublas(cublasLtMatmulDescSetAttribute(p.op, CUBLASLT_MATMUL_DESC_TRANSA, &transpose, sizeof(transpose)),
               "TRANSA");
  check_cublas(cublasLtMatmulDescSetAttribute(p.op, CUBLASLT_MATMUL_DESC_TRANSB, &keep, sizeof(keep)), "TRANSB");
  check_cublas(cublasLtMatrixLayoutCreate(&p.w, CUDA_R_16BF, uint64_t(K), uint64_t(N), K), "weight layout");
  check_cublas(cublasLtMatrixLayoutCreate(&p.x, CUDA_R_16BF, uint64_t(K), uint64_t(M), K), "input layout");
  check_cublas(cublasLtMatrixLayoutCreate(&p.y, f32_out ? CUDA_R_32F : CUDA_R_16BF, uint64_t(N), uint64_t(M), N),
               "output layout");

  const std::vector<cublasLtMatmulHeuristicResult_t> results = heuristic(p, 1);
  if (results.empty())
    fail("cuBLASLt has no algorithm for a bf16 GEMM of M={} N={} K={} ({} output)", M, N, K, f32_out ? "f32" : "bf16");
  p.algo = results[0].algo;
  return plans_.emplace(key, p).first->second;
}

std::vector<cublasLtMatmulHeuristicResult_t> CublasLtGemm::heuristic(const Plan& p, int max_count) const {
  cublasLtMatmulPreference_t pref = nullptr;
  check_cublas(cublasLtMatmulPreferenceCreate(&pref), "preference");
  const cublasStatus_t set = cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                                                  &workspace_bytes_, sizeof(workspace_bytes_));
  std::vector<cublasLtMatmulHeuristicResult_t> results(static_cast<size_t>(std::max(max_count, 1)));
  int found = 0;
  const cublasStatus_t status =
      set != CUBLAS_STATUS_SUCCESS
          ? set
          : cublasLtMatmulAlgoGetHeuristic(handle_, p.op, p.w, p.x, p.y, p.y, pref, int(results.size()), results.data(),
                                           &found);
  cublasLtMatmulPreferenceDestroy(pref);
  check_cublas(status, "algorithm heuristic");
  results.resize(static_cast<size_t>(found));
  return results;
}

std::vector<CublasLtGemm::Candidate> CublasLtGemm::candidates(int64_t M, int64_t N, int64_t K, bool f32_out,
                                                              int max_count) {
  DI_CHECK(M > 0 && N > 0 && K > 0 && max_count > 0, "candidates: invalid request M={} N={} K={} count={}", M, N, K,
           max_count);
  std::vector<Candidate> out;
  for (const auto& r : heuristic(plan_for(M, N, K, f32_out), max_count))
    if (r.state == CUBLAS_STATUS_SUCCESS) out.push_back({r.algo, r.workspaceSize, r.wavesCount});
  return out;
}

void CublasLtGemm::run_candidate(const Candidate& c, const void* x, const void* w, void* y, int64_t M, int64_t N,
                                 int64_t K, bool f32_out, cudaStream_t stream) {
  DI_CHECK(c.workspace_bytes <= workspace_bytes_, "candidate needs {} bytes of workspace, {} allocated",
           c.workspace_bytes, workspace_bytes_);
  const Plan& p = plan_for(M, N, K, f32_out);
  const float alpha = 1.0f, beta = 0.0f;
  check_cublas(cublasLtMatmul(handle_, p.op, &alpha, w, p.w, x, p.x, &beta, y, p.y, y, p.y, &c.algo, workspace_,
                              workspace_bytes_, stream),
               "bf16 linear (a chosen algorithm)");
}

std::string CublasLtGemm::describe(const cublasLtMatmulAlgo_t& algo) {
  const auto get = [&](cublasLtMatmulAlgoConfigAttributes_t attr, auto value) {
    size_t written = 0;
    cublasLtMatmulAlgoConfigGetAttribute(&algo, attr, &value, sizeof(value), &written);
    return static_cast<int64_t>(value);
  };
  return fmt::format("algo {} tile {} stages {} split-k {} reduction {} swizzle {} custom {} inner {} cluster {}",
                     get(CUBLASLT_ALGO_CONFIG_ID, int32_t{0}), get(CUBLASLT_ALGO_CONFIG_TILE_ID, uint32_t{0}),
                     get(CUBLASLT_ALGO_CONFIG_STAGES_ID, uint32_t{0}), get(CUBLASLT_ALGO_CONFIG_SPLITK_NUM, int32_t{0}),
                     get(CUBLASLT_ALGO_CONFIG_REDUCTION_SCHEME, uint32_t{0}),
                     get(CUBLASLT_ALGO_CONFIG_CTA_SWIZZLING, uint32_t{0}),
                     get(CUBLASLT_ALGO_CONFIG_CUSTOM_OPTION, uint32_t{0}),
                     get(CUBLASLT_ALGO_CONFIG_INNER_SHAPE_ID, uint16_t{0}),
                     get(CUBLASLT_ALGO_CONFIG_CLUSTER_SHAPE_ID, uint16_t{0}));
}

void CublasLtGemm::linear(const void* x, const void* w, void* y, int64_t M, int64_t N, int64_t K, cudaStream_t stream) {
  run(x, w, y, M, N, K, /*f32_out=*/false, stream);
}

void CublasLtGemm::linear_f32_out(const void* x, const void* w, float* y, int64_t M, int64_t N, int64_t K,
                                  cudaStream_t stream) {
  run(x, w, y, M, N, K, /*f32_out=*/true, stream);
}

void CublasLtGemm::run(const void* x, const void* w, void* y, int64_t M, int64_t N, int64_t K, bool f32_out,
                       cudaStream_t stream) {
  DI_CHECK(M >= 0 && N > 0 && K > 0, "linear: invalid GEMM shape M={} N={} K={}", M, N, K);
  if (M == 0) return;
  const Plan& p = plan_for(M, N, K, f32_out);
  const float alpha = 1.0f, beta = 0.0f;
  check_cublas(cublasLtMatmul(handle_, p.op, &alpha, w, p.w, x, p.x, &beta, y, p.y, y, p.y, &p.algo, workspace_,
                              workspace_bytes_, stream),
               f32_out ? "bf16 linear (f32 out)" : "bf16 linear");
}

}  // namespace di::kernels
