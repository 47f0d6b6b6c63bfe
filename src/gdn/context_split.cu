// The device steps of a context split (gdn/context_split.h): the plan that cuts the sequences into
// segments, and the carry of the state across them (step 2). Step 1 and step 3 are launches of the
// prefill kernel itself (sm90_prefill.cu).
#include "gdn/context_split.h"

#include <cuda_runtime.h>

#include <cstdint>

#include "gdn/chunk_math.cuh"
#include "kernels/cuda_common.cuh"

namespace di::gdn {
namespace {

constexpr int kDim = 128;  // K == V
// The carry: a block per (sequence, head, 16 value columns), S <- M S + N for those columns at each
// carried segment. The chain is one step per carried segment, so a step's latency is what counts, and
// the blocks of 16 heads must fit in one wave (128 blocks). The product runs on tensor cores (mma.sync
// m16n8k8, tf32 operands split big + small in three products: about float32's accuracy, chunk_math.cuh),
// warp w taking M's rows 16 w .. 16 w + 15 and both 8-column tiles. The keys of a k step are
// permuted so that a thread's A operands are float4s of a row (keys 16 i + 4 t .. + 3 hold steps 2 i
// and 2 i + 1) and its B operands float4s of the state stored transposed. Each thread copies its own
// pieces of M into shared memory (cp.async) two steps ahead, into a ring of three buffers, and reads
// back only what it copied, so the copies need no barrier. A step's own work is short: one step
// ahead, the chain waited on each copy (and the segment table's entry before it), ~3.6 us a step.
constexpr int kCarryColumns = 16;
constexpr int kCarryThreads = 256;  // 8 warps: M's 8 row tiles
constexpr int kCarryPieces = 8;     // float4 pieces of keys per thread and row
// The state in shared memory, transposed ([column][key]): 144 floats a column put the float4s that
// the eight threads of a quarter warp read in eight different bank groups.
constexpr int kCarryKeyStride = 144;
constexpr size_t kCarryStateFloats = size_t(kCarryColumns) * kCarryKeyStride;
constexpr size_t kCarryTransferFloats = size_t(kDim) * kDim;
constexpr int kCarryTransferBuffers = 3;
// M's ring ([piece][thread] float4s: a warp reads 512 contiguous bytes), then the state, double-buffered.
constexpr size_t kCarrySmemBytes =
    (kCarryTransferBuffers * kCarryTransferFloats + 2 * kCarryStateFloats) * sizeof(float);

template <typename T>
T* at(void* scratch, size_t offset) {
  return reinterpret_cast<T*>(static_cast<unsigned char*>(scratch) + offset);
}

// One block. Thread 0 counts every sequence's segments (the batches that split have few sequences);
// then the block writes the segment table.
__global__ void plan_segments_kernel(const int32_t* cu_seqlens, int num_seqs, int num_v_heads, int num_sms,
                                     int32_t segment_tokens, int32_t max_segments, int32_t max_carried,
                                     ContextSegment* segments, int32_t* carried_segment, int32_t* seq_first,
                                     int32_t* counts) {
  kernels::allow_dependent_grid();  // step 1 launches at once and waits for the table
  if (threadIdx.x == 0) {
    int32_t segs = 0, carried = 0;
    for (int s = 0; s < num_seqs; ++s) {
      seq_first[s] = segs;
      int32_t n = segments_of(int64_t(cu_seqlens[s + 1]) - cu_seqlens[s], segment_tokens);
      n = min(n, min(max_segments - segs, max_carried - carried + 1));  // the bounds (see the header)
      if (n > 0) segs += n, carried += n - 1;
    }
    seq_first[num_seqs] = segs;
    counts[0] = segs, counts[1] = carried;
    counts[2] = whole_head_ctas(2 * int64_t(carried) * num_v_heads, num_sms) ? 2 : 1;
    counts[3] = whole_head_ctas(int64_t(segs) * num_v_heads, num_sms) ? 2 : 1;
  }
  __syncthreads();
  for (int s = 0; s < num_seqs; ++s) {
    const int32_t first = seq_first[s], n = seq_first[s + 1] - first, begin = cu_seqlens[s];
    const int32_t end = cu_seqlens[s + 1];
    const int32_t carried_before = first - s;  // each earlier sequence has exactly one last segment
    for (int32_t j = int32_t(threadIdx.x); j < n; j += int32_t(blockDim.x)) {
      const bool last = j == n - 1;
      const int32_t seg_begin = begin + j * segment_tokens;
      segments[first + j] = ContextSegment{seg_begin, last ? max(end - seg_begin, 0) : segment_tokens, s,
                                           last ? -1 : carried_before + j, n > 1 ? first + j : -1};
      if (!last) carried_segment[carried_before + j] = first + j;
    }
  }
}

struct CarryParams {
  const ContextSegment* segments;
  const int32_t* seq_first;
  const float* transfer;     // M [carried, Hv, K, K]
  const float* local_state;  // N [carried, Hv, K, V]
  float* entry_state;        // [segments, Hv, K, V]
  const float* initial_state;
  const int32_t* state_indices;
  bool kv_layout;
  int num_v_heads;
};

// Block (sequence, head, 16 value columns) of a sequence of several segments: the columns' entry state
// of its first segment is its initial state (copied: in place, the last segment writes the slot while
// the first may still read it); each carried segment's M and N make the next one's, S <- M S + N
// (M S in split tf32 products in a fixed order, then N added: the same bits every run). From a zero
// initial state the first step is N itself.
// Launched early (programmatic dependent launch): it lets step 3 start at once, so that step 3's
// CTAs prepare their first chunks on the SMs this launch leaves free, and waits for step 1 itself.
__global__ void __launch_bounds__(kCarryThreads) carry_entry_states_kernel(const CarryParams p) {
  kernels::allow_dependent_grid();
  kernels::wait_for_prior_grid();  // M and N come from step 1
  extern __shared__ __align__(16) float carry_smem[];
  constexpr int kBlocksPerHead = kDim / kCarryColumns;
  constexpr MergeProducts kSplit = MergeProducts::split_3xtf32;
  const int Hv = p.num_v_heads;
  const int c0 = int(blockIdx.x % kBlocksPerHead) * kCarryColumns;
  const int head = int(blockIdx.x / kBlocksPerHead) % Hv;
  const int seq = int(blockIdx.x / kBlocksPerHead) / Hv;
  const int first = p.seq_first[seq], end = p.seq_first[seq + 1];
  if (end - first <= 1) return;  // one segment: it reads the sequence's initial state itself
  const int tid = int(threadIdx.x), lane = tid % 32, t = lane % 4;
  const int row = 16 * (tid / 32) + lane / 4;  // this thread's rows: row and row + 8 (mma fragments)
  auto matrix = [&](int64_t index) { return (index * Hv + head) * kDim * kDim; };
  auto state_s = [&](int buffer) {
    return carry_smem + kCarryTransferBuffers * kCarryTransferFloats + buffer * kCarryStateFloats;
  };
  // This thread's float4 piece i (keys 16 i + 4 t .. + 3) of row `row + 8 r` of the M in `buffer`.
  auto transfer_piece = [&](int buffer, int r, int i) {
    return reinterpret_cast<const float4*>(carry_smem + buffer * kCarryTransferFloats +
                                           ((r * kCarryPieces + i) * kCarryThreads + tid) * 4);
  };

  // The entry state of the first segment: the initial state, or zero.
  const int64_t slot = p.state_indices != nullptr ? p.state_indices[seq] : seq;
  const bool zero_entry = p.initial_state == nullptr || slot < 0;
  for (int i = tid; i < kDim * kCarryColumns; i += kCarryThreads) {
    const int key = i / kCarryColumns, col = i % kCarryColumns;
    float x = 0.0f;
    if (!zero_entry) x = p.initial_state[matrix(slot) + (p.kv_layout ? key * kDim + c0 + col : (c0 + col) * kDim + key)];
    state_s(0)[col * kCarryKeyStride + key] = x;
    p.entry_state[matrix(first) + key * kDim + c0 + col] = x;
  }

  // Carried segment g: this thread's pieces of M (rows row, row + 8) into ring buffer `buffer` (one
  // cp.async group, empty where there is no such step or where a zero entry's first step needs no M),
  // and N at this thread's results (rows row + 8 r, columns c0 + 8 n + 2 t, + 1) into registers.
  float2 n[3][2][2];  // N of this step and the next two
  auto load_step = [&](int g, int buffer, bool with_transfer, float2 (&nn)[2][2]) {
    if (g + 1 >= end) {
      kernels::cp_async_commit();
      return;
    }
    const int64_t carried = p.segments[g].carried;
    if (with_transfer) {
      const float* src = p.transfer + matrix(carried);
#pragma unroll
      for (int r = 0; r < 2; ++r)
#pragma unroll
        for (int i = 0; i < kCarryPieces; ++i)
          kernels::cp_async_16(const_cast<float4*>(transfer_piece(buffer, r, i)),
                               src + (row + 8 * r) * kDim + 16 * i + 4 * t, 16);
    }
    kernels::cp_async_commit();
#pragma unroll
    for (int r = 0; r < 2; ++r)
#pragma unroll
      for (int nt = 0; nt < 2; ++nt)
        nn[r][nt] = *reinterpret_cast<const float2*>(p.local_state + matrix(carried) + (row + 8 * r) * kDim + c0 +
                                                     8 * nt + 2 * t);
  };
  load_step(first, 0, !zero_entry, n[0]);
  load_step(first + 1, 1, true, n[1]);
  __syncthreads();  // the first entry state is in shared memory

  for (int g = first, ring = 0, buffer = 0; g + 1 < end; ++g, ring = (ring + 1) % kCarryTransferBuffers, buffer ^= 1) {
    // Two steps ahead, into the buffer the step before read (this thread's own pieces: its reads are done).
    load_step(g + 2, (ring + 2) % kCarryTransferBuffers, true, n[2]);
    kernels::cp_async_wait_group<2>();  // this step's group; the next two may still be in flight
    float out[2][2][2];  // [row + 8 r][column tile n][column 2 t + j]
    if (g == first && zero_entry) {
      // M 0 + N = N (M is finite): no product.
#pragma unroll
      for (int r = 0; r < 2; ++r)
#pragma unroll
        for (int nt = 0; nt < 2; ++nt) out[r][nt][0] = n[0][r][nt].x, out[r][nt][1] = n[0][r][nt].y;
    } else {
      const float* s_s = state_s(buffer);
      float acc[2][4] = {};  // per column tile, the m16n8 accumulator fragment
#pragma unroll
      for (int i = 0; i < kCarryPieces; ++i) {
        const float4 m0 = *transfer_piece(ring, 0, i), m1 = *transfer_piece(ring, 1, i);
        float4 sv[2];
#pragma unroll
        for (int nt = 0; nt < 2; ++nt)
          sv[nt] = *reinterpret_cast<const float4*>(s_s + (8 * nt + lane / 4) * kCarryKeyStride + 16 * i + 4 * t);
        // k step 2 i: keys 16 i + 4 t and + 1 as the step's rows t and t + 4; k step 2 i + 1: + 2, + 3.
        const MergeOperand<kSplit> a_even({m0.x, m1.x, m0.y, m1.y}), a_odd({m0.z, m1.z, m0.w, m1.w});
#pragma unroll
        for (int nt = 0; nt < 2; ++nt) {
          merge_mma(acc[nt], a_even, sv[nt].x, sv[nt].y);
          merge_mma(acc[nt], a_odd, sv[nt].z, sv[nt].w);
        }
      }
#pragma unroll
      for (int r = 0; r < 2; ++r)
#pragma unroll
        for (int nt = 0; nt < 2; ++nt)
          out[r][nt][0] = acc[nt][2 * r] + n[0][r][nt].x, out[r][nt][1] = acc[nt][2 * r + 1] + n[0][r][nt].y;
    }
    // The next entry state: to the scratch, and into the other buffer for the next step (its readers,
    // a step back, passed the barrier below).
    float* next_s = state_s(buffer ^ 1);
#pragma unroll
    for (int r = 0; r < 2; ++r)
#pragma unroll
      for (int nt = 0; nt < 2; ++nt) {
        const int col = 8 * nt + 2 * t;
        *reinterpret_cast<float2*>(p.entry_state + matrix(g + 1) + (row + 8 * r) * kDim + c0 + col) =
            make_float2(out[r][nt][0], out[r][nt][1]);
        next_s[col * kCarryKeyStride + row + 8 * r] = out[r][nt][0];
        next_s[(col + 1) * kCarryKeyStride + row + 8 * r] = out[r][nt][1];
      }
    __syncthreads();  // the next state is whole before any thread reads it
#pragma unroll
    for (int r = 0; r < 2; ++r)
#pragma unroll
      for (int nt = 0; nt < 2; ++nt) n[0][r][nt] = n[1][r][nt], n[1][r][nt] = n[2][r][nt];
  }
}

}  // namespace

int launch_context_plan(const ContextSplit& split, const ContextSplitScratch& layout, void* scratch,
                        const int32_t* cu_seqlens, int num_seqs, int num_v_heads, int num_sms, di_gdn_stream stream) {
  plan_segments_kernel<<<1, 256, 0, reinterpret_cast<cudaStream_t>(stream)>>>(
      cu_seqlens, num_seqs, num_v_heads, num_sms, split.segment_tokens, split.max_segments, split.max_carried,
      at<ContextSegment>(scratch, layout.segments), at<int32_t>(scratch, layout.carried_segment),
      at<int32_t>(scratch, layout.seq_first), at<int32_t>(scratch, layout.counts));
  return cudaGetLastError() == cudaSuccess ? DI_GDN_OK : DI_GDN_LAUNCH_FAILED;
}

int launch_context_carry(const ContextSplitScratch& layout, void* scratch, const di_gdn_prefill_args& args,
                         di_gdn_stream stream) {
  const CarryParams p{at<const ContextSegment>(scratch, layout.segments),
                      at<const int32_t>(scratch, layout.seq_first),
                      at<const float>(scratch, layout.transfer),
                      at<const float>(scratch, layout.local_state),
                      at<float>(scratch, layout.entry_state),
                      args.initial_state,
                      args.state_indices,
                      args.state_layout == DI_GDN_STATE_KV,
                      args.geometry.num_v_heads};
  const int64_t blocks = int64_t(args.num_seqs) * args.geometry.num_v_heads * (kDim / kCarryColumns);
  if (kernels::allow_dynamic_shared_memory(reinterpret_cast<const void*>(carry_entry_states_kernel), kCarrySmemBytes) !=
      cudaSuccess)
    return DI_GDN_LAUNCH_FAILED;
  return kernels::launch_early(carry_entry_states_kernel, dim3(unsigned(blocks)), dim3(kCarryThreads),
                               kCarrySmemBytes, reinterpret_cast<cudaStream_t>(stream), p) == cudaSuccess
             ? DI_GDN_OK
             : DI_GDN_LAUNCH_FAILED;
}

}  // namespace di::gdn
