/* deltainfer: the C ABI of a Gated DeltaNet (GDN) chunked-prefill backend.
 *
 * Every GDN prefill backend (the portable baseline, the Hopper kernel, kernels compiled elsewhere and
 * loaded from an artifact) is a di_gdn_prefill_backend: four plain C entry points that take the
 * structs below. Nothing here depends on C++ or on a CUDA header, so a backend built outside this
 * repository plugs in through the same boundary.
 *
 * The math, per sequence and value head h (key head h / (Hv / Hk)), state S [K, V], token t:
 *     S <- exp(g_t) S;   v' = beta_t (v_t - S^T k_t);   S <- S + k_t v'^T;   o_t = scale S^T q_t
 * q and k are L2-normalised (x / sqrt(sum x^2 + 1e-6), float32), either by the caller or, with
 * DI_GDN_QK_L2NORM, by the backend from the raw bf16 rows; they are not scaled (scale applies to the
 * output). g is the log decay (<= 0); the state is float32.
 */
#ifndef DELTAINFER_GDN_H
#define DELTAINFER_GDN_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* 2: di_gdn_prefill_shape and di_gdn_prefill_args carry max_seq_tokens. */
#define DI_GDN_ABI_VERSION 2

/* A CUDA stream (the same type as cudaStream_t) without including a CUDA header. */
typedef struct CUstream_st* di_gdn_stream;

typedef enum {
  DI_GDN_OK = 0,
  DI_GDN_INVALID_ARGUMENT = 1, /* null pointer, negative count, wrong ABI version, max_seq_tokens out of range */
  DI_GDN_UNSUPPORTED = 2,      /* the backend's supports() refuses this case */
  DI_GDN_LAUNCH_FAILED = 3,    /* the CUDA launch reported an error */
} di_gdn_status;

/* Orientation of one head's float32 state matrix in memory. */
typedef enum {
  DI_GDN_STATE_KV = 0, /* [H, K, V]: V contiguous (Hugging Face, flash-linear-attention default) */
  DI_GDN_STATE_VK = 1, /* [H, V, K]: K contiguous (FlashInfer, vLLM) */
} di_gdn_state_layout;

/* Flags of a prefill call (di_gdn_prefill_args.flags). Every backend implements every flag. */
enum {
  /* q and k are the raw rows: the backend L2-normalises each head's row in float32. Without the
   * flag they arrive normalised (and rounded to bf16, one rounding more than the float32 norm of
   * the reference implementations). */
  DI_GDN_QK_L2NORM = 1u << 0,
};

typedef struct {
  int32_t num_k_heads; /* Hk: heads of q and k */
  int32_t num_v_heads; /* Hv: heads of v, g, beta, the state and the output; Hv % Hk == 0 */
  int32_t k_dim;       /* K */
  int32_t v_dim;       /* V */
} di_gdn_geometry;

typedef struct {
  int32_t sm_major, sm_minor; /* compute capability */
  int32_t num_sms;
  size_t shared_memory_per_block_optin; /* bytes */
} di_gdn_device;

/* What scratch_bytes() needs to know: the size of a batch, not its data.
 * max_seq_tokens is the longest sequence's length as the host knows it, or 0 when it does not: a
 * planning hint. A backend may use it to choose how to cut the work (the sm90 backend's context split:
 * one long sequence among short ones splits where sequences of equal length would not), never to size
 * or place anything, so a wrong hint costs time, not correctness. scratch_bytes() and run() must be
 * given the same value, as the plan and its scratch follow it. 0 <= max_seq_tokens <= total_tokens. */
typedef struct {
  di_gdn_geometry geometry;
  int32_t num_seqs;
  int64_t total_tokens;
  int64_t max_seq_tokens;
} di_gdn_prefill_shape;

/* One prefill call over a batch of variable-length sequences laid end to end.
 * Activations are row-major and packed by token (token t of the batch at row t):
 *   q, k   bf16  [total_tokens, Hk, K]    L2-normalised, or raw with DI_GDN_QK_L2NORM
 *   v      bf16  [total_tokens, Hv, V]
 *   g      f32   [total_tokens, Hv]       log decay, <= 0
 *   beta   f32   [total_tokens, Hv]
 *   out    bf16  [total_tokens, Hv, V]
 *   cu_seqlens  int32 [num_seqs + 1], device memory: sequence i owns rows cu_seqlens[i] ..
 *               cu_seqlens[i+1]-1; zero-length sequences are allowed (their state is copied through).
 * States are float32 pools of num_state_slots matrices, one per (slot, value head), in state_layout:
 *   initial_state  [slots, Hv, K, V] or [slots, Hv, V, K]; NULL means a zero initial state
 *   final_state    same layout; NULL means the final state is not written
 *   state_indices  int32 [num_seqs], device memory: the slot of sequence i in both pools; NULL means
 *                  slot i. initial_state == final_state (update in place) is allowed.
 * Every pointer is device memory. The call never synchronises with the host and allocates nothing;
 * it may be captured in a CUDA graph. */
typedef struct {
  int32_t abi_version; /* DI_GDN_ABI_VERSION */
  di_gdn_geometry geometry;
  di_gdn_state_layout state_layout;
  int32_t num_seqs;
  int64_t total_tokens;
  int64_t max_seq_tokens; /* as in di_gdn_prefill_shape, and the same value scratch_bytes() was given */
  float scale;            /* multiplies the output: usually K^-0.5 */
  uint32_t flags; /* DI_GDN_QK_L2NORM, or 0 */
  const int32_t* cu_seqlens;
  const void* q;
  const void* k;
  const void* v;
  const float* g;
  const float* beta;
  const float* initial_state;
  float* final_state;
  const int32_t* state_indices;
  void* out;
} di_gdn_prefill_args;

typedef struct {
  const char* name; /* "baseline", "sm90", ... */
  /* DI_GDN_OK when the backend serves this geometry on this device in this layout; otherwise
   * DI_GDN_UNSUPPORTED with a reason written (NUL-terminated, truncated to reason_capacity). */
  int (*supports)(const di_gdn_geometry* geometry, const di_gdn_device* device, di_gdn_state_layout layout,
                  char* reason, size_t reason_capacity);
  /* Device scratch the caller must provide to run() for a batch of this shape (0 for none). */
  size_t (*scratch_bytes)(const di_gdn_prefill_shape* shape);
  /* Enqueues the prefill on the stream. scratch holds scratch_bytes(shape) bytes (or NULL if 0). */
  int (*run)(const di_gdn_prefill_args* args, void* scratch, size_t scratch_size, di_gdn_stream stream);
} di_gdn_prefill_backend;

/* The entry points of the shared library libdeltainfer_gdn.so (built with the CUDA parts), which
 * exports these two functions and no other symbol: a harness or another engine dlopen()s it and
 * reaches every backend through the structs above. */

/* The backends compiled into this library, in production order: *count receives their number;
 * returns an array of pointers valid for the life of the process. */
const di_gdn_prefill_backend* const* di_gdn_prefill_backends(int32_t* count);

/* Build provenance of the library as a NUL-terminated JSON object string (commit, dirty, compiler,
 * cuda); valid for the life of the process. */
const char* di_gdn_build_info(void);

#ifdef __cplusplus
}
#endif

#endif /* DELTAINFER_GDN_H */
