#include "kernels/cuda_common.cuh"
#include "kernels/elementwise/elementwise.h"

namespace di::kernels {

namespace {

constexpr int kThreads = 256;

// Copies rows of 16-byte vectors when the width allows it (every model width is a multiple of 8).
// dst[r] = src[rows[r] - first] for rows in [first, first + count), zero for the others (the rows a
// vocabulary slice does not hold).
__global__ void gather_rows_kernel(const bf16* __restrict__ src, const int32_t* __restrict__ rows, int64_t width,
                                   int64_t first, int64_t count, bf16* __restrict__ dst) {
  wait_for_prior_grid();
  allow_dependent_grid();
  const int64_t r = blockIdx.x, row = int64_t(rows[r]) - first;
  bf16* d = dst + r * width;
  if (row < 0 || row >= count) {
    for (int64_t i = threadIdx.x; i < width; i += blockDim.x) d[i] = __float2bfloat16(0.0f);
    return;
  }
  const bf16* s = src + row * width;
  if (width % 8 == 0) {
    const uint4* s4 = reinterpret_cast<const uint4*>(s);
    uint4* d4 = reinterpret_cast<uint4*>(d);
    for (int64_t i = threadIdx.x; i < width / 8; i += blockDim.x) d4[i] = s4[i];
  } else {
    for (int64_t i = threadIdx.x; i < width; i += blockDim.x) d[i] = s[i];
  }
}

// out[i] = bf16(op(a[i], b[i])) over n elements, in a grid-stride loop. kVectors (every pointer
// 16-byte aligned): eight elements a thread and step, in 16-byte loads and stores (the scalar loop
// moved 64 bytes a warp instruction and ran these kernels at a third of the bandwidth), the last
// n % 8 one at a time. The same op on the same floats: the same bits either way.
template <bool kVectors, typename Op>
__device__ __forceinline__ void binary_elementwise(const bf16* __restrict__ a, const bf16* __restrict__ b, int64_t n,
                                                   bf16* __restrict__ out, Op op) {
  const int64_t first = blockIdx.x * int64_t(blockDim.x) + threadIdx.x, stride = int64_t(gridDim.x) * blockDim.x;
  int64_t scalar_from = 0;
  if constexpr (kVectors) {
    const int64_t vectors = n / 8;
    for (int64_t v = first; v < vectors; v += stride) {
      float x[8], y[8];
      unpack_bf16x8(reinterpret_cast<const uint4*>(a)[v], x);
      unpack_bf16x8(reinterpret_cast<const uint4*>(b)[v], y);
#pragma unroll
      for (int i = 0; i < 8; ++i) x[i] = op(x[i], y[i]);
      reinterpret_cast<uint4*>(out)[v] = pack_bf16x8(x);
    }
    scalar_from = 8 * vectors;
  }
  for (int64_t i = scalar_from + first; i < n; i += stride) out[i] = to_bf16(op(to_f32(a[i]), to_f32(b[i])));
}

struct AddOp {
  __device__ float operator()(float a, float b) const { return a + b; }
};
struct SwigluOp {  // (gate, up)
  __device__ float operator()(float gate, float up) const { return round_bf16(silu(gate)) * up; }
};
struct SigmoidGateOp {  // (x, gate)
  __device__ float operator()(float x, float gate) const { return x * round_bf16(sigmoid(gate)); }
};

template <bool kVectors>
__global__ void add_kernel(const bf16* __restrict__ a, const bf16* __restrict__ b, int64_t n, bf16* __restrict__ out) {
  wait_for_prior_grid();
  allow_dependent_grid();
  binary_elementwise<kVectors>(a, b, n, out, AddOp{});
}

template <bool kVectors>
__global__ void swiglu_kernel(const bf16* __restrict__ gate, const bf16* __restrict__ up, int64_t n,
                              bf16* __restrict__ out) {
  binary_elementwise<kVectors>(gate, up, n, out, SwigluOp{});
}

template <bool kVectors>
__global__ void sigmoid_gate_kernel(const bf16* __restrict__ x, const bf16* __restrict__ gate, int64_t n,
                                    bf16* __restrict__ out) {
  wait_for_prior_grid();
  allow_dependent_grid();
  binary_elementwise<kVectors>(x, gate, n, out, SigmoidGateOp{});
}

__global__ void split_q_gate_kernel(const bf16* __restrict__ in, int64_t heads, int64_t head_dim, bf16* __restrict__ q,
                                    bf16* __restrict__ gate) {
  wait_for_prior_grid();
  allow_dependent_grid();
  const int64_t t = blockIdx.x;
  const int64_t width = heads * head_dim;
  for (int64_t i = threadIdx.x; i < width; i += blockDim.x) {
    const int64_t h = i / head_dim, d = i % head_dim;
    const bf16* src = in + t * 2 * width + h * 2 * head_dim;  // [q_h | gate_h]
    q[t * width + i] = src[d];
    gate[t * width + i] = src[head_dim + d];
  }
}

__global__ void bf16_to_f32_kernel(const bf16* __restrict__ x, int64_t n, float* __restrict__ out) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    out[i] = to_f32(x[i]);
}

__global__ void f32_to_bf16_kernel(const float* __restrict__ x, int64_t n, bf16* __restrict__ out) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    out[i] = to_bf16(x[i]);
}

// Grid for a grid-stride loop over n elements: enough blocks to fill the GPU, no more.
unsigned stride_grid(int64_t n) {
  const int64_t blocks = (n + kThreads - 1) / kThreads;
  return unsigned(blocks < 1 ? 1 : (blocks > 65536 ? 65536 : blocks));
}

bool aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

// A binary element-wise kernel over n elements: the vector form where a, b and out allow it, its grid
// sized for eight elements a thread.
using BinaryKernel = void (*)(const bf16*, const bf16*, int64_t, bf16*);
cudaError_t launch_binary(BinaryKernel vectors, BinaryKernel scalars, bool early, const void* a, const void* b,
                          int64_t n, void* out, cudaStream_t stream) {
  if (n <= 0) return n == 0 ? cudaSuccess : cudaErrorInvalidValue;
  const bool vectorised = aligned16(a) && aligned16(b) && aligned16(out);
  const BinaryKernel kernel = vectorised ? vectors : scalars;
  const dim3 grid(stride_grid(vectorised ? (n + 7) / 8 : n));
  const auto* x = static_cast<const bf16*>(a);
  const auto* y = static_cast<const bf16*>(b);
  if (early) return launch_early(kernel, grid, dim3(kThreads), 0, stream, x, y, n, static_cast<bf16*>(out));
  kernel<<<grid, kThreads, 0, stream>>>(x, y, n, static_cast<bf16*>(out));
  return cudaGetLastError();
}

}  // namespace

cudaError_t launch_embed_rows(const void* table, const int32_t* ids, int64_t n, int64_t width, void* out,
                              cudaStream_t stream) {
  return launch_gather_rows(table, ids, n, width, out, stream);
}

cudaError_t launch_embed_rows_slice(const void* table, int64_t first_id, int64_t table_rows, const int32_t* ids,
                                    int64_t n, int64_t width, void* out, cudaStream_t stream) {
  if (n < 0 || width <= 0 || first_id < 0 || table_rows <= 0) return cudaErrorInvalidValue;
  if (n == 0) return cudaSuccess;
  return launch_early(gather_rows_kernel, dim3(unsigned(n)), dim3(128), 0, stream, static_cast<const bf16*>(table), ids,
                      width, first_id, table_rows, static_cast<bf16*>(out));
}

cudaError_t launch_gather_rows(const void* x, const int32_t* rows, int64_t n, int64_t width, void* out,
                               cudaStream_t stream) {
  if (n < 0 || width <= 0) return cudaErrorInvalidValue;
  if (n == 0) return cudaSuccess;
  return launch_early(gather_rows_kernel, dim3(unsigned(n)), dim3(128), 0, stream, static_cast<const bf16*>(x), rows,
                      width, int64_t(0), int64_t(INT64_MAX), static_cast<bf16*>(out));
}

cudaError_t launch_add(const void* a, const void* b, int64_t n, void* out, cudaStream_t stream) {
  return launch_binary(add_kernel<true>, add_kernel<false>, /*early=*/true, a, b, n, out, stream);
}

cudaError_t launch_swiglu(const void* gate, const void* up, int64_t n, void* out, cudaStream_t stream) {
  return launch_binary(swiglu_kernel<true>, swiglu_kernel<false>, /*early=*/false, gate, up, n, out, stream);
}

cudaError_t launch_sigmoid_gate(const void* x, const void* gate, int64_t n, void* out, cudaStream_t stream) {
  return launch_binary(sigmoid_gate_kernel<true>, sigmoid_gate_kernel<false>, /*early=*/true, x, gate, n, out, stream);
}

cudaError_t launch_split_q_gate(const void* in, int64_t tokens, int64_t heads, int64_t head_dim, void* q, void* gate,
                                cudaStream_t stream) {
  if (tokens < 0 || heads <= 0 || head_dim <= 0) return cudaErrorInvalidValue;
  if (tokens == 0) return cudaSuccess;
  return launch_early(split_q_gate_kernel, dim3(unsigned(tokens)), dim3(kThreads), 0, stream,
                      static_cast<const bf16*>(in), heads, head_dim, static_cast<bf16*>(q), static_cast<bf16*>(gate));
}

cudaError_t launch_bf16_to_f32(const void* x, int64_t n, float* out, cudaStream_t stream) {
  if (n <= 0) return n == 0 ? cudaSuccess : cudaErrorInvalidValue;
  bf16_to_f32_kernel<<<stride_grid(n), kThreads, 0, stream>>>(static_cast<const bf16*>(x), n, out);
  return cudaGetLastError();
}

cudaError_t launch_f32_to_bf16(const float* x, int64_t n, void* out, cudaStream_t stream) {
  if (n <= 0) return n == 0 ? cudaSuccess : cudaErrorInvalidValue;
  f32_to_bf16_kernel<<<stride_grid(n), kThreads, 0, stream>>>(x, n, static_cast<bf16*>(out));
  return cudaGetLastError();
}

}  // namespace di::kernels
