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

__global__ void add_kernel(const bf16* __restrict__ a, const bf16* __restrict__ b, int64_t n, bf16* __restrict__ out) {
  wait_for_prior_grid();
  allow_dependent_grid();
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    out[i] = to_bf16(to_f32(a[i]) + to_f32(b[i]));
}

__global__ void swiglu_kernel(const bf16* __restrict__ gate, const bf16* __restrict__ up, int64_t n,
                              bf16* __restrict__ out) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    out[i] = to_bf16(round_bf16(silu(to_f32(gate[i]))) * to_f32(up[i]));
}

__global__ void sigmoid_gate_kernel(const bf16* __restrict__ x, const bf16* __restrict__ gate, int64_t n,
                                    bf16* __restrict__ out) {
  wait_for_prior_grid();
  allow_dependent_grid();
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    out[i] = to_bf16(to_f32(x[i]) * round_bf16(sigmoid(to_f32(gate[i]))));
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
  if (n <= 0) return n == 0 ? cudaSuccess : cudaErrorInvalidValue;
  return launch_early(add_kernel, dim3(stride_grid(n)), dim3(kThreads), 0, stream, static_cast<const bf16*>(a),
                      static_cast<const bf16*>(b), n, static_cast<bf16*>(out));
}

cudaError_t launch_swiglu(const void* gate, const void* up, int64_t n, void* out, cudaStream_t stream) {
  if (n <= 0) return n == 0 ? cudaSuccess : cudaErrorInvalidValue;
  swiglu_kernel<<<stride_grid(n), kThreads, 0, stream>>>(static_cast<const bf16*>(gate), static_cast<const bf16*>(up),
                                                         n, static_cast<bf16*>(out));
  return cudaGetLastError();
}

cudaError_t launch_sigmoid_gate(const void* x, const void* gate, int64_t n, void* out, cudaStream_t stream) {
  if (n <= 0) return n == 0 ? cudaSuccess : cudaErrorInvalidValue;
  return launch_early(sigmoid_gate_kernel, dim3(stride_grid(n)), dim3(kThreads), 0, stream, static_cast<const bf16*>(x),
                      static_cast<const bf16*>(gate), n, static_cast<bf16*>(out));
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
