#pragma once
// Host-side pieces every GDN prefill backend's C ABI entry points share: refusals with a reason,
// the argument checks of include/deltainfer/gdn.h, and the current device's description.
#include <cuda_runtime.h>

#include <cstdarg>
#include <cstdint>
#include <cstdio>

#include <deltainfer/gdn.h>

#include "gdn/context_split.h"

namespace di::gdn {

// Writes the reason (printf format, truncated to the capacity) and returns DI_GDN_UNSUPPORTED.
__attribute__((format(printf, 3, 4))) inline int refuse(char* reason, size_t capacity, const char* format, ...) {
  if (reason != nullptr && capacity > 0) {
    va_list args;
    va_start(args, format);
    vsnprintf(reason, capacity, format, args);
    va_end(args);
  }
  return DI_GDN_UNSUPPORTED;
}

inline int accept(char* reason, size_t capacity) {
  if (reason != nullptr && capacity > 0) reason[0] = '\0';
  return DI_GDN_OK;
}

// The geometry and layout every current backend serves (K == V == 128, Hv a multiple of Hk, either
// layout); `backend` names the one refusing.
inline int check_geometry(const char* backend, const di_gdn_geometry& g, di_gdn_state_layout layout, char* reason,
                          size_t capacity) {
  if (g.num_k_heads <= 0 || g.num_v_heads <= 0)
    return refuse(reason, capacity, "head counts must be positive, got num_k_heads %d, num_v_heads %d", g.num_k_heads,
                  g.num_v_heads);
  if (g.k_dim != 128 || g.v_dim != 128)
    return refuse(reason, capacity, "head dims k_dim %d, v_dim %d unsupported: %s needs k_dim == v_dim == 128", g.k_dim,
                  g.v_dim, backend);
  if (g.num_v_heads % g.num_k_heads != 0)
    return refuse(reason, capacity, "num_v_heads (%d) is not a multiple of num_k_heads (%d)", g.num_v_heads,
                  g.num_k_heads);
  if (layout != DI_GDN_STATE_KV && layout != DI_GDN_STATE_VK)
    return refuse(reason, capacity, "state layout %d unknown: %s serves DI_GDN_STATE_KV (0) and DI_GDN_STATE_VK (1)",
                  int(layout), backend);
  return DI_GDN_OK;
}

inline bool aligned(const void* p, size_t bytes) { return reinterpret_cast<uintptr_t>(p) % bytes == 0; }

// The ABI's rule for max_seq_tokens (di_gdn_prefill_shape): 0 (not known), or a longest sequence the
// batch can have.
inline bool length_hint_ok(int32_t num_seqs, int64_t total_tokens, int64_t max_seq_tokens) {
  return max_seq_tokens == 0 || possible_longest_sequence(num_seqs, total_tokens, max_seq_tokens);
}

// The ABI's own rules for a run() call (DI_GDN_INVALID_ARGUMENT when broken), before any CUDA call.
inline int check_run_args(const di_gdn_prefill_args* args) {
  if (args == nullptr || args->abi_version != DI_GDN_ABI_VERSION) return DI_GDN_INVALID_ARGUMENT;
  const di_gdn_prefill_args& a = *args;
  const di_gdn_geometry& g = a.geometry;
  if (a.num_seqs < 0 || a.total_tokens < 0) return DI_GDN_INVALID_ARGUMENT;
  if (!length_hint_ok(a.num_seqs, a.total_tokens, a.max_seq_tokens)) return DI_GDN_INVALID_ARGUMENT;
  if (g.num_k_heads <= 0 || g.num_v_heads <= 0 || g.k_dim <= 0 || g.v_dim <= 0) return DI_GDN_INVALID_ARGUMENT;
  if (a.state_layout != DI_GDN_STATE_KV && a.state_layout != DI_GDN_STATE_VK) return DI_GDN_INVALID_ARGUMENT;
  if (a.num_seqs > 0 && a.cu_seqlens == nullptr) return DI_GDN_INVALID_ARGUMENT;
  if (a.total_tokens > 0 && (a.q == nullptr || a.k == nullptr || a.v == nullptr || a.g == nullptr ||
                             a.beta == nullptr || a.out == nullptr))
    return DI_GDN_INVALID_ARGUMENT;
  return DI_GDN_OK;
}

// The current device as di_gdn_device; false when the runtime cannot say.
inline bool current_device(di_gdn_device& info) {
  int device = 0, optin = 0;
  if (cudaGetDevice(&device) != cudaSuccess ||
      cudaDeviceGetAttribute(&info.sm_major, cudaDevAttrComputeCapabilityMajor, device) != cudaSuccess ||
      cudaDeviceGetAttribute(&info.sm_minor, cudaDevAttrComputeCapabilityMinor, device) != cudaSuccess ||
      cudaDeviceGetAttribute(&info.num_sms, cudaDevAttrMultiProcessorCount, device) != cudaSuccess ||
      cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, device) != cudaSuccess)
    return false;
  info.shared_memory_per_block_optin = size_t(optin);
  return true;
}

}  // namespace di::gdn
