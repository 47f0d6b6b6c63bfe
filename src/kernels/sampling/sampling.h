#pragma once
// Token sampling on the GPU: one token per row of logits, greedy or seeded, with the truncations of
// the host reference (kernels/sampling/ref.h): temperature, then top-k, then min-p, then top-p, at
// least one token kept. Usable from host .cpp files.
//
// What the kernel promises, row by row:
//   - temperature 0 (greedy): exactly ref::argmax on the same logits (on their float32 values for
//     bf16 logits): the highest logit, the lowest id on ties;
//   - otherwise: the token is drawn from the reference's kept set (candidates sorted by logit, ties
//     by id; top-k, softmax over the top k, min-p, the smallest prefix whose mass reaches top_p) in
//     proportion to softmax(logits / temperature). The kept set is the reference's up to float32
//     rounding of a probability that lies exactly at a min-p or top-p boundary;
//   - the draw is a pure function of (seed, step, logits, parameters): the same inputs give the same
//     token on every run and at any position in any batch.
// Non-finite logits: a NaN counts as -inf, except at id 0, where it wins as ref::argmax lets it.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <limits>

#include "kernels/sampling/ref.h"

namespace di::sampling {

// The parameters of one row as the kernel reads them. Build it with make_sampling_row(), which
// validates; the kernel cannot report a bad row, so it only guarantees that an unvalidated row
// still yields some token in [0, vocab).
struct SamplingRow {
  float temperature;  // 0: greedy
  int32_t top_k;      // 0 (or >= vocab): off
  float top_p;        // 1: off
  float min_p;        // 0: off
  uint64_t seed;      // with `step`, the key of the row's random draw
  uint64_t step;      // the index of the token being drawn (a request's decode step)
};

// The one way host code is expected to fill a SamplingRow: validate() throws di::Error naming the
// bad field and value before anything reaches the GPU.
inline SamplingRow make_sampling_row(const SamplingParams& params, uint64_t step) {
  validate(params);
  const int64_t top_k = std::min<int64_t>(params.top_k, std::numeric_limits<int32_t>::max());
  return SamplingRow{params.temperature, int32_t(top_k), params.top_p, params.min_p, params.seed, step};
}

struct SampleParams {
  const void* logits = nullptr;  // [rows, vocab], float32 or bf16, row stride = vocab
  bool logits_bf16 = false;
  int32_t rows = 0;
  int32_t vocab = 0;
  const SamplingRow* row_params = nullptr;  // device, [rows]
  int32_t* out_tokens = nullptr;            // device, [rows]
  void* workspace = nullptr;                // caller-owned, sample_workspace_bytes(rows, vocab) bytes
  size_t workspace_bytes = 0;
};

// Bytes of workspace launch_sample needs. Zero for now (a row's blocks, one cluster, share what they
// find on chip); callers still size and pass it so that a version that needs some can come later.
size_t sample_workspace_bytes(int32_t rows, int32_t vocab);

// Samples one token per row on `stream`. Allocates nothing and never synchronises (capturable in a
// CUDA graph). Returns cudaErrorInvalidValue for rows <= 0, vocab <= 0, a null pointer, or a
// workspace smaller than sample_workspace_bytes(), or more rows than a grid of a cluster per row
// holds; otherwise the launch status.
cudaError_t launch_sample(const SampleParams& params, cudaStream_t stream);

}  // namespace di::sampling
