#pragma once
// The Hopper GDN chunked-prefill backend, "sm90": warpgroup MMA (wgmma, sm_90a) for every chunk
// product, the float32 state kept in registers across chunks. It implements the C ABI of
// include/deltainfer/gdn.h and serves:
//   k_dim == v_dim == 128, any Hk, Hv with Hv % Hk == 0, both state layouts, compute capability 9.0
//   exactly (sm_90a code does not run on later architectures), in a binary built with sm_90a code
//   (CMAKE_CUDA_ARCHITECTURES containing 90a), with sm90_prefill_smem_bytes() of opt-in shared memory.
// Batches of few (sequence, value head) pairs and long sequences run context-parallel
// (gdn/context_split.h: the sequences cut into segments, exactly); they alone need scratch
// (scratch_bytes() says how much; run() refuses less, or scratch not 256-byte aligned, as
// DI_GDN_INVALID_ARGUMENT). Beyond the ABI's rules, run() requires q, k, v and out 16-byte aligned and the state
// pools 8-byte aligned, and reads a negative state_indices entry as
// "no slot" (zero initial state, final state not written), like the baseline.
// Plain C++ header (no CUDA syntax).
#include <cstddef>
#include <cstdint>

#include <deltainfer/gdn.h>

namespace di::gdn {

// The backend value; name "sm90".
const di_gdn_prefill_backend& gdn_sm90_backend();

// run() and scratch_bytes() with the context split chosen by the caller (tests, benchmarks):
// segment_tokens 0 is the backend's own choice, -1 no split, a positive multiple of 64 segments of
// that many tokens (a run() with another value is DI_GDN_INVALID_ARGUMENT).
size_t sm90_split_scratch_bytes(const di_gdn_prefill_shape* shape, int32_t segment_tokens);
int sm90_run_split(const di_gdn_prefill_args* args, void* scratch, size_t scratch_size, di_gdn_stream stream,
                   int32_t segment_tokens);

// Dynamic shared memory of one CTA of the sm90 kernel.
size_t sm90_prefill_smem_bytes();

}  // namespace di::gdn
