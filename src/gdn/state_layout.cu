// State-pool layout conversion: a batched out-of-place transpose of float32 matrices.
//
// A source matrix has `rows` x `cols` elements, row-major ([K, V] from DI_GDN_STATE_KV, [V, K] from
// DI_GDN_STATE_VK); the destination is its transpose [cols, rows]. One CTA of 32 x 8 threads moves
// one 32 x 32 tile: it reads the tile's 32 source rows (each warp reads 32 consecutive floats of a
// row: 128 coalesced bytes), stores them in shared memory, and writes the tile's 32 destination rows
// the same way, reading shared memory down a column. The tile row is padded by one float so that a
// column read touches 32 distinct banks. Edge tiles (K or V not a multiple of 32) mask the
// out-of-range elements. Blocks over z walk the matrices with a stride (gridDim.z is capped at
// 65535), so one launch covers any pool.
//
// Bytes: 8 per element (one read, one write); no arithmetic. Nothing is rounded: bitwise exact.
#include "gdn/state_layout.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <limits>
#include <string>

// No fmt or spdlog here: they fail to compile under nvcc (the messages use std::to_string).

namespace di::gdn {
namespace {

constexpr int kTile = 32;                      // tile edge: one warp spans a tile row
constexpr int kRowsPerPass = 8;                // threadIdx.y range: each thread moves 4 elements
constexpr int kThreads = kTile * kRowsPerPass;
constexpr int64_t kMaxGridZ = 65535;
constexpr int64_t kMaxGridY = 65535;
constexpr int64_t kMaxDim = kMaxGridY * kTile;  // tiles along a dim must fit in gridDim.y

__global__ void __launch_bounds__(kThreads) transpose_matrices_kernel(const float* __restrict__ src,
                                                                      float* __restrict__ dst, int64_t num_matrices,
                                                                      int rows, int cols) {
  __shared__ float tile[kTile][kTile + 1];  // +1: the column reads below hit 32 distinct banks
  const int col0 = int(blockIdx.x) * kTile, row0 = int(blockIdx.y) * kTile;
  const int tx = int(threadIdx.x), ty = int(threadIdx.y);
  const int64_t matrix_elems = int64_t(rows) * cols;
  for (int64_t m = blockIdx.z; m < num_matrices; m += gridDim.z) {
    const float* s = src + m * matrix_elems;
    float* d = dst + m * matrix_elems;
    // Source rows row0 .. row0 + 31, columns col0 + tx: consecutive lanes, consecutive addresses.
#pragma unroll
    for (int j = 0; j < kTile; j += kRowsPerPass) {
      const int i = ty + j, r = row0 + i, c = col0 + tx;
      if (r < rows && c < cols) tile[i][tx] = s[int64_t(r) * cols + c];
    }
    __syncthreads();
    // Destination rows col0 .. col0 + 31 (source columns), columns row0 + tx (source rows).
#pragma unroll
    for (int j = 0; j < kTile; j += kRowsPerPass) {
      const int i = ty + j, c = col0 + i, r = row0 + tx;
      if (c < cols && r < rows) d[int64_t(c) * rows + r] = tile[tx][i];
    }
    __syncthreads();  // the tile is refilled for the next matrix
  }
}

bool known_layout(di_gdn_state_layout layout) { return layout == DI_GDN_STATE_KV || layout == DI_GDN_STATE_VK; }

}  // namespace

std::string state_layout_params_error(const StateLayoutParams& p) {
  if (!known_layout(p.from) || !known_layout(p.to))
    return "state layouts from " + std::to_string(int(p.from)) + ", to " + std::to_string(int(p.to)) +
           ": each must be DI_GDN_STATE_KV (0) or DI_GDN_STATE_VK (1)";
  if (p.k_dim <= 0 || p.v_dim <= 0 || p.k_dim > kMaxDim || p.v_dim > kMaxDim)
    return "k_dim " + std::to_string(p.k_dim) + ", v_dim " + std::to_string(p.v_dim) + ": each must be in 1.." +
           std::to_string(kMaxDim);
  if (p.num_matrices < 0) return "num_matrices " + std::to_string(p.num_matrices) + " is negative";
  if (p.num_matrices == 0) return {};
  const int64_t matrix_bytes = int64_t(p.k_dim) * p.v_dim * int64_t(sizeof(float));
  if (p.num_matrices > std::numeric_limits<int64_t>::max() / matrix_bytes)
    return "num_matrices " + std::to_string(p.num_matrices) + " of " + std::to_string(p.k_dim) + " x " +
           std::to_string(p.v_dim) + " floats overflow a 64-bit byte count";
  if (p.src == nullptr || p.dst == nullptr) return "src and dst must be set";
  const auto src = reinterpret_cast<uintptr_t>(p.src), dst = reinterpret_cast<uintptr_t>(p.dst);
  if (src % alignof(float) != 0 || dst % alignof(float) != 0) return "src and dst must be 4-byte aligned (float)";
  const auto bytes = uintptr_t(p.num_matrices * matrix_bytes);
  if (src < dst + bytes && dst < src + bytes)
    return src == dst ? "src == dst: the conversion is out of place (in-place conversion is not supported); "
                        "convert into a second pool"
                      : "src and dst overlap: the conversion is out of place and needs disjoint pools";
  return {};
}

cudaError_t launch_state_layout_convert(const StateLayoutParams& p, cudaStream_t stream) {
  if (!state_layout_params_error(p).empty()) return cudaErrorInvalidValue;
  if (p.num_matrices == 0) return cudaSuccess;
  const int64_t elems = p.num_matrices * p.k_dim * p.v_dim;
  if (p.from == p.to)
    return cudaMemcpyAsync(p.dst, p.src, size_t(elems) * sizeof(float), cudaMemcpyDeviceToDevice, stream);
  // The source's row-major shape: [K, V] from [H, K, V], [V, K] from [H, V, K].
  const int rows = p.from == DI_GDN_STATE_KV ? p.k_dim : p.v_dim;
  const int cols = p.from == DI_GDN_STATE_KV ? p.v_dim : p.k_dim;
  const dim3 grid(unsigned((cols + kTile - 1) / kTile), unsigned((rows + kTile - 1) / kTile),
                  unsigned(std::min(p.num_matrices, kMaxGridZ)));
  transpose_matrices_kernel<<<grid, dim3(kTile, kRowsPerPass), 0, stream>>>(p.src, p.dst, p.num_matrices, rows, cols);
  return cudaGetLastError();
}

}  // namespace di::gdn
