#pragma once
// Memory-bound element-wise kernels of the forward pass on bf16 activations. Each rounds exactly
// where the CPU reference in Precision::bf16 rounds (kernels/*/ref.cpp), so that GPU and CPU agree
// to float32 reordering. Pointers are device memory; launchers enqueue on `stream`, allocate
// nothing and return the launch status.
#include <cuda_runtime.h>

#include <cstdint>

namespace di::kernels {

// out[t, :] = table[ids[t], :]       table bf16 [vocab, width]; ids int32 [n]; out bf16 [n, width]
cudaError_t launch_embed_rows(const void* table, const int32_t* ids, int64_t n, int64_t width, void* out,
                              cudaStream_t stream);
// The same from a vocabulary slice, table = rows [first_id, first_id + table_rows): ids outside it
// give zero rows (a tensor-parallel rank's embedding; an all-reduce adds the ranks' rows)
cudaError_t launch_embed_rows_slice(const void* table, int64_t first_id, int64_t table_rows, const int32_t* ids,
                                    int64_t n, int64_t width, void* out, cudaStream_t stream);
// out[i, :] = x[rows[i], :]          x bf16 [*, width]; rows int32 [n]
cudaError_t launch_gather_rows(const void* x, const int32_t* rows, int64_t n, int64_t width, void* out,
                               cudaStream_t stream);
// out = bf16(a + b)                  [n]
cudaError_t launch_add(const void* a, const void* b, int64_t n, void* out, cudaStream_t stream);
// out = bf16(bf16(silu(gate)) * up)  [n]
cudaError_t launch_swiglu(const void* gate, const void* up, int64_t n, void* out, cudaStream_t stream);
// out = bf16(x * bf16(sigmoid(gate)))  [n]
cudaError_t launch_sigmoid_gate(const void* x, const void* gate, int64_t n, void* out, cudaStream_t stream);
// in [tokens, heads, 2, head_dim] (per head [q | gate]) -> q, gate [tokens, heads, head_dim]
cudaError_t launch_split_q_gate(const void* in, int64_t tokens, int64_t heads, int64_t head_dim, void* q,
                                void* gate, cudaStream_t stream);
// out[i] = float(x[i])               bf16 -> f32
cudaError_t launch_bf16_to_f32(const void* x, int64_t n, float* out, cudaStream_t stream);
// out[i] = bf16(x[i])                f32 -> bf16 (round to nearest even)
cudaError_t launch_f32_to_bf16(const float* x, int64_t n, void* out, cudaStream_t stream);

}  // namespace di::kernels
