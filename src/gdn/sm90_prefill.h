#pragma once
// The Hopper GDN chunked-prefill backend, "sm90": warpgroup MMA (wgmma, sm_90a) for every chunk
// product, the float32 state kept in registers across chunks. It implements the C ABI of
// include/deltainfer/gdn.h and serves:
//   k_dim == v_dim == 128, any Hk, Hv with Hv % Hk == 0, both state layouts, compute capability 9.0
//   exactly (sm_90a code does not run on later architectures), in a binary built with sm_90a code
//   (CMAKE_CUDA_ARCHITECTURES containing 90a), with sm90_prefill_smem_bytes() of opt-in shared memory.
// No scratch. Beyond the ABI's rules, run() requires q, k, v and out 16-byte aligned and the state
// pools 8-byte aligned, and reads a negative state_indices entry as
// "no slot" (zero initial state, final state not written), like the baseline.
// Plain C++ header (no CUDA syntax).
#include <cstddef>

#include <deltainfer/gdn.h>

namespace di::gdn {

// The backend value; name "sm90".
const di_gdn_prefill_backend& gdn_sm90_backend();

// Dynamic shared memory of one CTA of the sm90 kernel.
size_t sm90_prefill_smem_bytes();

}  // namespace di::gdn
