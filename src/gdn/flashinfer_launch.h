/* The launch ABI between the flashinfer-sm90 backend (gdn/cuda_flashinfer_sm90.cpp) and the shared
 * objects of its bundle (tools/artifacts/flashinfer_gdn_sm90/bridge.c): one C struct, compiled into
 * both sides. A change to it is a new DI_FLASHINFER_GDN_LAUNCH_ABI, which the loader checks. */
#ifndef DELTAINFER_GDN_FLASHINFER_LAUNCH_H
#define DELTAINFER_GDN_FLASHINFER_LAUNCH_H

#include <stdint.h>

#define DI_FLASHINFER_GDN_LAUNCH_ABI 1

typedef struct {
  const void* q;               /* bf16 [T, Hk, 128], L2-normalised */
  const void* k;               /* bf16 [T, Hk, 128], L2-normalised */
  const void* v;               /* bf16 [T, Hv, 128] */
  void* out;                   /* bf16 [T, Hv, 128] */
  const float* alpha;          /* exp(g), [T, Hv] */
  const float* beta;           /* [T, Hv] */
  float* final_state;          /* pool [slots, Hv, 128, 128] */
  const float* initial_state;  /* pool, same layout (may be final_state) */
  const int32_t* read_slot;    /* [S]: initial state of sequence i (< 0: zero) */
  const int32_t* write_slot;   /* [S]: final state of sequence i (< 0: not written) */
  void* tensormaps;            /* tensormap_bytes of device scratch: one 128-byte descriptor per SM id */
  const int32_t* cu_seqlens;   /* [S + 1] */
  int64_t total_tokens;        /* T */
  int64_t tensormap_bytes;
  int32_t num_seqs;            /* S */
  int32_t num_k_heads;         /* Hk */
  int32_t num_v_heads;         /* Hv */
  int32_t num_slots;           /* the pools' extent (the kernel indexes through the slot lists only) */
  float scale;
} di_flashinfer_gdn_launch_args;

#endif
