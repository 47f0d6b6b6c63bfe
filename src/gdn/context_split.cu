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
// The carry: a block per (sequence, head, 16 value columns), S <- M S + N for those columns at each
// carried segment. The chain is one step per carried segment, so a step's latency is what counts, and
// the blocks of 16 heads must fit in one wave (128 blocks). A quad of threads owns rows p and p + 64 of
// M, each thread a quarter of the keys (the float4 pieces 4q + 16i, i = 0..7, so that a quad reads 64
// contiguous bytes of a row); each thread copies its own pieces of the next step's M into shared memory
// (cp.async) while this step multiplies, and reads back only what it copied, so the copies need no
// barrier. The state's 16 columns sit in shared memory, read as float4 broadcasts (the four quarters'
// rows in four different bank groups); the quad then sums its quarters by shuffles, each thread keeping
// 8 of the 32 sums.
constexpr int kCarryColumns = 16;
constexpr int kCarryThreads = 256;
constexpr int kCarryPieces = 8;  // float4 pieces of keys per thread and row
constexpr size_t kCarryStateFloats = size_t(kDim) * kCarryColumns;
constexpr size_t kCarryTransferFloats = size_t(kDim) * kDim;
// M double-buffered ([piece][thread] float4s: a warp reads 512 contiguous bytes), then the state, too.
constexpr size_t kCarrySmemBytes = (2 * kCarryTransferFloats + 2 * kCarryStateFloats) * sizeof(float);

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

// Where float4 `slot` (columns 4 slot .. 4 slot + 3) of the state's row `key` sits in shared memory:
// the slots of a row are permuted by bits 2-3 of the key, so that the rows 4q + 16i + e the four
// quarters read at once fall in four different bank groups.
__device__ __forceinline__ int carry_state_index(int key, int slot) {
  return key * kCarryColumns + 4 * (slot ^ ((key >> 2) & 3));
}

// Block (sequence, head, 16 value columns) of a sequence of several segments: the columns' entry state
// of its first segment is its initial state (copied: in place, the last segment writes the slot while
// the first may still read it); each carried segment's M and N make the next one's, S <- M S + N in
// float32 (each quarter of the keys summed in order, the quarters as (q0 + q1) + (q2 + q3), then N
// added: the same bits every run). From a zero initial state the first step is N itself.
// Launched early (programmatic dependent launch): it lets step 3 start at once, so that step 3's
// CTAs prepare their first chunks on the SMs this launch leaves free, and waits for step 1 itself.
__global__ void __launch_bounds__(kCarryThreads) carry_entry_states_kernel(const CarryParams p) {
  kernels::allow_dependent_grid();
  kernels::wait_for_prior_grid();  // M and N come from step 1
  extern __shared__ __align__(16) float carry_smem[];
  constexpr int kBlocksPerHead = kDim / kCarryColumns;
  const int Hv = p.num_v_heads;
  const int c0 = int(blockIdx.x % kBlocksPerHead) * kCarryColumns;
  const int head = int(blockIdx.x / kBlocksPerHead) % Hv;
  const int seq = int(blockIdx.x / kBlocksPerHead) / Hv;
  const int first = p.seq_first[seq], end = p.seq_first[seq + 1];
  if (end - first <= 1) return;  // one segment: it reads the sequence's initial state itself
  const int tid = int(threadIdx.x), lane = tid % 32;
  const int quarter = lane % 4, row0 = tid / 4;  // rows row0 and row0 + 64, keys 4 quarter + 16 i + e
  // After the sums: this thread's 8 results, row `out_row`, columns c0 + out_col .. + 7.
  const int out_row = row0 + 64 * ((quarter >> 1) & 1), out_col = 8 * (quarter & 1);
  auto matrix = [&](int64_t index) { return (index * Hv + head) * kDim * kDim; };
  auto state_s = [&](int buffer) { return carry_smem + 2 * kCarryTransferFloats + buffer * kCarryStateFloats; };
  // This thread's float4 piece i of row row0 + 64 r of the M in buffer `buffer`.
  auto transfer_piece = [&](int buffer, int r, int i) {
    return carry_smem + buffer * kCarryTransferFloats + ((r * kCarryPieces + i) * kCarryThreads + tid) * 4;
  };

  // The entry state of the first segment: the initial state, or zero.
  const int64_t slot = p.state_indices != nullptr ? p.state_indices[seq] : seq;
  const bool zero_entry = p.initial_state == nullptr || slot < 0;
  for (int i = tid; i < kDim * kCarryColumns; i += kCarryThreads) {
    const int key = i / kCarryColumns, col = c0 + i % kCarryColumns;
    float x = 0.0f;
    if (!zero_entry) x = p.initial_state[matrix(slot) + (p.kv_layout ? key * kDim + col : col * kDim + key)];
    state_s(0)[carry_state_index(key, (i % kCarryColumns) / 4) + i % 4] = x;
    p.entry_state[matrix(first) + key * kDim + col] = x;
  }

  // Carried segment g: this thread's pieces of M's rows row0 and row0 + 64 into shared memory buffer
  // `buffer` (one cp.async group), N's 8 results into registers; issued a step ahead.
  float4 n[2], n_next[2];
  auto load_step = [&](int g, int buffer, float4 (&nn)[2]) {
    const float* src = p.transfer + matrix(p.segments[g].carried);
#pragma unroll
    for (int r = 0; r < 2; ++r)
#pragma unroll
      for (int i = 0; i < kCarryPieces; ++i)
        kernels::cp_async_16(transfer_piece(buffer, r, i), src + (row0 + 64 * r) * kDim + 16 * i + 4 * quarter, 16);
    kernels::cp_async_commit();
    const float4* nsrc = reinterpret_cast<const float4*>(p.local_state + matrix(p.segments[g].carried) +
                                                         out_row * kDim + c0 + out_col);
    nn[0] = nsrc[0], nn[1] = nsrc[1];
  };
  load_step(first, 0, n);
  __syncthreads();  // the first entry state is in shared memory

  for (int g = first, buffer = 0; g + 1 < end; ++g, buffer ^= 1) {
    // The next M goes into the buffer the step before read (this thread's own pieces: its reads are done).
    if (g + 2 < end) {
      load_step(g + 1, buffer ^ 1, n_next);
      kernels::cp_async_wait_group<1>();
    } else {
      kernels::cp_async_wait_group<0>();
    }
    float out[8];
    if (g == first && zero_entry) {
      // M 0 + N = N (M is finite): no product.
      out[0] = n[0].x, out[1] = n[0].y, out[2] = n[0].z, out[3] = n[0].w;
      out[4] = n[1].x, out[5] = n[1].y, out[6] = n[1].z, out[7] = n[1].w;
    } else {
      const float* s_s = state_s(buffer);
      float acc[2][kCarryColumns] = {};
#pragma unroll
      for (int i = 0; i < kCarryPieces; ++i) {
        const float4 m0 = *reinterpret_cast<const float4*>(transfer_piece(buffer, 0, i));
        const float4 m1 = *reinterpret_cast<const float4*>(transfer_piece(buffer, 1, i));
        const float mr[2][4] = {{m0.x, m0.y, m0.z, m0.w}, {m1.x, m1.y, m1.z, m1.w}};
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const int key = 16 * i + 4 * quarter + e;
#pragma unroll
          for (int slot4 = 0; slot4 < kCarryColumns / 4; ++slot4) {
            const float4 s = *reinterpret_cast<const float4*>(s_s + carry_state_index(key, slot4));
#pragma unroll
            for (int r = 0; r < 2; ++r) {
              acc[r][4 * slot4 + 0] = fmaf(mr[r][e], s.x, acc[r][4 * slot4 + 0]);
              acc[r][4 * slot4 + 1] = fmaf(mr[r][e], s.y, acc[r][4 * slot4 + 1]);
              acc[r][4 * slot4 + 2] = fmaf(mr[r][e], s.z, acc[r][4 * slot4 + 2]);
              acc[r][4 * slot4 + 3] = fmaf(mr[r][e], s.w, acc[r][4 * slot4 + 3]);
            }
          }
        }
      }
      // The quad's sums: quarters q and q ^ 1 over the 8 columns this thread keeps (both rows), then
      // q and q ^ 2 over the row it keeps. a + b and b + a are the same bits, so both sides agree.
      const bool high_cols = (quarter & 1) != 0, high_row = (quarter & 2) != 0;
      float half[2][8];
#pragma unroll
      for (int r = 0; r < 2; ++r)
#pragma unroll
        for (int j = 0; j < 8; ++j) {
          const float keep = high_cols ? acc[r][8 + j] : acc[r][j];
          const float give = high_cols ? acc[r][j] : acc[r][8 + j];
          half[r][j] = keep + __shfl_xor_sync(0xffffffffu, give, 1);
        }
#pragma unroll
      for (int j = 0; j < 8; ++j) {
        const float keep = high_row ? half[1][j] : half[0][j];
        const float give = high_row ? half[0][j] : half[1][j];
        out[j] = keep + __shfl_xor_sync(0xffffffffu, give, 2);
      }
      const float nv[8] = {n[0].x, n[0].y, n[0].z, n[0].w, n[1].x, n[1].y, n[1].z, n[1].w};
#pragma unroll
      for (int j = 0; j < 8; ++j) out[j] += nv[j];
    }
    // The next entry state: to the scratch, and into the other buffer for the next step (its readers,
    // two steps back, passed the barrier below).
    float4* dst = reinterpret_cast<float4*>(p.entry_state + matrix(g + 1) + out_row * kDim + c0 + out_col);
    dst[0] = make_float4(out[0], out[1], out[2], out[3]);
    dst[1] = make_float4(out[4], out[5], out[6], out[7]);
    float* next_s = state_s(buffer ^ 1);
    *reinterpret_cast<float4*>(next_s + carry_state_index(out_row, out_col / 4)) = make_float4(out[0], out[1], out[2], out[3]);
    *reinterpret_cast<float4*>(next_s + carry_state_index(out_row, out_col / 4 + 1)) =
        make_float4(out[4], out[5], out[6], out[7]);
    __syncthreads();  // the next state is whole before any thread reads it
    n[0] = n_next[0], n[1] = n_next[1];
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
