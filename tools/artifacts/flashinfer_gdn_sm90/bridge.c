/* deltainfer's side of one exported FlashInfer SM90 GDN prefill variant: linked with the object and
 * header CuTe DSL's export_to_c writes (compiled with -include <that header> and
 * -DDI_EXPORT_PREFIX=<its symbol prefix>), into the shared object of the bundle. It gives the loader
 * three stable symbols; the generated names, tensor structs and argument order stay in here.
 *
 * The kernel's view of deltainfer's tensors (FlashInfer's own wrapper builds the same strided views):
 *   q  [T, D, Hk]  strides (Hk*D, 1, D)      k  [D, T, Hk]  strides (1, Hk*D, D)
 *   v  [D, T, Hv]  strides (1, Hv*D, D)      o  [D, T, Hv]  strides (1, Hv*D, D)
 *   state pools [slots, Hv, D, D] read as [slot, head, V, K]: the "vk" variant has K contiguous
 *   (deltainfer's [H,V,K]), the "kv" variant V contiguous (deltainfer's [H,K,V]); the dynamic
 *   strides are the same numbers in both, (Hv*D*D, D*D, D).
 * Slot mode: sequence i reads its initial state from read_slot[i] (negative: zero state) and writes
 * its final state to write_slot[i] (negative: not written). */
#include <pthread.h>
#include <stdint.h>

#include "gdn/flashinfer_launch.h" /* the struct the loader fills; the generator adds -I src */

#define DI_CAT2(a, b) a##b
#define DI_CAT(a, b) DI_CAT2(a, b)
#define DI_T(name) DI_CAT(DI_EXPORT_PREFIX, DI_CAT(_Tensor_, DI_CAT(name, _t)))

#define DI_EXPORT __attribute__((visibility("default")))


enum { kHeadDim = 128 };

DI_EXPORT int di_flashinfer_gdn_abi(void) { return DI_FLASHINFER_GDN_LAUNCH_ABI; }

static DI_CAT(DI_EXPORT_PREFIX, _Kernel_Module_t) g_module;
static pthread_once_t g_load_once = PTHREAD_ONCE_INIT;
static int g_load_status = 0;

static void load_once(void) {
  cudaLibrary_t* library = &g_module.module;
  cudaError_t ret = cudaSuccess;
  struct {
    cudaLibrary_t** library;
    cudaError_t* ret;
  } init_args = {&library, &ret};
  DI_CAT(_mlir_, DI_CAT(DI_EXPORT_PREFIX, _cuda_init))((void**)&init_args);
  if (ret != cudaSuccess) {
    g_load_status = (int)ret;
    return;
  }
  int32_t device_count = 0;
  cudaError_t err = cudaGetDeviceCount(&device_count);
  if (err != cudaSuccess) {
    g_load_status = (int)err;
    return;
  }
  for (int32_t device = 0; device < device_count; ++device) {
    struct {
      cudaLibrary_t** library;
      int32_t* device_id;
      cudaError_t* ret;
    } load_args = {&library, &device, &ret};
    DI_CAT(_mlir_, DI_CAT(DI_EXPORT_PREFIX, _cuda_load_to_device))((void**)&load_args);
    if (ret != cudaSuccess) {
      g_load_status = (int)ret;
      return;
    }
  }
}

/* Loads the embedded cubin on every visible device, once per process however often it is called
 * (every copy of the loader in a process shares this object); returns a cudaError_t. */
DI_EXPORT int di_flashinfer_gdn_load(void) {
  pthread_once(&g_load_once, load_once);
  return g_load_status;
}

/* Enqueues one prefill on the stream; returns the export's status (0 on success). */
DI_EXPORT int di_flashinfer_gdn_launch(const di_flashinfer_gdn_launch_args* a, cudaStream_t stream) {
  const int32_t T = (int32_t)a->total_tokens, Hk = a->num_k_heads, Hv = a->num_v_heads, D = kHeadDim;
  DI_T(g_q) q = {(void*)a->q, {T, D, Hk}, {(int64_t)Hk * D, D}};
  DI_T(g_k) k = {(void*)a->k, {D, T, Hk}, {(int64_t)Hk * D, D}};
  DI_T(g_v) v = {(void*)a->v, {D, T, Hv}, {(int64_t)Hv * D, D}};
  DI_T(g_o) o = {a->out, {D, T, Hv}, {(int64_t)Hv * D, D}};
  DI_T(g_alpha) alpha = {(void*)a->alpha, {T * Hv}};
  DI_T(g_beta) beta = {(void*)a->beta, {T * Hv}};
  const int64_t slot_stride = (int64_t)Hv * D * D;
  DI_T(g_state) state = {a->final_state, {a->num_slots, Hv, D, D}, {slot_stride, (int64_t)D * D, D}};
  DI_T(g_init_state) init = {(void*)a->initial_state, {a->num_slots, Hv, D, D}, {slot_stride, (int64_t)D * D, D}};
  DI_T(g_state_indices) read_slot = {(void*)a->read_slot, {a->num_seqs}};
  DI_T(g_output_state_indices) write_slot = {(void*)a->write_slot, {a->num_seqs}};
  DI_T(g_tensormaps) tensormaps = {a->tensormaps, {(int32_t)a->tensormap_bytes}};
  DI_T(cu_seqlens) cu = {(void*)a->cu_seqlens, {a->num_seqs + 1}};
  return DI_CAT(cute_dsl_, DI_CAT(DI_EXPORT_PREFIX, _wrapper))(
      &g_module, &q, &k, &v, &o, &alpha, &beta, &state, &init, &read_slot, &tensormaps, &cu, a->scale,
      /*num_q_heads=*/Hk, /*num_k_heads=*/Hk, /*num_v_heads=*/Hv, /*num_sab_heads=*/Hv, a->num_seqs,
      /*total_checkpoints=*/1, /*checkpoint_every_n_tokens=*/0, &write_slot, /*grid_x=*/a->num_seqs * Hv, stream);
}
