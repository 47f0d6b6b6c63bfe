// The device steps of a context split (gdn/context_split.h): the plan that cuts the sequences into
// segments, and the carry of the state across them (step 2). Step 1 and step 3 are launches of the
// prefill kernel itself (sm90_prefill.cu).
#include "gdn/context_split.h"

#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/cuda_common.cuh"

namespace di::gdn {
namespace {

constexpr int kDim = 128;  // K == V
// The carry: a block per (sequence, head, 8 value columns), each thread 4 rows of one column. The
// carry is a chain of one step per carried segment, so a step's latency is what counts: M of the next
// step is copied into shared memory (cp.async, double-buffered) while this one multiplies.
constexpr int kCarryColumns = 8;
constexpr int kCarryThreads = 256;
constexpr int kCarryRowGroups = kCarryThreads / kCarryColumns;  // 32: thread rows g, g + 32, g + 64, g + 96
constexpr int kCarryRows = kDim / kCarryRowGroups;
// Floats per row of M in shared memory: 16-byte rows for the copies, and the four rows a warp reads
// at once (consecutive) four banks apart.
constexpr int kTransferStride = kDim + 4;
constexpr size_t kTransferBytes = size_t(kDim) * kTransferStride * sizeof(float);
constexpr size_t kCarrySmemBytes = 2 * kTransferBytes + size_t(kDim) * kCarryColumns * sizeof(float);

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

// Block (sequence, head, 8 value columns) of a sequence of several segments: the columns' entry state
// of its first segment is its initial state (copied: in place, the last segment writes the slot while
// the first may still read it); each carried segment's M and N make the next one's, S <- M S + N in float32
// (M S summed over keys in order, then N added: the same bits every run).
__global__ void __launch_bounds__(kCarryThreads) carry_entry_states_kernel(const CarryParams p) {
  extern __shared__ __align__(16) float carry_smem[];
  float* const s_s = carry_smem + 2 * kTransferBytes / sizeof(float);  // [K][kCarryColumns]
  constexpr int kBlocksPerHead = kDim / kCarryColumns;
  const int Hv = p.num_v_heads;
  const int c0 = int(blockIdx.x % kBlocksPerHead) * kCarryColumns;
  const int head = int(blockIdx.x / kBlocksPerHead) % Hv;
  const int seq = int(blockIdx.x / kBlocksPerHead) / Hv;
  const int first = p.seq_first[seq], end = p.seq_first[seq + 1];
  if (end - first <= 1) return;  // one segment: it reads the sequence's initial state itself
  const int tid = int(threadIdx.x);
  auto matrix = [&](int64_t index) { return (index * Hv + head) * kDim * kDim; };
  auto transfer_s = [&](int step) { return carry_smem + (step % 2) * (kTransferBytes / sizeof(float)); };
  // M of carried segment `g` into buffer `step % 2`: 16 bytes a copy, 16 copies a thread.
  auto copy_transfer = [&](int g, int step) {
    const float* m = p.transfer + matrix(p.segments[g].carried);
    float* dst = transfer_s(step);
#pragma unroll
    for (int i = tid; i < kDim * kDim / 4; i += kCarryThreads)
      kernels::cp_async_16(dst + (i / (kDim / 4)) * kTransferStride + (i % (kDim / 4)) * 4, m + 4 * i, 16);
    kernels::cp_async_commit();
  };
  if (first + 1 < end) copy_transfer(first, 0);

  const int64_t slot = p.state_indices != nullptr ? p.state_indices[seq] : seq;
  for (int i = tid; i < kDim * kCarryColumns; i += kCarryThreads) {
    const int key = i / kCarryColumns, col = c0 + i % kCarryColumns;
    float x = 0.0f;
    if (p.initial_state != nullptr && slot >= 0)
      x = p.initial_state[matrix(slot) + (p.kv_layout ? key * kDim + col : col * kDim + key)];
    s_s[i] = x;
    p.entry_state[matrix(first) + key * kDim + col] = x;
  }
  const int col = tid % kCarryColumns, group = tid / kCarryColumns;
  for (int g = first; g + 1 < end; ++g) {
    const int step = g - first;
    const bool next = g + 2 < end;  // another carried segment after this one
    if (next) copy_transfer(g + 1, step + 1);
    const float* n = p.local_state + matrix(p.segments[g].carried);
    float acc[kCarryRows];
#pragma unroll
    for (int r = 0; r < kCarryRows; ++r) acc[r] = n[(group + kCarryRowGroups * r) * kDim + c0 + col];
    if (next) kernels::cp_async_wait_group<1>();
    else kernels::cp_async_wait_group<0>();
    __syncthreads();  // this step's M has landed for every thread; the state is written
    const float* m_s = transfer_s(step);
    float sum[kCarryRows] = {};
    for (int k = 0; k < kDim; k += 4) {
      const float s0 = s_s[k * kCarryColumns + col], s1 = s_s[(k + 1) * kCarryColumns + col],
                  s2 = s_s[(k + 2) * kCarryColumns + col], s3 = s_s[(k + 3) * kCarryColumns + col];
#pragma unroll
      for (int r = 0; r < kCarryRows; ++r) {
        const float4 m = *reinterpret_cast<const float4*>(m_s + (group + kCarryRowGroups * r) * kTransferStride + k);
        sum[r] = fmaf(m.x, s0, sum[r]);
        sum[r] = fmaf(m.y, s1, sum[r]);
        sum[r] = fmaf(m.z, s2, sum[r]);
        sum[r] = fmaf(m.w, s3, sum[r]);
      }
    }
    __syncthreads();  // every read of the state and of this M is done before either is replaced
#pragma unroll
    for (int r = 0; r < kCarryRows; ++r) {
      const int row = group + kCarryRowGroups * r;
      const float x = sum[r] + acc[r];
      s_s[row * kCarryColumns + col] = x;
      p.entry_state[matrix(g + 1) + row * kDim + c0 + col] = x;
    }
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
  if (cudaFuncSetAttribute(carry_entry_states_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                           int(kCarrySmemBytes)) != cudaSuccess)
    return DI_GDN_LAUNCH_FAILED;
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
  carry_entry_states_kernel<<<unsigned(blocks), kCarryThreads, kCarrySmemBytes,
                              reinterpret_cast<cudaStream_t>(stream)>>>(p);
  return cudaGetLastError() == cudaSuccess ? DI_GDN_OK : DI_GDN_LAUNCH_FAILED;
}

}  // namespace di::gdn
