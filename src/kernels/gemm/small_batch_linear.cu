#include <algorithm>
#include <type_traits>

#include "kernels/cuda_common.cuh"
#include "kernels/gemm/small_batch_linear.h"
#include "kernels/norm/norm_rows.cuh"

namespace di::kernels {

namespace {

constexpr int kWarps = 8;         // each takes a slice of K
constexpr int kTileRows = 16;     // weight rows per block: the 16-row operand of mma.m16n8k16
constexpr int kStepK = 32;        // K elements per warp step: one 16-byte load per thread and row
constexpr int kFragment = 4;      // accumulator floats per thread (16 x 8 over 32 threads)

// 16 bytes of weights, read once and never written while the engine runs: the non-coherent path,
// without L1 allocation, so the inputs (read by every block) stay there.
__device__ __forceinline__ uint4 load_stream(const void* p) {
  uint4 v;
  // Not volatile, so that it schedules freely in the step loop.
  asm("ld.global.nc.L1::no_allocate.v4.u32 {%0, %1, %2, %3}, [%4];\n"
      : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
      : "l"(p));
  return v;
}

// The same 16 bytes, issued before griddepcontrol.wait: ptxas moves non-coherent loads past the wait
// (even volatile, with a memory clobber), coherent ones it leaves where they are
// (docs/benchmarks/decode.md). The weights never change, so the coherent path reads the same bits.
__device__ __forceinline__ uint4 load_stream_ahead_of_wait(const void* p) {
  uint4 v;
  asm volatile("ld.global.L1::no_allocate.v4.u32 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
               : "l"(p));
  return v;
}

// Which of the two loads a step's weights take.
using AheadOfWait = std::true_type;
using InStepLoop = std::false_type;
template <typename When>
__device__ __forceinline__ uint4 load_weights16(const void* p) {
  if constexpr (When::value)
    return load_stream_ahead_of_wait(p);
  else
    return load_stream(p);
}

__device__ __forceinline__ void mma_bf16(float (&c)[kFragment], uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3,
                                         uint32_t b0, uint32_t b1) {
  asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
      "{%0, %1, %2, %3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}

// One warp step over 32 columns of K. Thread (g = lane / 4, q = lane % 4) holds 8 consecutive k,
// [8q, 8q + 8), of weight rows g and g + 8 and of input row g. A dot product does not care which
// physical k sits in which of the mma's k slots as long as the weight and the input agree, so the
// two mmas take them in this order: the first k [8q, 8q + 4), the second [8q + 4, 8q + 8), each
// into the thread's slots (2q, 2q + 1, 2q + 8, 2q + 9) of the m16n8k16 fragments.
__device__ __forceinline__ void mma_step(float (&c)[kFragment], const uint4& row_g, const uint4& row_g8,
                                         const uint4& x) {
  mma_bf16(c, row_g.x, row_g8.x, row_g.y, row_g8.y, x.x, x.y);
  mma_bf16(c, row_g.z, row_g8.z, row_g.w, row_g8.w, x.z, x.w);
}

// The per-row (rms_norm) or per-group (gated_rms_norm) 1 / rms factors of a norm applied on the
// way in, into `scale`. Every thread of the block must call it.
template <SmallBatchInput kInput>
__device__ __forceinline__ void input_scales(const SmallBatchLinearParams& p, float* scale) {
  const int64_t K = p.in_features;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  if constexpr (kInput == SmallBatchInput::rms_norm) {
    // A warp per row adds the row's partial sums (a fixed order: the factor does not depend on M).
    for (int64_t m = warp; m < p.rows; m += kWarps) {
      const float* parts = p.input_sum_sq + m * p.input_sum_sq_parts;
      float sum = 0.0f;
      for (int64_t j = lane; j < p.input_sum_sq_parts; j += 32) sum += parts[j];
      sum = warp_sum(sum);
      if (lane == 0) scale[m] = inv_rms(sum, K, p.eps);
    }
  } else if constexpr (kInput == SmallBatchInput::gated_rms_norm) {
    // A warp per group, reduced as the gated norm kernel reduces (kernels/norm/norm_rows.cuh), so the
    // values are its values bit for bit; four groups at a time, so their loads are in flight together.
    constexpr int kBatch = 4;
    const bf16* x = static_cast<const bf16*>(p.x);
    const int64_t groups = p.rows * (K / p.group);
    for (int64_t r0 = int64_t(warp) * kBatch; r0 < groups; r0 += kWarps * kBatch) {
      float sum[kBatch] = {};
      for (int64_t i = lane; i < p.group; i += 32)
#pragma unroll
        for (int u = 0; u < kBatch; ++u)
          if (r0 + u < groups) {
            const float v = to_f32(x[(r0 + u) * p.group + i]);
            sum[u] += v * v;
          }
#pragma unroll
      for (int u = 0; u < kBatch; ++u) {
        const float s = inv_rms(warp_sum(sum[u]), p.group, p.eps);
        if (lane == 0 && r0 + u < groups) scale[r0 + u] = s;
      }
    }
  }
  __syncthreads();
}

__device__ __forceinline__ void load_f32x8(const float* p, float (&f)[8]) {
  const float4 a = __ldg(reinterpret_cast<const float4*>(p)), b = __ldg(reinterpret_cast<const float4*>(p) + 1);
  f[0] = a.x, f[1] = a.y, f[2] = a.z, f[3] = a.w, f[4] = b.x, f[5] = b.y, f[6] = b.z, f[7] = b.w;
}

// Input elements [k, k + 8) of row m, with the op ahead applied (the values its kernel writes).
template <SmallBatchInput kInput>
__device__ __forceinline__ uint4 load_input(const SmallBatchLinearParams& p, int64_t m, int64_t k,
                                            const float* scale) {
  const int64_t at = m * p.in_features + k;
  // A plain (coherent) load: x is the output of the kernel ahead, waited for before this.
  const uint4 raw = *reinterpret_cast<const uint4*>(static_cast<const bf16*>(p.x) + at);
  if constexpr (kInput == SmallBatchInput::plain) return raw;
  float x[8], w[8], g[8];
  unpack_bf16x8(raw, x);
  if constexpr (kInput == SmallBatchInput::rms_norm) {
    load_f32x8(p.norm_weight + k, w);
    const float s = scale[m];
#pragma unroll
    for (int i = 0; i < 8; ++i) x[i] = rms_normed(x[i], s, w[i]);
  } else {
    unpack_bf16x8(*reinterpret_cast<const uint4*>(static_cast<const bf16*>(p.gate) + at), g);
    if constexpr (kInput == SmallBatchInput::gated_rms_norm) {
      load_f32x8(p.norm_weight + k % p.group, w);  // group % 8 == 0: the 8 are in one group
      const float s = scale[m * (p.in_features / p.group) + k / p.group];
#pragma unroll
      for (int i = 0; i < 8; ++i) x[i] = gated_rms_normed(x[i], s, w[i], g[i]);
    } else {
#pragma unroll
      for (int i = 0; i < 8; ++i) x[i] = x[i] * round_bf16(sigmoid(g[i]));
    }
  }
  return pack_bf16x8(x);
}

// The block's 16 rows: which output, its weights (two for swiglu: the gate's and the up
// projection's rows), where its results go. Constant indices only, so the parameters stay in the
// constant bank rather than being copied to local memory.
template <int kWeights>
struct Tile {
  const uint16_t* weight[kWeights] = {};
  void* out = nullptr;
  int64_t features = 0;
  int64_t row0 = -1;  // its first weight row; -1: no tile
};

template <int kWeights, int kRows = kTileRows>
__device__ __forceinline__ Tile<kWeights> find_tile(const SmallBatchLinearParams& p, int64_t block) {
  Tile<kWeights> t;
#pragma unroll
  for (int i = 0; i + kWeights <= SmallBatchLinearParams::kMaxOutputs; ++i) {
    const int64_t tiles = i < p.num_outputs ? (p.outputs[i].features + kRows - 1) / kRows : 0;
    if (t.row0 < 0 && block < tiles) {
#pragma unroll
      for (int j = 0; j < kWeights; ++j) t.weight[j] = static_cast<const uint16_t*>(p.outputs[i + j].weight);
      t.out = p.outputs[i].out;
      t.features = p.outputs[i].features;
      t.row0 = block * kRows;
    }
    block -= tiles;
  }
  return t;
}

// The block's sums of one tile, added across its warps in warp order (a fixed order: the result is
// deterministic), and written out with the epilogue's op. Every thread of the block must call it.
template <int kWeights, int kInputTiles>
__device__ __forceinline__ void store_tile(const SmallBatchLinearParams& p, const Tile<kWeights>& tile,
                                           const float (&acc)[kWeights][kInputTiles][kFragment]) {
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int64_t N = tile.features;
  __shared__ float partial[kWeights][kInputTiles][kWarps][32 * kFragment];
#pragma unroll
  for (int j = 0; j < kWeights; ++j)
#pragma unroll
    for (int c = 0; c < kInputTiles; ++c)
#pragma unroll
      for (int i = 0; i < kFragment; ++i) partial[j][c][warp][lane * kFragment + i] = acc[j][c][i];
  __syncthreads();
  const int t = threadIdx.x;
  // Accumulator element i of lane l: weight row l / 4 (+ 8 for i >= 2), input row 2 (l % 4) + i % 2
  // of the input tile.
  const int l = t / kFragment, i = t % kFragment;
  const int n_in_tile = l / 4 + (i >= 2 ? 8 : 0);
  const int64_t n = tile.row0 + n_in_tile;
  __shared__ float squares[kInputTiles * 8][kTileRows];  // out_sum_sq: [row][feature of the tile]
#pragma unroll
  for (int c = 0; c < kInputTiles; ++c) {
    if (t >= 32 * kFragment) break;
    float sum[kWeights];
#pragma unroll
    for (int j = 0; j < kWeights; ++j) {
      sum[j] = 0.0f;
#pragma unroll
      for (int w = 0; w < kWarps; ++w) sum[j] += partial[j][c][w][t];
    }
    const int64_t m = 8 * c + 2 * (l % 4) + (i % 2);
    const bool in = m < p.rows && n < N;
    const int64_t at = m * N + n;
    if constexpr (kWeights == 2) {
      const float gate = round_bf16(sum[0]), up = round_bf16(sum[1]);
      if (in) static_cast<bf16*>(tile.out)[at] = to_bf16(round_bf16(silu(gate)) * up);
    } else if (p.epilogue == SmallBatchEpilogue::f32) {
      if (in) static_cast<float*>(tile.out)[at] = sum[0];
    } else if (p.residual != nullptr) {  // rounded, then added as the add kernel adds
      const float y = in ? round_bf16(round_bf16(sum[0]) + to_f32(static_cast<const bf16*>(p.residual)[at])) : 0.0f;
      if (in) static_cast<bf16*>(tile.out)[at] = to_bf16(y);
      squares[m][n_in_tile] = y * y;
    } else {
      if (in) static_cast<bf16*>(tile.out)[at] = to_bf16(sum[0]);
    }
  }
  if constexpr (kWeights == 1) {
    if (p.out_sum_sq == nullptr) return;  // the same for the whole block
    __syncthreads();
    // One partial sum per row over the tile's 16 features, in feature order.
    if (t < kInputTiles * 8 && t < p.rows) {
      float sq = 0.0f;
#pragma unroll
      for (int f = 0; f < kTileRows; ++f) sq += squares[t][f];
      p.out_sum_sq[t * ((N + kTileRows - 1) / kTileRows) + tile.row0 / kTileRows] = sq;  // small_batch_sum_sq_parts
    }
  }
}

// The rows of x as the input op makes them, into shared memory (`row_chunks` 16-byte chunks per row),
// by the whole block; once per block, before its steps read them. Index: the kernel's K arithmetic.
template <SmallBatchInput kInput, typename Index>
__device__ __forceinline__ void stage_input_rows(const SmallBatchLinearParams& p, uint4* staged, float* scale,
                                                 Index K, Index row_chunks) {
  input_scales<kInput>(p, scale);
  const int64_t chunks = p.rows * (K / 8);
#pragma unroll 4
  for (int64_t c = threadIdx.x; c < chunks; c += kWarps * 32) {
    const int64_t m = c / (K / 8), k8 = c % (K / 8);
    staged[m * row_chunks + k8] = load_input<kInput>(p, m, 8 * k8, scale);
  }
  __syncthreads();
}

// Up to 8 rows: a block per tile of 16 weight rows.
// kWeights: 1, or 2 for swiglu (the gate's and the up projection's rows of one tile, sharing the
// input loads). kInputTiles: the 8-row input tiles, 1 here (M <= 8), 2 in the resident kernel below
// (M <= 16, each a second mma on the same weights). The loads in flight per thread stay about 128
// bytes. kInput: the op ahead, applied to x on the way in.
// kDeep: twice the steps in flight (8), for launches of few tiles (kNarrowTiles, one block on most
// SMs) over a short K: each warp then has 8 KB of its weights in flight rather than 4, and half its
// slice of a 4,096-wide K issued before the wait. Measured faster for out_proj and o_proj (K = 4,096,
// 5-12%), slower for down (K = 9,216, 5-11%) (docs/benchmarks/decode.md).
template <int kWeights, int kInputTiles, SmallBatchInput kInput, bool kDeep = false>
__global__ void __launch_bounds__(kWarps * 32, kDeep || kWeights * kInputTiles > 1 ? 2 : 3)
    small_batch_linear_kernel(SmallBatchLinearParams p, int64_t /*tiles: one per block*/) {
  static_assert(!kDeep || (kWeights == 1 && kInputTiles == 1), "deep launches take one weight, up to 8 rows");
  constexpr int kUnroll = kDeep ? 8 : kWeights == 1 ? 4 : 2;  // steps whose loads are issued before their mmas
  const Tile<kWeights> tile = find_tile<kWeights>(p, blockIdx.x);
  if (tile.row0 < 0) return;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, q = lane % 4;
  const int64_t K = p.in_features, N = tile.features;

  // This thread's two weight rows per weight (rows past N read row N - 1; their sums are dropped)
  // and its input row in each input tile (rows past M read as zeros).
  const uint16_t* w_row[kWeights][2];
  const int64_t r0 = tile.row0 + g, r1 = tile.row0 + g + 8;
#pragma unroll
  for (int j = 0; j < kWeights; ++j) {
    w_row[j][0] = tile.weight[j] + (r0 < N ? r0 : N - 1) * K;
    w_row[j][1] = tile.weight[j] + (r1 < N ? r1 : N - 1) * K;
  }
  bool has_x[kInputTiles];
#pragma unroll
  for (int c = 0; c < kInputTiles; ++c) has_x[c] = 8 * c + g < p.rows;

  // Warp `warp` takes steps [first, last) of ceil(K / 32).
  const int64_t steps = (K + kStepK - 1) / kStepK;
  const int64_t first = steps * warp / kWarps, last = steps * (warp + 1) / kWarps;
  float acc[kWeights][kInputTiles][kFragment] = {};
  const uint4 zero = make_uint4(0, 0, 0, 0);
  uint4 w[kUnroll][kWeights][2];
  const auto load_weights = [&](int64_t s0, auto when) {
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int64_t k = (s0 + u) * kStepK + 8 * q;
      const bool in = s0 + u < last && k < K;  // K % 8 == 0: a thread's 8 are all in or all out
#pragma unroll
      for (int j = 0; j < kWeights; ++j) {
        w[u][j][0] = in ? load_weights16<decltype(when)>(w_row[j][0] + k) : zero;
        w[u][j][1] = in ? load_weights16<decltype(when)>(w_row[j][1] + k) : zero;
      }
    }
  };
  // The first weights do not depend on the kernel ahead (launched with programmatic serialization,
  // this one may start while that one runs), so they are issued before the wait for its output x.
  load_weights(first, AheadOfWait{});
  wait_for_prior_grid();
  allow_dependent_grid();
  // An input op is applied once per block: the rows, as the op makes them, staged in shared memory,
  // from which the steps below read them (each row padded by 16 bytes, so the 8 rows an mma reads lie
  // in different banks).
  extern __shared__ uint4 staged[];
  const int64_t row_chunks = K / 8 + 1;  // 16-byte chunks per staged row
  if constexpr (kInput != SmallBatchInput::plain) {
    __shared__ float scale[kInput == SmallBatchInput::gated_rms_norm ? SmallBatchLinearParams::kMaxNormScales
                                                                      : SmallBatchLinearParams::kMaxRows];
    stage_input_rows<kInput>(p, staged, scale, K, row_chunks);
  }
  for (int64_t s0 = first; s0 < last; s0 += kUnroll) {
    if (s0 != first) load_weights(s0, InStepLoop{});
    uint4 x[kUnroll][kInputTiles];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int64_t k = (s0 + u) * kStepK + 8 * q;
#pragma unroll
      for (int c = 0; c < kInputTiles; ++c) {
        const bool in = s0 + u < last && k < K && has_x[c];
        if constexpr (kInput == SmallBatchInput::plain)
          x[u][c] = in ? load_input<kInput>(p, 8 * c + g, k, nullptr) : zero;
        else
          x[u][c] = in ? staged[(8 * c + g) * row_chunks + k / 8] : zero;
      }
    }
#pragma unroll
    for (int u = 0; u < kUnroll; ++u)
#pragma unroll
      for (int j = 0; j < kWeights; ++j)
#pragma unroll
        for (int c = 0; c < kInputTiles; ++c) mma_step(acc[j][c], w[u][j][0], w[u][j][1], x[u][c]);
  }

  store_tile<kWeights, kInputTiles>(p, tile, acc);
}

// From 9 rows (two input tiles) the blocks are resident: the grid holds no more than fit on the
// device at once, and each block takes tiles blockIdx.x, + gridDim.x, ... of the `tiles` in all.
// The first weights of its next tile are in flight while it adds up and stores the one before, so
// its weight stream does not pause between tiles, an input op is staged once per block rather than
// once per tile, and the kernel behind (launched early) does not take the slots of a second wave.
// Up to 8 rows (three blocks to an SM for one weight) this form measured slower for lone weights, even
// at one tile per block (docs/benchmarks/decode.md): the kernel above takes those rows.
template <int kWeights, int kInputTiles, SmallBatchInput kInput>
__global__ void __launch_bounds__(kWarps * 32, kWeights * kInputTiles == 1 ? 3 : 2)
    resident_small_batch_linear_kernel(SmallBatchLinearParams p, int64_t tiles) {
  constexpr int kUnroll = kWeights == 1 ? 4 : 2;  // steps whose loads are issued before their mmas
  // Only the tile's index stays live through the steps (the tile itself is found again to store it):
  // the registers go to the loads in flight.
  int64_t index = blockIdx.x;
  if (find_tile<kWeights>(p, index).row0 < 0) return;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, q = lane % 4;
  const int K = int(p.in_features);  // at most 2^30 (small_batch_linear_error)

  // This thread's two weight rows per weight (rows past N read row N - 1; their sums are dropped)
  // and its input row in each input tile (rows past M read as zeros).
  const uint16_t* w_row[kWeights][2];
  const auto find_rows = [&](const Tile<kWeights>& t) {
    const int64_t r0 = t.row0 + g, r1 = t.row0 + g + 8, N = t.features;
#pragma unroll
    for (int j = 0; j < kWeights; ++j) {
      w_row[j][0] = t.weight[j] + (r0 < N ? r0 : N - 1) * K;
      w_row[j][1] = t.weight[j] + (r1 < N ? r1 : N - 1) * K;
    }
  };
  bool has_x[kInputTiles];
#pragma unroll
  for (int c = 0; c < kInputTiles; ++c) has_x[c] = 8 * c + g < p.rows;

  // Warp `warp` takes steps [first, last) of ceil(K / 32) in every tile.
  const int steps = (K + kStepK - 1) / kStepK;
  const int first = steps * warp / kWarps, last = steps * (warp + 1) / kWarps;
  const uint4 zero = make_uint4(0, 0, 0, 0);
  uint4 w[kUnroll][kWeights][2];
  const auto load_weights = [&](int s0, auto when) {
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int k = (s0 + u) * kStepK + 8 * q;
      const bool in = s0 + u < last && k < K;  // K % 8 == 0: a thread's 8 are all in or all out
#pragma unroll
      for (int j = 0; j < kWeights; ++j) {
        w[u][j][0] = in ? load_weights16<decltype(when)>(w_row[j][0] + k) : zero;
        w[u][j][1] = in ? load_weights16<decltype(when)>(w_row[j][1] + k) : zero;
      }
    }
  };
  // The first weights do not depend on the kernel ahead (launched with programmatic serialization,
  // this one may start while that one runs), so they are issued before the wait for its output x.
  find_rows(find_tile<kWeights>(p, index));
  load_weights(first, AheadOfWait{});
  wait_for_prior_grid();
  allow_dependent_grid();
  // An input op is applied once per block: the rows, as the op makes them, staged in shared memory,
  // from which the steps below read them (each row padded by 16 bytes, so the 8 rows an mma reads lie
  // in different banks).
  extern __shared__ uint4 staged[];
  const int row_chunks = K / 8 + 1;  // 16-byte chunks per staged row
  if constexpr (kInput != SmallBatchInput::plain) {
    __shared__ float scale[kInput == SmallBatchInput::gated_rms_norm ? SmallBatchLinearParams::kMaxNormScales
                                                                      : SmallBatchLinearParams::kMaxRows];
    stage_input_rows<kInput>(p, staged, scale, K, row_chunks);
  }
  while (true) {
    float acc[kWeights][kInputTiles][kFragment] = {};
    // The steps of the kernel above, in 32-bit arithmetic, written out again on purpose: both kernels'
    // steps in one function (templated on the index type, the accumulators and the weight loader passed
    // in) changed the one-tile kernels' machine code, in the prologue of the one-row, one-weight form
    // among others, and that kernel's speed at 1-8 rows is what its measurements stand for
    // (docs/benchmarks/decode.md). The input staging above is shared: its machine code is unchanged.
    for (int s0 = first; s0 < last; s0 += kUnroll) {
      if (s0 != first) load_weights(s0, InStepLoop{});
      uint4 x[kUnroll][kInputTiles];
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) {
        const int k = (s0 + u) * kStepK + 8 * q;
#pragma unroll
        for (int c = 0; c < kInputTiles; ++c) {
          const bool in = s0 + u < last && k < K && has_x[c];
          if constexpr (kInput == SmallBatchInput::plain)
            x[u][c] = in ? load_input<kInput>(p, 8 * c + g, k, nullptr) : zero;
          else
            x[u][c] = in ? staged[(8 * c + g) * row_chunks + k / 8] : zero;
        }
      }
#pragma unroll
      for (int u = 0; u < kUnroll; ++u)
#pragma unroll
        for (int j = 0; j < kWeights; ++j)
#pragma unroll
          for (int c = 0; c < kInputTiles; ++c) mma_step(acc[j][c], w[u][j][0], w[u][j][1], x[u][c]);
    }
    const int64_t next = index + gridDim.x;
    if (next < tiles) {  // the next tile's first weights, in flight while this one is stored
      find_rows(find_tile<kWeights>(p, next));
      load_weights(first, InStepLoop{});
    }
    store_tile<kWeights, kInputTiles>(p, find_tile<kWeights>(p, index), acc);
    if (next >= tiles) break;
    __syncthreads();  // store_tile's shared memory is free for the next tile
    index = next;
  }
}

// 8-row weight tiles (one weight, without sums of squares; the kernel's choice for narrow launches from
// kSwappedMinRows rows): the operands swapped.
// The input rows are the mma's 16-row operand and a tile's 8 weight rows its 8-column one, so a
// launch has twice the tiles of the form above (320 rather than 160 for a 2,560-wide layer) and three
// blocks of them fit an SM: more warps stream whole rows at once, and the SMs that hold one more
// tile than the rest hold a third more bytes rather than twice as many. Thread (g, q) loads the same
// 16 bytes of k as above, of weight row g and input rows g and g + 8, into the same k slots of the
// two mmas, and a product is the same whichever operand it comes from: each output is the same sum in
// the same order as in the 16-row tiles, bit for bit (tested).
__device__ __forceinline__ void mma_step_swapped(float (&c)[kFragment], const uint4& x_g, const uint4& x_g8,
                                                 const uint4& row_g) {
  mma_bf16(c, x_g.x, x_g8.x, x_g.y, x_g8.y, row_g.x, row_g.y);
  mma_bf16(c, x_g.z, x_g8.z, x_g.w, x_g8.w, row_g.z, row_g.w);
}

constexpr int kSwappedTileRows = 8;
// Narrow launches from this many rows take the 8-row tiles (the kernel's choice); at one and two rows
// the residual projections write sums of squares, which only the 16-row tiles do.
constexpr int64_t kSwappedMinRows = 3;

// The block's sums of one 8-row tile, added across its warps in warp order as store_tile adds them,
// and written with the bf16 (plus residual) or float32 epilogue. Every thread of the block calls it.
__device__ __forceinline__ void store_swapped_tile(const SmallBatchLinearParams& p, const Tile<1>& tile,
                                                   const float (&acc)[kFragment]) {
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  __shared__ float partial[kWarps][32 * kFragment];
#pragma unroll
  for (int i = 0; i < kFragment; ++i) partial[warp][lane * kFragment + i] = acc[i];
  __syncthreads();
  const int t = threadIdx.x;
  if (t >= 32 * kFragment) return;
  float sum = 0.0f;
#pragma unroll
  for (int w = 0; w < kWarps; ++w) sum += partial[w][t];
  // Accumulator element i of lane l: input row l / 4 (+ 8 for i >= 2), weight row 2 (l % 4) + i % 2.
  const int l = t / kFragment, i = t % kFragment;
  const int64_t m = l / 4 + (i >= 2 ? 8 : 0), n = tile.row0 + 2 * (l % 4) + (i % 2), N = tile.features;
  if (m >= p.rows || n >= N) return;
  const int64_t at = m * N + n;
  if (p.epilogue == SmallBatchEpilogue::f32) {
    static_cast<float*>(tile.out)[at] = sum;
  } else if (p.residual != nullptr) {  // rounded, then added as the add kernel adds
    const float y = round_bf16(round_bf16(sum) + to_f32(static_cast<const bf16*>(p.residual)[at]));
    static_cast<bf16*>(tile.out)[at] = to_bf16(y);
  } else {
    static_cast<bf16*>(tile.out)[at] = to_bf16(sum);
  }
}

// The resident kernel's walk over the tiles, with 8-row tiles and the operands swapped. kUnroll:
// the steps of weights in flight per warp (16 bytes a thread each); with 8, two blocks an SM (three
// spill).
template <SmallBatchInput kInput, int kUnroll>
__global__ void __launch_bounds__(kWarps * 32, kUnroll == 8 ? 2 : 3)
    swapped_small_batch_linear_kernel(SmallBatchLinearParams p, int64_t tiles) {
  int64_t index = blockIdx.x;
  if (find_tile<1, kSwappedTileRows>(p, index).row0 < 0) return;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, q = lane % 4;
  const int K = int(p.in_features);  // at most 2^30 (small_batch_linear_error)

  // This thread's weight row (rows past N read row N - 1; their sums are dropped) and its two input
  // rows (rows past M read as zeros).
  const uint16_t* w_row = nullptr;
  const auto find_row = [&](const Tile<1>& t) {
    const int64_t r = t.row0 + g, N = t.features;
    w_row = t.weight[0] + (r < N ? r : N - 1) * K;
  };
  const bool has_x0 = g < p.rows, has_x1 = 8 + g < p.rows;

  const int steps = (K + kStepK - 1) / kStepK;
  const int first = steps * warp / kWarps, last = steps * (warp + 1) / kWarps;
  const uint4 zero = make_uint4(0, 0, 0, 0);
  uint4 w[kUnroll];
  const auto load_weights = [&](int s0, auto when) {
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int k = (s0 + u) * kStepK + 8 * q;
      w[u] = s0 + u < last && k < K ? load_weights16<decltype(when)>(w_row + k) : zero;
    }
  };
  find_row(find_tile<1, kSwappedTileRows>(p, index));
  load_weights(first, AheadOfWait{});
  wait_for_prior_grid();
  allow_dependent_grid();
  // The input staging as the kernels above write it out. One helper for the three (the factors'
  // shared array declared in it) moved that array and changed the RMS-norm kernels' machine code,
  // whose speed docs/benchmarks/decode.md measured.
  extern __shared__ uint4 staged[];
  const int row_chunks = K / 8 + 1;  // 16-byte chunks per staged row
  if constexpr (kInput != SmallBatchInput::plain) {
    __shared__ float scale[kInput == SmallBatchInput::gated_rms_norm ? SmallBatchLinearParams::kMaxNormScales
                                                                      : SmallBatchLinearParams::kMaxRows];
    stage_input_rows<kInput>(p, staged, scale, K, row_chunks);
  }
  const auto input = [&](int m, int k, bool in) {
    if constexpr (kInput == SmallBatchInput::plain)
      return in ? load_input<kInput>(p, m, k, nullptr) : zero;
    else
      return in ? staged[m * row_chunks + k / 8] : zero;
  };
  while (true) {
    float acc[kFragment] = {};
    for (int s0 = first; s0 < last; s0 += kUnroll) {
      if (s0 != first) load_weights(s0, InStepLoop{});
      // Every step's inputs issued before the first mma: loaded one step ahead of their use instead,
      // each step waits out a round trip to the L2 (measured: the 16-row launch 5% slower).
      uint4 x[kUnroll][2];
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) {
        const int k = (s0 + u) * kStepK + 8 * q;
        const bool in = s0 + u < last && k < K;
        x[u][0] = input(g, k, in && has_x0);
        x[u][1] = input(8 + g, k, in && has_x1);
      }
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) mma_step_swapped(acc, x[u][0], x[u][1], w[u]);
    }
    const int64_t next = index + gridDim.x;
    if (next < tiles) {  // the next tile's first weights, in flight while this one is stored
      find_row(find_tile<1, kSwappedTileRows>(p, next));
      load_weights(first, InStepLoop{});
    }
    store_swapped_tile(p, find_tile<1, kSwappedTileRows>(p, index), acc);
    if (next >= tiles) break;
    __syncthreads();  // store_swapped_tile's shared memory is free for the next tile
    index = next;
  }
}

using Kernel = void (*)(SmallBatchLinearParams, int64_t);

template <int kWeights, SmallBatchInput kInput>
Kernel pick_tiles(bool two_tiles, bool narrow) {
  if (two_tiles) return resident_small_batch_linear_kernel<kWeights, 2, kInput>;
  if constexpr (kWeights == 1)
    if (narrow) return small_batch_linear_kernel<1, 1, kInput, true>;
  return small_batch_linear_kernel<kWeights, 1, kInput>;
}

template <int kUnroll>
Kernel pick_swapped(SmallBatchInput input) {
  switch (input) {
    case SmallBatchInput::rms_norm: return swapped_small_batch_linear_kernel<SmallBatchInput::rms_norm, kUnroll>;
    case SmallBatchInput::gated_rms_norm:
      return swapped_small_batch_linear_kernel<SmallBatchInput::gated_rms_norm, kUnroll>;
    case SmallBatchInput::sigmoid_gate: return swapped_small_batch_linear_kernel<SmallBatchInput::sigmoid_gate, kUnroll>;
    case SmallBatchInput::plain: break;
  }
  return swapped_small_batch_linear_kernel<SmallBatchInput::plain, kUnroll>;
}

// The SwiGLU pair takes a plain or RMS-normed input (the MLP's); one weight takes any.
template <int kWeights>
Kernel pick_kernel(SmallBatchInput input, bool two_tiles, bool narrow) {
  if (input == SmallBatchInput::rms_norm) return pick_tiles<kWeights, SmallBatchInput::rms_norm>(two_tiles, narrow);
  if constexpr (kWeights == 1) {
    if (input == SmallBatchInput::gated_rms_norm)
      return pick_tiles<1, SmallBatchInput::gated_rms_norm>(two_tiles, narrow);
    if (input == SmallBatchInput::sigmoid_gate) return pick_tiles<1, SmallBatchInput::sigmoid_gate>(two_tiles, narrow);
  }
  return pick_tiles<kWeights, SmallBatchInput::plain>(two_tiles, narrow);
}

}  // namespace

cudaError_t launch_small_batch_linear(const SmallBatchLinearParams& p, cudaStream_t stream) {
  if (!small_batch_linear_error(p).empty()) return cudaErrorInvalidValue;
  // Tiles: one per 16 rows of each output (of the pair, for swiglu).
  const int tiled = p.epilogue == SmallBatchEpilogue::swiglu ? 1 : p.num_outputs;
  int64_t tiles = 0;
  for (int i = 0; i < tiled; ++i) tiles += (p.outputs[i].features + kTileRows - 1) / kTileRows;
  const bool two_tiles = p.rows > 8;
  // From kSwappedMinRows rows, narrow launches of one weight take 8-row tiles with the operands swapped.
  const bool swappable = p.rows >= kSwappedMinRows && p.num_outputs == 1 && p.epilogue != SmallBatchEpilogue::swiglu &&
                         p.out_sum_sq == nullptr;
  const bool swapped = p.weight_tile_rows == 0 ? swappable && tiles <= kNarrowTiles : p.weight_tile_rows == 8;
  if (swapped) {
    tiles = 0;
    for (int i = 0; i < p.num_outputs; ++i) tiles += (p.outputs[i].features + kSwappedTileRows - 1) / kSwappedTileRows;
  }
  const size_t smem = small_batch_staging_bytes(p);
  SmallBatchLinearParams launched = p;
  if (p.epilogue == SmallBatchEpilogue::swiglu) launched.num_outputs = 1;  // find_tile walks the gate's tiles;
                                                                             // the up weight is outputs[1]
  // Few tiles (the 2,560-wide projections: 160 for 132 SMs) over a K of at most 4,096: deeper loads
  // per warp (kDeep above).
  constexpr int64_t kNarrowMaxK = 4096;
  const bool narrow = p.steps_in_flight == 0 ? tiles <= kNarrowTiles && p.in_features <= kNarrowMaxK
                                             : p.steps_in_flight == 8;
  Kernel kernel = p.epilogue == SmallBatchEpilogue::swiglu ? pick_kernel<2>(p.input, two_tiles, narrow)
                                                            : pick_kernel<1>(p.input, two_tiles, narrow);
  if (swapped) kernel = p.steps_in_flight == 8 ? pick_swapped<8>(p.input) : pick_swapped<4>(p.input);
  if (smem > 0) {
    // Static and dynamic shared memory together pass 48 KB only where the kernel allows it: raised
    // once per kernel to the most any launch stages.
    const cudaError_t e = allow_dynamic_shared_memory(reinterpret_cast<const void*>(kernel), kMaxSmallBatchStagingBytes);
    if (e != cudaSuccess) return e;
  }
  // The kernel asks for as much L1 as its blocks leave (kernels/carveout.h), its staged input rows
  // counted.
  if (const cudaError_t e = prefer_least_shared_memory(reinterpret_cast<const void*>(kernel), kWarps * 32, smem);
      e != cudaSuccess)
    return e;
  // Blocks: resident ones, as many as fit at once (each takes every gridDim-th tile) or fewer where
  // asked; otherwise one per tile.
  int64_t blocks = tiles;
  if (two_tiles) {
    const cudaError_t e = resident_blocks(reinterpret_cast<const void*>(kernel), kWarps * 32, smem, blocks);
    if (e != cudaSuccess) return e;
    blocks = std::min(blocks, tiles);
    if (p.max_blocks > 0) blocks = std::min(blocks, p.max_blocks);
  }
  // Launched early (programmatic dependent launch): the weight stream starts while the kernel
  // ahead finishes.
  const dim3 grid{unsigned(blocks)}, block{kWarps * 32};
  return launch_early(kernel, grid, block, smem, stream, launched, tiles);
}

}  // namespace di::kernels
