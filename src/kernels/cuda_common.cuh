#pragma once
// Device helpers shared by the kernel families: bf16 conversion, warp and block reductions, the
// activation functions in the exact form the CPU reference uses.
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

namespace di::kernels {

using bf16 = __nv_bfloat16;

__device__ __forceinline__ float to_f32(bf16 x) { return __bfloat162float(x); }
__device__ __forceinline__ float to_f32(float x) { return x; }
__device__ __forceinline__ bf16 to_bf16(float x) { return __float2bfloat16_rn(x); }
// Round a float32 to the nearest bf16 value and back: where the reference rounds.
__device__ __forceinline__ float round_bf16(float x) { return __bfloat162float(__float2bfloat16_rn(x)); }

// bf16 pairs packed in 32 bits (the low half is the first element), and four bf16 (8-byte aligned)
// as floats: the vector loads and stores of the GDN kernels.
__device__ __forceinline__ float bf16_lo(uint32_t pair) { return __uint_as_float(pair << 16); }
__device__ __forceinline__ float bf16_hi(uint32_t pair) { return __uint_as_float(pair & 0xffff0000u); }
__device__ __forceinline__ void load_bf16x4(const bf16* p, float (&x)[4]) {
  const uint2 raw = *reinterpret_cast<const uint2*>(p);
  x[0] = bf16_lo(raw.x), x[1] = bf16_hi(raw.x), x[2] = bf16_lo(raw.y), x[3] = bf16_hi(raw.y);
}
__device__ __forceinline__ uint32_t pack_bf16x2(float lo, float hi) {
  const __nv_bfloat162 pair = __floats2bfloat162_rn(lo, hi);  // one cvt.rn.bf16x2.f32
  return *reinterpret_cast<const uint32_t*>(&pair);
}
// Eight bf16 in 16 bytes as floats, and back (rounded to nearest): the vector loads and stores of
// the memory-bound kernels.
__device__ __forceinline__ void unpack_bf16x8(const uint4& v, float (&f)[8]) {
  const uint32_t w[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
  for (int i = 0; i < 4; ++i) f[2 * i] = bf16_lo(w[i]), f[2 * i + 1] = bf16_hi(w[i]);
}
__device__ __forceinline__ uint4 pack_bf16x8(const float (&f)[8]) {
  return make_uint4(pack_bf16x2(f[0], f[1]), pack_bf16x2(f[2], f[3]), pack_bf16x2(f[4], f[5]), pack_bf16x2(f[6], f[7]));
}
// (x0, x1) as a bf16 pair hi plus the pair lo of what hi leaves, x ~ hi + lo to ~16 bits.
__device__ __forceinline__ void split_bf16x2(float x0, float x1, uint32_t& hi, uint32_t& lo) {
  hi = pack_bf16x2(x0, x1);
  lo = pack_bf16x2(x0 - bf16_lo(hi), x1 - bf16_hi(hi));
}

// 16 bytes global -> shared, asynchronously; src_bytes == 0 writes zeros (rows past the sequence).
__device__ __forceinline__ void cp_async_16(void* smem_dst, const void* gmem_src, int src_bytes) {
  const uint32_t dst = static_cast<uint32_t>(__cvta_generic_to_shared(smem_dst));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(gmem_src), "r"(src_bytes));
}
// 4 bytes (a strided scalar), zero-filled when src_bytes is 0.
__device__ __forceinline__ void cp_async_4(void* smem_dst, const void* gmem_src, int src_bytes) {
  const uint32_t dst = static_cast<uint32_t>(__cvta_generic_to_shared(smem_dst));
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(dst), "l"(gmem_src), "r"(src_bytes));
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }
__device__ __forceinline__ void cp_async_wait_all() { asm volatile("cp.async.wait_all;\n" ::: "memory"); }
// Waits until at most `pending` of this thread's most recent groups are still in flight.
template <int pending>
__device__ __forceinline__ void cp_async_wait_group() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(pending) : "memory");
}

// A shared-memory barrier (mbarrier, sm_80+) whose phase completes after `count` arrivals: here, the
// completion of the cp.async copies of `count` threads, so that threads other than the copying ones
// can wait for the data. Initialised by one thread, then a block-wide barrier before any use.
__device__ __forceinline__ void mbarrier_init(uint64_t* bar, int count) {
  const uint32_t at = static_cast<uint32_t>(__cvta_generic_to_shared(bar));
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(at), "r"(count) : "memory");
}
// One arrival on `bar` once every cp.async this thread issued before has landed (the arrival the
// barrier's count expects: no pending count is added).
__device__ __forceinline__ void cp_async_arrive(uint64_t* bar) {
  const uint32_t at = static_cast<uint32_t>(__cvta_generic_to_shared(bar));
  asm volatile("cp.async.mbarrier.arrive.noinc.shared::cta.b64 [%0];\n" ::"r"(at) : "memory");
}
// Waits until the barrier's phase of the given parity (0 for its 1st, 3rd, ... completion, 1 for its
// 2nd, 4th, ...) has completed; the copies it counted are then visible to this thread.
__device__ __forceinline__ void mbarrier_wait(uint64_t* bar, uint32_t parity) {
  const uint32_t at = static_cast<uint32_t>(__cvta_generic_to_shared(bar));
  asm volatile(
      "{\n"
      ".reg .pred done;\n"
      "waiting:\n"
      "mbarrier.try_wait.parity.shared::cta.b64 done, [%0], %1;\n"
      "@!done bra waiting;\n"
      "}\n" ::"r"(at),
      "r"(parity)
      : "memory");
}

// 2^x by the hardware's approximation (relative error ~2^-22), results below 2^-126 flushed to +0
// (2^-inf = +0). Where exp(x) = 2^(x log2 e) is wanted, this is __expf without the denormal
// handling that the non-flushing form adds around every call (three more instructions).
constexpr float kLog2e = 1.4426950408889634f;
__device__ __forceinline__ float fast_exp2(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}

// Precise expf/logf (no fast-math intrinsics), so values agree with the host reference to an ulp.
__device__ __forceinline__ float silu(float x) { return x / (1.0f + expf(-x)); }
__device__ __forceinline__ float sigmoid(float x) { return 1.0f / (1.0f + expf(-x)); }
__device__ __forceinline__ float softplus(float x) { return x > 20.0f ? x : log1pf(expf(x)); }

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
  for (int offset = 16; offset > 0; offset >>= 1) v += __shfl_xor_sync(0xffffffffu, v, offset);
  return v;
}

// Sum over the whole block (blockDim.x a multiple of 32, at most 1024); every thread gets the total.
__device__ __forceinline__ float block_sum(float v) {
  __shared__ float partial[32];
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, warps = blockDim.x / 32;
  v = warp_sum(v);
  __syncthreads();  // partial[] may still be read by a previous call
  if (lane == 0) partial[warp] = v;
  __syncthreads();
  float total = lane < warps ? partial[lane] : 0.0f;
  return warp_sum(total);
}

// Programmatic dependent launch (sm_90 and later). A kernel launched with the programmatic stream
// serialization attribute may start while the kernel ahead of it in the stream is still running: it
// does what does not depend on that kernel (streaming weights), then waits in wait_for_prior_grid()
// until that kernel has finished and its writes are visible. A kernel lets the one behind it start
// early by calling allow_dependent_grid(); without it, the one behind starts when it ends.
__device__ __forceinline__ void wait_for_prior_grid() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;\n" ::: "memory");
#endif
}
__device__ __forceinline__ void allow_dependent_grid() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;\n" ::: "memory");
#endif
}

// Thread block clusters (sm_90 and later; launch_early_in_clusters() below): a barrier over every
// thread of the cluster's blocks, and the address of a shared variable in another block of the
// cluster (distributed shared memory). Each thread arrives, then waits for all arrivals; release on
// the arrival and acquire on the wait order the shared-memory accesses around them across the
// blocks. Built for older targets they trap: no cluster is launched there (clusters_supported()).
__device__ __forceinline__ void cluster_arrive_relaxed() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("barrier.cluster.arrive.relaxed.aligned;\n" ::: "memory");
#else
  __trap();
#endif
}
__device__ __forceinline__ void cluster_arrive_release() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("barrier.cluster.arrive.release.aligned;\n" ::: "memory");
#else
  __trap();
#endif
}
__device__ __forceinline__ void cluster_wait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("barrier.cluster.wait.acquire.aligned;\n" ::: "memory");
#else
  __trap();
#endif
}
template <typename T>
__device__ __forceinline__ T* in_cluster_block(T* x, uint32_t rank) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  uint64_t remote;
  asm volatile("mapa.u64 %0, %1, %2;\n" : "=l"(remote) : "l"(reinterpret_cast<uint64_t>(x)), "r"(rank));
  return reinterpret_cast<T*>(remote);
#else
  __trap();
  return x;
#endif
}
// Whether the current device runs thread block clusters (compute capability 9.0 and later). Read
// once per process.
bool clusters_supported();

// Whether launch_early() asks for programmatic dependent launch: on where the current device has
// it (sm_90 and later) unless DI_EARLY_LAUNCH=0 (a rollback, and the other side of a comparison).
// Read once per process.
bool early_launch_enabled();

// Launches `kernel` so that it may start while the kernel ahead of it in the stream finishes: its
// launch and block scheduling overlap that kernel's tail. The kernel must call wait_for_prior_grid()
// before it touches any memory but constant weights (the kernel ahead may still write or read it).
// launch_early_in_clusters() puts the blocks in thread block clusters of `cluster` along x (grid.x a
// multiple of it): the blocks of a cluster are scheduled together and may read each other's shared
// memory.
template <typename... Params, typename... Args>
cudaError_t launch_early_in_clusters(void (*kernel)(Params...), dim3 grid, dim3 block, unsigned cluster, size_t smem,
                                     cudaStream_t stream, Args... args) {
  cudaLaunchAttribute attrs[2]{};
  unsigned count = 0;
  if (early_launch_enabled()) {
    attrs[count].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attrs[count++].val.programmaticStreamSerializationAllowed = 1;
  }
  if (cluster > 1) {
    attrs[count].id = cudaLaunchAttributeClusterDimension;
    attrs[count++].val.clusterDim = {cluster, 1, 1};
  }
  cudaLaunchConfig_t config{};
  config.gridDim = grid;
  config.blockDim = block;
  config.dynamicSmemBytes = smem;
  config.stream = stream;
  config.attrs = attrs;
  config.numAttrs = count;
  return cudaLaunchKernelEx(&config, kernel, static_cast<Params>(args)...);
}
template <typename... Params, typename... Args>
cudaError_t launch_early(void (*kernel)(Params...), dim3 grid, dim3 block, size_t smem, cudaStream_t stream,
                         Args... args) {
  return launch_early_in_clusters(kernel, grid, block, 1u, smem, stream, args...);
}

inline unsigned ceil_div(int64_t a, int64_t b) { return unsigned((a + b - 1) / b); }

// Raises `kernel`'s limit of dynamic shared memory to `bytes` (a launch past 48 KB needs it) on the
// current device; asked of the runtime once per device, kernel and size (cuda_launch_limits.cpp).
cudaError_t allow_dynamic_shared_memory(const void* kernel, size_t bytes);
// Asks for the least shared memory (the most L1) that holds as many of `kernel`'s blocks as its
// registers allow, each with `dynamic_bytes` of dynamic shared memory (kernels/carveout.h); worked out
// once per device, kernel and size, and set on the kernel when it differs from what was set last.
cudaError_t prefer_least_shared_memory(const void* kernel, int block_threads, size_t dynamic_bytes = 0);
// How many blocks of `kernel`, `block_threads` threads and `smem` bytes of dynamic shared memory each,
// the current device holds at once: the occupancy calculator's figure times the SMs, at least 1.
cudaError_t resident_blocks(const void* kernel, int block_threads, size_t smem, int64_t& blocks);

}  // namespace di::kernels
