#pragma once
// Conversion of a float32 GDN state pool between the two layouts of include/deltainfer/gdn.h:
//   DI_GDN_STATE_KV  [matrices, K, V]  (V contiguous; Hugging Face)
//   DI_GDN_STATE_VK  [matrices, V, K]  (K contiguous; FlashInfer, vLLM)
// where a pool [slots, Hv, ...] is slots * Hv matrices. Each matrix is transposed through 32x32
// shared-memory tiles, so both the reads and the writes are coalesced; any K and V. The same layout
// in and out is a plain device-to-device copy. Values are moved, never computed: the result is
// bitwise the source, transposed.
//
// The conversion is out of place: src and dst must not overlap (a tiled transpose would read tiles
// it has already overwritten). Like the other launchers it takes a params struct and a stream,
// allocates nothing, synchronises nothing, and returns cudaErrorInvalidValue (nothing launched) for
// params that state_layout_params_error() rejects, saying why.
// This header is plain C++ (no CUDA syntax), so host .cpp files may include it.
#include <cuda_runtime.h>

#include <cstdint>
#include <string>

#include <deltainfer/gdn.h>

namespace di::gdn {

struct StateLayoutParams {
  const float* src = nullptr;  // num_matrices matrices in layout `from`
  float* dst = nullptr;        // num_matrices matrices in layout `to`; must not overlap src
  int64_t num_matrices = 0;    // slots * Hv for a whole pool
  int32_t k_dim = 0;           // K
  int32_t v_dim = 0;           // V
  di_gdn_state_layout from = DI_GDN_STATE_KV;
  di_gdn_state_layout to = DI_GDN_STATE_VK;
};

// Empty when launch_state_layout_convert() accepts the params, otherwise what is wrong (names the
// field and its value).
std::string state_layout_params_error(const StateLayoutParams& p);

// Enqueues the conversion (or the copy, when from == to) on the stream.
cudaError_t launch_state_layout_convert(const StateLayoutParams& p, cudaStream_t stream);

}  // namespace di::gdn
