#pragma once
// Linear layers of a few rows (decode steps): y [M, N] = x [M, K] · W [N, K]^T for M <= 16, bf16
// operands and float32 accumulation, as the cuBLASLt path computes them.
//
// With so few rows the step is a stream of the weights, and cuBLASLt's GEMM kernels leave much of
// the bandwidth unused. Here each block streams 16 weight rows across 8 warps (each a slice of K),
// on mma.sync with the rows as the 16-row operand and the inputs as one or two 8-column operands, so
// the tensor cores do the arithmetic and the loads are 16-byte vectors. From 9 rows the blocks stay
// resident and take tile after tile, each tile's first weights loaded while the one before is stored.
// From 3 rows a narrow launch of one weight (a 2,560-wide projection) takes tiles of 8 weight rows
// with the operands swapped, the input rows the 16-row operand, so that twice the tiles spread over
// the SMs.
//
// One launch serves up to four weights that read the same input (a GDN layer's four input
// projections, an attention layer's three), or the MLP's gate and up projections with SwiGLU applied
// on the way out. The op ahead of a projection (a norm, a gate) can be applied to its input on the
// way in, and the residual add on the way out, so that the small kernels between the projections of
// a decode step go. Each output's value is a fixed sum over K in a fixed order: it does not depend
// on M nor on the other rows, so a sequence's result is the same alone and batched.
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <string>

namespace di::kernels {

enum class SmallBatchEpilogue {
  bf16,    // each output bf16 [M, N_i], rounded once (plus `residual`, when given: bf16(bf16(y) + r))
  f32,     // each output float32 [M, N_i], not rounded (a partial sum that other ranks' are added to)
  swiglu,  // two weights (gate, up) of one N: outputs[0].out = bf16(silu(bf16(gate)) * bf16(up)),
           // rounded where the separate GEMMs and the SwiGLU kernel round
};

// The row-wise op ahead of the projection, applied to x on the way in (each block recomputes what it
// needs of it from x, which the L2 holds): the same bits as that op's own kernel (kernels/norm,
// kernels/elementwise) followed by the plain projection.
enum class SmallBatchInput {
  plain,           // x
  rms_norm,        // bf16(x * s_m * (1 + w_k)), s_m = 1 / rms(x_m) over K (zero-centred RMSNorm),
                   // from the sums of squares the projection that wrote x left (out_sum_sq)
  gated_rms_norm,  // bf16(bf16(w_j * bf16(x * s_mh)) * silu(gate)), s_mh over each group of
                   // `group` features (a value head), j the index within the group
  sigmoid_gate,    // bf16(x * bf16(sigmoid(gate)))
};

struct SmallBatchLinearParams {
  static constexpr int kMaxRows = 16;
  static constexpr int kMaxOutputs = 4;
  static constexpr int kMaxNormScales = 1024;  // rows x groups of gated_rms_norm
  struct Output {
    const void* weight = nullptr;  // bf16 [features, K], row-major
    void* out = nullptr;           // [M, features] (unused for the up weight of swiglu)
    int64_t features = 0;          // N_i
  };
  const void* x = nullptr;  // bf16 [M, K]
  int64_t rows = 0;         // M, 1..kMaxRows
  int64_t in_features = 0;  // K, a multiple of 8 (16-byte rows)
  Output outputs[kMaxOutputs];
  int num_outputs = 0;
  SmallBatchEpilogue epilogue = SmallBatchEpilogue::bf16;

  SmallBatchInput input = SmallBatchInput::plain;
  const float* norm_weight = nullptr;  // rms_norm: [K]; gated_rms_norm: [group]
  const void* gate = nullptr;          // gated_rms_norm, sigmoid_gate: bf16 [M, K]
  int64_t group = 0;                   // gated_rms_norm: a multiple of 8 that divides K
  float eps = 1e-6f;
  // rms_norm: each row's sum of squares as partial sums [M, input_sum_sq_parts], added in order.
  const float* input_sum_sq = nullptr;
  int64_t input_sum_sq_parts = 0;

  // bf16 epilogue with one output: bf16 [M, N] added to the rounded result (the residual stream).
  const void* residual = nullptr;
  // With a residual, optional: float32 [M, ceil(N / 16)], each output row's sum of squares over
  // each 16 features, for the projection that normalises this output next (its input_sum_sq). Every
  // block computes the norm's factor from these few partial sums rather than from the whole row.
  float* out_sum_sq = nullptr;

  // Steps of weights (32 of K each) a warp keeps in flight, where each block takes one tile of one
  // weight's rows (up to 8 rows, not swiglu) or in 8-row weight tiles: 4 or 8, or 0 for the kernel's
  // choice (8 for launches of at most kNarrowTiles tiles over a K of at most 4,096 up to 8 rows, else
  // 4). The same bits either way: a bench's way to compare the two on any layer.
  int steps_in_flight = 0;

  // Weight rows per tile: 16 (the weights the mma's 16-row operand, the input rows one or two
  // 8-column ones), 8 (the operands swapped: the input rows the 16-row operand, twice the tiles; not
  // swiglu, no sums of squares), or 0 for the kernel's choice (8 for one weight of at most
  // kNarrowTiles 16-row tiles from 3 rows). The same bits either way.
  int weight_tile_rows = 0;

  // Where the blocks are resident (9 to 16 rows): at most this many (0: as many as the device holds
  // at once). Each takes every gridDim-th tile of 16 rows, so a small cap gives each block many (a
  // test's way to reach that). Ignored where each block takes one tile.
  int64_t max_blocks = 0;
};

// Launches of at most this many 16-row tiles (the 2,560-wide projections: 160 for 132 SMs) are
// narrow: at one and two rows their warps keep more steps in flight, from 3 rows their tiles are 8 rows.
constexpr int64_t kNarrowTiles = 192;

// Partial sums of squares per row that a residual projection of N features writes.
inline int64_t small_batch_sum_sq_parts(int64_t features) { return (features + 15) / 16; }

// The shared memory a launch stages its input rows in (an input op's rows), at most
// kMaxSmallBatchStagingBytes.
constexpr size_t kMaxSmallBatchStagingBytes = 96 * 1024;
inline size_t small_batch_staging_bytes(const SmallBatchLinearParams& p) {
  if (p.input == SmallBatchInput::plain) return 0;
  return size_t(p.rows) * size_t(p.in_features / 8 + 1) * 16;  // a row of 16-byte chunks and one of padding
}

// Why the kernel cannot run these parameters, or "" when it can (the caller then uses the general
// GEMM, which serves every shape).
std::string small_batch_linear_error(const SmallBatchLinearParams& p);
cudaError_t launch_small_batch_linear(const SmallBatchLinearParams& p, cudaStream_t stream);

}  // namespace di::kernels
