#pragma once
// The portable GDN chunked-prefill backend, "baseline": plain CUDA for sm_80 and newer (mma.sync for
// the chunk's bf16 Gram matrices, float32 FMA for everything that touches the state; no wgmma/TMA).
// It implements the C ABI of include/deltainfer/gdn.h and serves:
//   k_dim == v_dim == 128, any Hk, Hv with Hv % Hk == 0, both state layouts (DI_GDN_STATE_KV and
//   DI_GDN_STATE_VK), compute capability 8.0 or newer with enough opt-in shared memory per block
//   (baseline_prefill_smem_bytes(), 95 KiB: every sm_80+ part has at least 99 KiB).
// It needs no scratch (scratch_bytes() is 0). Beyond the ABI's own rules, run() requires q and k
// 16-byte aligned, v and out 8-byte aligned and the state pools 16-byte aligned (cudaMalloc gives 256),
// and reads a negative state_indices entry as "no slot": that sequence starts from a zero state and
// its final state is not written.
// This header is plain C++ (no CUDA syntax), so host .cpp files may include it.
#include <cstddef>

#include <deltainfer/gdn.h>

namespace di::gdn {

// The backend value; name "baseline".
const di_gdn_prefill_backend& gdn_baseline_backend();

// Dynamic shared memory one CTA of the baseline kernel uses (what supports() checks against
// di_gdn_device::shared_memory_per_block_optin).
size_t baseline_prefill_smem_bytes();

}  // namespace di::gdn
