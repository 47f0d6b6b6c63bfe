// The Hopper GDN chunked prefill, "sm90": chunk length C = 64, K = V = 128, every chunk product on
// warpgroup MMA (wgmma, bf16 operands from shared memory, f32 accumulators).
//
// Math: as in baseline_prefill.cu (GDN_KERNELS.md 1.2, "no W/U materialisation"), per chunk of 64
// tokens entering with state S0 [K, V]:
//   P      = scale · Gamma ⊙ Q Kᵀ ⊙ causal (diagonal included)     L = strict_lower(diag(beta) Gamma ⊙ K Kᵀ)
//   Tinv   = (I + L)^-1                                             (float32, forward substitution + merges)
//   X      = diag(beta) (V - D · K · S0)                            Vnew = Tinv · X
//   O      = scale · D · Q · S0 + P · Vnew
//   S      = exp(G_last) S0 + Kᵀ · W,   W = diag(exp(G_last - G)) Vnew
// with the q and k inverse norms (DI_GDN_QK_L2NORM) folded in as scalings. With N = diag(1 / |k|) the
// kernel solves the similar system L' = N L N^-1 = diag(beta / |k|^2) strict_lower(Gamma ⊙ K Kᵀ) for
// Vnew' = N Vnew = (I + L')^-1 N X, which P N and Kᵀ N take as they are: every factor of P and L' is a
// row's, and |k_r|^2 is K Kᵀ's diagonal, so the auxiliary warpgroup needs no barrier for the norms.
//
// Design. One CTA of two state warpgroups and one auxiliary warpgroup owns (sequence, value head);
// when that leaves more than half the SMs idle, one CTA of one state warpgroup and two auxiliary ones
// owns each half of the value columns (Config below).
//   The auxiliary warpgroups (the last) run ahead of the state warpgroups. For a chunk, one computes
//   the gates, the Gram products Q Kᵀ and K Kᵀ (wgmma; issued before the gates in a whole-head CTA)
//   and beside them the inverse norms, P, L', the inverse of (I + L') in f32 (its diagonal 16 x 16
//   blocks by forward substitution, the merges on tensor cores, one tf32 product each:
//   chunk_math.cuh) and Tinv as bf16 hi + lo operands, into one of three stages, and signals the
//   stage full (named barriers; it waits for the stage to be empty first). Two auxiliary warpgroups take the chunks in turn, each in its own stage: the
//   auxiliary work is the longer side of a chunk (docs/benchmarks/gdn-sm90.md), and a whole-head CTA
//   has no registers for a second one. In a whole-head CTA the stage serves both value halves.
//   Each state warpgroup keeps a slice of the state, transposed: Sᵀ for its value columns (64 w ..
//   64 w + 63 for warpgroup w) as [64 values, 128 keys] f32 in wgmma accumulators (two m64n64 tiles,
//   64 registers per thread) for the whole sequence, read once and written once. Every product it
//   runs per chunk is transposed, values along the rows, so that its A operand is a fragment it
//   already holds in registers (an accumulator packed to bf16 pairs is the A operand of the next
//   product over its columns) and only B comes from shared memory:
//     (K S)ᵀ, (Q S)ᵀ  Sᵀ Kᵀ, Sᵀ Qᵀ            64 x 64 x 128, both
//     Vnewᵀ           Xᵀ Tinvᵀ as hi/lo products  64 x 64 x 64 (three)
//     output          (scaled Q S)ᵀ + Vnew_hiᵀ Pᵀ + Vnew_loᵀ Pᵀ  64 x 64 x 64 (two), onto the (Q S)ᵀ registers
//     state           Sᵀ += W_hiᵀ K + W_loᵀ K   64 x (128 = 2 x 64) x 64 (four)
//   Xᵀ, Vnewᵀ, Wᵀ and Sᵀ never go through shared memory; the per-token factors are per column.
//   In a whole-head CTA of whole sequences the two state warpgroups issue these product groups in
//   turn (ProductTurns), so that one's arithmetic between products runs under the other's.
//   So the inverse, the largest serial stage of a chunk, overlaps the previous chunk's state work.
//   The inputs are loaded two (whole head) or three (half head) chunks ahead, into the input slot the
//   state warpgroups have just finished with: one thread issues the TMA boxes of Q, K and V (tensor
//   maps made at launch), warpgroup 0 copies the raw gates (cp.async), all counted by the slot's
//   mbarrier, so the load overlaps the auxiliary warpgroup's work and costs the state warpgroups a
//   few instructions. The auxiliary warpgroup zeroes the rows past a sequence's end in its last chunk
//   (the boxes bring the next sequence's tokens there; past the last token they bring zeros).
//   Shared memory 197,248 bytes for a whole head (two input slots of 49,664, three stages of 27,136,
//   each with its f32 inverse, two output staging tiles), 214,144 for half a head (three input slots
//   of 41,472): one CTA per SM.
// Numerics. Products of bf16 operands are exact in the f32 accumulators; what rounds is an operand
// made from f32 values. The kernel keeps ~16 bits (a bf16 hi + lo pair) where that rounding was
// measured to dominate the error against the float64 oracle: Tinv, X, W and Vnew; Kᵀ is the raw bf16
// input, exact. S (for K S, Q S) and P are single bf16: with everything else single, splitting S
// changed no error statistic, splitting W took the state's max error from 4.4e-3 to 2.3e-3 and
// splitting X as well to 1.6e-5 (docs/benchmarks/gdn-sm90.md). An S split would double K S and Q S
// on the state warpgroups' chain.
// Operands in shared memory use the no-swizzle layouts of kernels/wgmma.cuh: the inputs in the
// piece-major layout the boxes write (K and Q tiles are the K-major operands of the Gram products and
// the B operands of (K S)ᵀ and (Q S)ᵀ; the K tile read MN-major is the B operand of the state update),
// the auxiliary warpgroup's P and Tinv [i][j] tiles in the core-matrix layout (K-major B operands of
// the transposed products as they are). V reaches the registers transposed (ldmatrix
// .trans) and the output leaves through a staging tile (stmatrix .trans) as 16-byte pieces of whole
// rows. No atomics, no host synchronisation; scratch only for a context split.
// Context split (gdn/context_split.h): batches of few (sequence, head) pairs over long sequences run
// the kernel twice over a plan of segments (cta_work): first the carried segments' states from zero
// and transfer matrices from the identity with v = 0 (Launch::carried: the state alone, so no Q
// load, no Q S, P or output products: 4.7 of a state warpgroup's 6.8 MFLOP a chunk), then, after the
// carry kernel, every segment from its entry state (Launch::segments: launched while the carry runs,
// only its state warpgroups wait for it).
//
// FLOP per chunk and value head (tensor cores): gram 2.10 M (auxiliary), then per state warpgroup
// K S + Q S 2.10 M, Vnew 1.57 M, output 1.05 M, state 2.10 M: 15.7 MFLOP for a whole-head CTA (17.8
// with half-head CTAs, which each make the Gram products) against the fused ideal of 10.5 MFLOP
// (GDN_KERNELS.md 9.1); the hi/lo splits add 5.2 MFLOP.
#include "gdn/sm90_prefill.h"

#include <cuda.h>  // CUtensorMap; the encoder is reached through the runtime (no link to libcuda)
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <cudaTypedefs.h>

#include <cstdint>
#include <string>

#include "gdn/backend_common.cuh"
#include "gdn/chunk_math.cuh"
#include "gdn/context_split.h"
#include "gdn/sm90_timeline.h"
#include "kernels/cuda_common.cuh"
#include "kernels/wgmma.cuh"

namespace di::gdn {
namespace {

using bf16 = __nv_bfloat16;
namespace wg = kernels::wgmma;

// The stage timeline (gdn/sm90_timeline.h), compiled out unless the build asks for it.
#ifndef DI_SM90_TIMELINE
#define DI_SM90_TIMELINE 0
#endif
#if DI_SM90_TIMELINE
__device__ uint64_t* g_timeline_stamps = nullptr;
__device__ int g_timeline_chunks = 0;
#endif
// The leader's clock at the end of `event` of `chunk`, for warpgroup `group`.
__device__ __forceinline__ void stamp(bool leader, int group, int chunk, int event) {
#if DI_SM90_TIMELINE
  if (leader && g_timeline_stamps != nullptr && chunk < g_timeline_chunks) {
    uint64_t now;
    asm volatile("mov.u64 %0, %%clock64;\n" : "=l"(now)::"memory");
    g_timeline_stamps[((int64_t(blockIdx.x) * g_timeline_chunks + chunk) * kTimelineGroups + group) * kTimelineEvents +
                      event] = now;
  }
#endif
}

// Which of the state warpgroups' own operands go to the tensor cores as bf16 hi + lo pairs (two
// products each) rather than as one bf16: X and Tinv (of Vnew = Tinv X), Vnew (of the output, against
// P) and W (of the state update, against K). All four by default: 52 m64n64k16 steps a chunk and
// state warpgroup. The CMake setting DI_SM90_OPERAND_SPLITS builds the others for measurement: all
// but the output's Vnew (48 steps; the state's error as with all), X and W (44) or none (32,
// FlashInfer's count); the last two trade the state's accuracy for speed and exceeded the tests'
// tolerances somewhere (docs/benchmarks/gdn-sm90.md, first section).
struct OperandSplits {
  bool x, tinv, vnew_out, w;
};
#ifndef DI_GDN_SM90_SPLITS
#define DI_GDN_SM90_SPLITS 0
#endif
static_assert(DI_GDN_SM90_SPLITS >= 0 && DI_GDN_SM90_SPLITS <= 3, "0: all, 1: X and W, 2: none, 3: all but Vnew's");
constexpr OperandSplits kSplits = DI_GDN_SM90_SPLITS == 0   ? OperandSplits{true, true, true, true}
                                  : DI_GDN_SM90_SPLITS == 1 ? OperandSplits{true, false, false, true}
                                  : DI_GDN_SM90_SPLITS == 2 ? OperandSplits{false, false, false, false}
                                                            : OperandSplits{true, true, false, true};
constexpr int kChunk = kGdnChunk;      // C
constexpr int kHeadDim = 128;          // K == V
constexpr int kTileV = 64;             // value columns per state warpgroup
constexpr int kWarpgroup = 128;        // threads of one warpgroup
constexpr int kInvStride = kChunk + 4; // floats per row of the f32 (I + L) / Tinv matrix

// Shared memory regions (every one 128-byte aligned).
constexpr size_t kQkBytes = size_t(kChunk) * kHeadDim * 2;     // Q or K chunk: operand 64 x 128
constexpr size_t kVBytes = size_t(kChunk) * kTileV * 2;        // V rows of one value tile, [64][64]
constexpr size_t kMatOpBytes = size_t(kChunk) * kChunk * 2;    // P, Tinv hi/lo, X, Vnew, W: 64 x 64
constexpr size_t kInvBytes = size_t(kChunk) * kInvStride * 4;  // f32 (I + L) -> Tinv
constexpr size_t kVecBytes = size_t(kChunk) * 4;
// One stage (the auxiliary warpgroup's products for one chunk).
// The f32 (I + L), inverted in place, becomes Tinv's hi and lo operands in the same bytes (the
// conversion reads all of it into registers first), so that each stage carries its own inverse and
// stages can be prepared side by side.
constexpr int kStages = 3;
constexpr size_t kStP = 0;
constexpr size_t kStInv = kStP + kMatOpBytes;
constexpr size_t kStTHi = kStInv;
constexpr size_t kStTLo = kStTHi + kMatOpBytes;
constexpr size_t kStVec = kStInv + kInvBytes;  // G, beta, exp(G), tail, 1/|q|, 1/|k|
constexpr size_t kStageBytes = kStVec + 6 * kVecBytes;
static_assert(2 * kMatOpBytes <= kInvBytes, "Tinv's operands fit where its f32 form was");

// The two shapes of the kernel: a CTA of `groups` state warpgroups (each 64 value columns) and one
// (whole head) or two (half head) auxiliary warpgroups owns (sequence, value head, 64 x groups value
// columns).
//   groups == 2: the whole head; the Gram products and the inverse are made once per head.
//   groups == 1: half a head, twice the CTAs, each with a whole SM: for launches of fewer (sequence,
//   head) pairs than half the SMs, where CTAs would otherwise be idle SMs.
// Chunk c's inputs (Q, K, V by TMA, the raw gates by cp.async) land in input slot c % slots, issued
// by state warpgroup 0 when the state warpgroups are done with chunk c - slots; its gate-side
// products go to stage c % kStages. The state warpgroups read both.
template <int groups>
struct Config {
  static constexpr int kGroups = groups;
  static constexpr int kStateThreads = groups * kWarpgroup;
  // Auxiliary warpgroups (last), taking chunks in turn: two where the register budget allows.
  static constexpr int kAuxGroups = groups == 1 ? 2 : 1;
  static constexpr int kThreads = kStateThreads + kAuxGroups * kWarpgroup;
  // The threads of a stage's full and empty barriers: the state warpgroups and the auxiliary one of
  // its chunk.
  static constexpr int kStageBarrierThreads = kStateThreads + kWarpgroup;
  static constexpr int kTilesPerHead = kHeadDim / (kTileV * groups);
  static constexpr int kInputSlots = groups == 1 ? 3 : 2;     // as many as fit
  // One input slot.
  static constexpr size_t kInQ = 0;
  static constexpr size_t kInK = kInQ + kQkBytes;
  static constexpr size_t kInV = kInK + kQkBytes;           // one [64][64] tile per state warpgroup
  static constexpr size_t kInGates = kInV + groups * kVBytes;  // raw g, raw beta (zeros past the chunk)
  static constexpr size_t kInputBytes = kInGates + 2 * kVecBytes;
  // The whole block.
  static constexpr size_t kOffInput = 0;
  static constexpr size_t kOffStage = kOffInput + kInputSlots * kInputBytes;
  static constexpr size_t kOffOut = kOffStage + kStages * kStageBytes;  // per state warpgroup: the output's staging
  static constexpr size_t kOffBarriers = kOffOut + groups * kMatOpBytes;  // per input slot: its loads landed
  static constexpr size_t kSmemBytes = kOffBarriers + 128;
  static_assert(kInputBytes % 128 == 0 && kStageBytes % 128 == 0 && kOffBarriers % 128 == 0,
                "aligned regions");
  // Registers per thread: the launch gives every thread 65536 / threads (in steps of 8, at most 255),
  // and a CTA can only move registers between its warpgroups: the auxiliary ones give some back, so
  // that the state warpgroups can hold the state, the products' accumulators and their register A
  // operands. Whole head (168 each at launch): 192 / 120 uses the whole budget (2 x 192 + 120 =
  // 3 x 168) and measures fastest: below 192 ptxas serialises the state warpgroups' wgmmas for want
  // of registers (warning C7512), and at 192 / 112 the auxiliary warpgroup spills more
  // (docs/benchmarks/gdn-sm90.md). Half head (168 at launch): 216 / 144 / 144.
  static constexpr int kLaunchRegisters = 65536 / kThreads / 8 * 8 > 255 ? 255 : 65536 / kThreads / 8 * 8;
  static constexpr int kStateRegisters = groups == 2 ? 192 : 216, kAuxRegisters = groups == 2 ? 120 : 144;
  static_assert(kStateThreads * kStateRegisters + kAuxGroups * kWarpgroup * kAuxRegisters <=
                    kThreads * kLaunchRegisters,
                "registers the CTA was launched with");
};
using Head = Config<2>;
using HalfHead = Config<1>;
static_assert(Head::kSmemBytes == 197248 && HalfHead::kSmemBytes == 214144,
              "the shared memory budgets the header comment documents");

// Named barriers: 0 is __syncthreads; per stage b, "full" (an auxiliary warpgroup has filled it)
// and "empty" (the state warpgroups are done with it), over the state warpgroups and the auxiliary
// one that prepares the stage's chunk; one per warpgroup for its own steps; one over the state
// warpgroups.
constexpr int kBarFull0 = 1, kBarEmpty0 = kBarFull0 + kStages, kBarState0 = kBarEmpty0 + kStages,
              kBarAux0 = kBarState0 + 2, kBarStates = kBarAux0 + 2, kBarTurn0 = kBarStates + 1;
static_assert(kBarTurn0 + 1 < 16, "sixteen named barriers");

// In whole-head CTAs of whole sequences the two state warpgroups issue each group of products in
// turn, so that one warpgroup's arithmetic between its products runs while the other's are on the
// tensor cores (1.4-2.6% off the batches; the split's steps keep the free order, which measured
// 0.6-1.2% faster there: docs/benchmarks/gdn-sm90.md). Warpgroup w waits on barrier kBarTurn0 + w
// before it issues a group and, once the group is committed, arrives on the other's; warpgroup 1
// arrives on warpgroup 0's once at the start, and warpgroup 0 takes that last arrival at the end, so
// that every arrival is matched.
template <bool kOn>
struct ProductTurns {
  __device__ static void take(int w) {
    if constexpr (kOn) asm volatile("bar.sync %0, %1;\n" ::"r"(kBarTurn0 + w), "n"(2 * kWarpgroup) : "memory");
  }
  __device__ static void pass(int w) {
    if constexpr (kOn) asm volatile("bar.arrive %0, %1;\n" ::"r"(kBarTurn0 + 1 - w), "n"(2 * kWarpgroup) : "memory");
  }
};
// An auxiliary warpgroup's own barrier (its index from the thread's, so that the shared steps of
// chunk_math.cuh can take it as a type).
template <typename C>
struct AuxGroupSync {
  __device__ static void sync() {
    asm volatile("bar.sync %0, %1;\n" ::"r"(kBarAux0 + int(threadIdx.x) / kWarpgroup - C::kGroups), "n"(kWarpgroup)
                 : "memory");
  }
};
template <typename C>
__device__ __forceinline__ void bar_arrive(int id) {
  asm volatile("bar.arrive %0, %1;\n" ::"r"(id), "n"(C::kStageBarrierThreads) : "memory");
}
template <typename C>
__device__ __forceinline__ void bar_sync(int id) {
  asm volatile("bar.sync %0, %1;\n" ::"r"(id), "n"(C::kStageBarrierThreads) : "memory");
}
template <int n>
__device__ __forceinline__ void release_registers() {
  asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(n));
}
template <int n>
__device__ __forceinline__ void claim_registers() {
  asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(n));
}
// State warpgroup w's own barrier.
__device__ __forceinline__ void state_sync(int w) {
  asm volatile("bar.sync %0, %1;\n" ::"r"(kBarState0 + w), "n"(kWarpgroup) : "memory");
}

// A fragment's 32 values as 16 bf16 pairs (for Fragment::store_pairs), rounded once; and the low
// parts of their hi + lo split (x = hi + lo to ~16 bits, as kernels::split_bf16x2), the high parts
// recomputed, so that a split takes 16 registers at a time.
__device__ __forceinline__ void pack_pairs(const float (&x)[32], uint32_t* pairs) {
#pragma unroll
  for (int i = 0; i < 32; i += 2) pairs[i / 2] = kernels::pack_bf16x2(x[i], x[i + 1]);
}
__device__ __forceinline__ void low_pairs(const float (&x)[32], uint32_t* pairs) {
#pragma unroll
  for (int i = 0; i < 32; i += 2) {
    uint32_t hi;
    kernels::split_bf16x2(x[i], x[i + 1], hi, pairs[i / 2]);
  }
}
// The tensor maps of q, k and v, made on the host for each launch (launch() below): each views a
// [T, heads, 128] bf16 tensor as {8 elements, tokens, 16 pieces, heads} (the pieces' stride, 16
// bytes, inside the tokens'), so that one box {8, 64, n, 1} brings n pieces of 64 tokens each, 64 rows x
// 16 bytes per piece, as the piece-major layout of kernels/wgmma.cuh lays them out: a whole Q, K or V
// tile in one copy. Boxes of one piece (40 or 48 copies a chunk) kept the issuing warp, which is also a
// state warpgroup's, waiting on the copy engine for about as long as the rest of its chunk
// (docs/benchmarks/gdn-sm90.md). Rows past T come as zeros.
struct InputMaps {
  CUtensorMap q, k, v;
};
constexpr int kPieceBytes = kChunk * 16;

__device__ __forceinline__ void tma_load_tile(void* smem_dst, const CUtensorMap* map, int piece, int head, int64_t t0,
                                              uint64_t* bar) {
  const uint32_t dst = static_cast<uint32_t>(__cvta_generic_to_shared(smem_dst));
  const uint32_t at = static_cast<uint32_t>(__cvta_generic_to_shared(bar));
  asm volatile(
      "cp.async.bulk.tensor.4d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3, %4, %5}], "
      "[%6];\n" ::"r"(dst),
      "l"(reinterpret_cast<uint64_t>(map)), "r"(0), "r"(int(t0)), "r"(piece), "r"(head), "r"(at)
      : "memory");
}
// The barrier's current phase also waits for `bytes` more of asynchronous copies (no arrival).
__device__ __forceinline__ void mbarrier_expect_bytes(uint64_t* bar, uint32_t bytes) {
  const uint32_t at = static_cast<uint32_t>(__cvta_generic_to_shared(bar));
  asm volatile("mbarrier.expect_tx.relaxed.cta.shared::cta.b64 [%0], %1;\n" ::"r"(at), "r"(bytes) : "memory");
}

// Zeros in rows [len, 64) of a piece-major tile of `pieces` pieces (thread t of a warpgroup): the rows
// past a sequence's end, which the box brought from the next sequence.
__device__ __forceinline__ void zero_rows_past(unsigned char* tile, int pieces, int len, int t) {
  for (int i = t; i < pieces * kChunk; i += kWarpgroup) {
    const int piece = i / kChunk, row = i % kChunk;
    if (row >= len) *reinterpret_cast<uint4*>(tile + piece * kPieceBytes + row * 16) = make_uint4(0, 0, 0, 0);
  }
}

template <int n>
__device__ __forceinline__ void zero(float (&d)[n]) {
#pragma unroll
  for (int i = 0; i < n; ++i) d[i] = 0.f;
}
template <int n>
__device__ __forceinline__ void zero_pairs(uint32_t (&d)[n]) {
#pragma unroll
  for (int i = 0; i < n; ++i) d[i] = 0u;
}

// The output tile staged from Oᵀ's fragment (rows = values, columns = tokens) as [64 tokens][64
// values] bf16 (8 KiB) so that the global stores are whole 16-byte pieces of 128-byte rows: token row r
// at r * 128, its piece m (values 8 m .. 8 m + 7) at piece m ^ (r % 8), so that the stmatrix rows of a
// fragment and the 16-byte row reads both spread over all banks. stmatrix .trans writes each 8x8
// block transposed: block (j, h) of the fragment (tokens 8 j .., values 16 w + 8 h ..) lands as 8
// token rows of one piece.
__device__ __forceinline__ void stage_output_transposed(const float (&o)[32], unsigned char* tile,
                                                        const wg::Fragment& f) {
  uint32_t pairs[16];
  pack_pairs(o, pairs);
  const int m = f.lane / 8, piece = 2 * f.warp + (m & 1);
  const uint32_t base = static_cast<uint32_t>(__cvta_generic_to_shared(tile));
#pragma unroll
  for (int k = 0; k < 4; ++k) {  // blocks (j, h) = (2 k + m / 2, m % 2), as Fragment::load_pairs_transposed
    const int row = 8 * (2 * k + (m >> 1)) + f.lane % 8;
    asm volatile("stmatrix.sync.aligned.m8n8.x4.trans.shared.b16 [%0], {%1, %2, %3, %4};\n" ::"r"(
                     base + uint32_t(row * 128 + (piece ^ (row & 7)) * 16)),
                 "r"(pairs[4 * k]), "r"(pairs[4 * k + 1]), "r"(pairs[4 * k + 2]), "r"(pairs[4 * k + 3])
                 : "memory");
  }
}
// Rows [0, len) of the staged tile to out rows t0 .. (token stride `row_stride` elements), thread t
// (of the warpgroup) piece t % 8 of rows t / 8 + 16 e.
__device__ __forceinline__ void store_output(const unsigned char* tile, bf16* out, int64_t row_stride, int len, int t) {
  const int piece = t % 8;
#pragma unroll
  for (int e = 0; e < kChunk / 16; ++e) {
    const int r = t / 8 + 16 * e;
    if (r >= len) continue;
    const uint4 v = *reinterpret_cast<const uint4*>(tile + r * 128 + ((piece ^ (r & 7)) * 16));
    *reinterpret_cast<uint4*>(out + r * row_stride + piece * 8) = v;
  }
}

// Chunk c's shared memory: its input slot and its stage.
template <typename C>
struct Stage {
  unsigned char *q, *k, *v, *p, *t_hi, *t_lo;
  float *inv;  // [64][kInvStride]: (I + L), then Tinv, before it becomes t_hi and t_lo
  float *g_raw, *beta_raw, *G, *beta, *exp_G, *tail, *q_inv, *k_inv;
  __device__ __forceinline__ Stage(unsigned char* smem, int chunk)
      : q(input(smem, chunk) + C::kInQ), k(input(smem, chunk) + C::kInK), v(input(smem, chunk) + C::kInV),
        p(stage(smem, chunk) + kStP), t_hi(stage(smem, chunk) + kStTHi), t_lo(stage(smem, chunk) + kStTLo),
        inv(reinterpret_cast<float*>(stage(smem, chunk) + kStInv)),
        g_raw(reinterpret_cast<float*>(input(smem, chunk) + C::kInGates)), beta_raw(g_raw + kChunk),
        G(reinterpret_cast<float*>(stage(smem, chunk) + kStVec)), beta(G + kChunk), exp_G(beta + kChunk),
        tail(exp_G + kChunk), q_inv(tail + kChunk), k_inv(q_inv + kChunk) {}
  __device__ __forceinline__ static unsigned char* input(unsigned char* smem, int chunk) {
    return smem + C::kOffInput + (chunk % C::kInputSlots) * C::kInputBytes;
  }
  __device__ __forceinline__ static unsigned char* stage(unsigned char* smem, int chunk) {
    return smem + C::kOffStage + (chunk % kStages) * kStageBytes;
  }
};

// The loads of one chunk's inputs into its slot, by state warpgroup 0: its thread 0 issues the Q and K
// tiles (K alone for a state-only launch) and the V tiles of the CTA's value columns (TMA copies,
// counted in bytes on the slot's barrier); thread t < 64 copies row t of the raw g, t >= 64 row t - 64 of beta (cp.async, zeros past
// len); then each of its threads arrives on the barrier, whose phase completes when the tiles and
// every thread's copies have landed.
template <typename C, bool kStateOnly>
__device__ __forceinline__ void load_chunk_async(const di_gdn_prefill_args& args, const InputMaps& maps,
                                                 const Stage<C>& st, uint64_t* landed, int64_t t0, int len,
                                                 int head, int key_head, int v0, int t) {
  if (t == 0) {
    constexpr int kPieces = (kStateOnly ? 1 : 2) * (kHeadDim / 8) + C::kGroups * kTileV / 8;
    mbarrier_expect_bytes(landed, uint32_t(kPieces * kPieceBytes));
    wg::fence_async_shared();  // the slot's earlier reads, before the async proxy writes
    if (!kStateOnly) tma_load_tile(st.q, &maps.q, 0, key_head, t0, landed);
    tma_load_tile(st.k, &maps.k, 0, key_head, t0, landed);
    tma_load_tile(st.v, &maps.v, v0 / 8, head, t0, landed);
  }
  const int Hv = args.geometry.num_v_heads;
  const int r = t % kChunk;
  const float* src = t < kChunk ? args.g : args.beta;
  const bool valid = r < len;
  kernels::cp_async_4((t < kChunk ? st.g_raw : st.beta_raw) + r, valid ? src + (t0 + r) * Hv + head : src,
                      valid ? 4 : 0);
  kernels::cp_async_arrive(landed);
}

// An auxiliary warpgroup's part of a chunk whose inputs are in (t = its thread index 0..127): the
// gates; the Gram products, and the inverse norms while they run; P (scale folded in) as an operand;
// (I + L')^-1 in f32 in the stage; Tinv' as hi + lo operands over it. Ends with the stage's writes fenced for wgmma.
// A state-only launch (kStateOnly: no output) skips everything of Q: its norms, Q Kᵀ and P.
template <typename C, bool kStateOnly>
__device__ __forceinline__ void prepare_chunk(const di_gdn_prefill_args& args, const Stage<C>& st, int len, int t,
                                              int chunk) {
  using AuxSync = AuxGroupSync<C>;
  float* const inv_s = st.inv;
  const wg::Fragment frag(t);
  // In a whole-head CTA, where this warpgroup is the chunk's critical path, the Gram products go
  // out before the gates, as they need only the tiles: they queue for the tensor cores behind the
  // state warpgroups' products, and the gates are made while they wait (0.5-1.5% off the whole-head
  // shapes; 1.7% onto a half-head one, which keeps the order: docs/benchmarks/gdn-sm90.md).
  constexpr bool kGramFirst = C::kGroups == 2;
  // Without DI_GDN_QK_L2NORM the rows are taken as normalised: 1 / |q| = 1 / |k| = 1.
  const bool normalize_qk = (args.flags & DI_GDN_QK_L2NORM) != 0;
  const auto make_gates = [&] {
    if (t < 32)
      chunk_gates(st.g_raw[2 * t], st.g_raw[2 * t + 1], st.beta_raw[2 * t], st.beta_raw[2 * t + 1], len, t, st.G,
                  st.beta, st.exp_G, st.tail);
    if (!normalize_qk) {
      if (!kStateOnly && t < kChunk) st.q_inv[t] = 1.0f;
      if (t >= kChunk) st.k_inv[t - kChunk] = 1.0f;
    }
  };
  if (len < kChunk) {  // the sequence's last chunk: the rows past its end are the next sequence's
    if (!kStateOnly) zero_rows_past(st.q, kHeadDim / 8, len, t);
    zero_rows_past(st.k, kHeadDim / 8, len, t);
    zero_rows_past(st.v, C::kGroups * kTileV / 8, len, t);
    if constexpr (kGramFirst) wg::fence_async_shared();  // the zeroed rows, before wgmma reads them
    AuxSync::sync();
  }
  if constexpr (!kGramFirst) {
    make_gates();
    wg::fence_async_shared();  // the zeroed rows and the gates, before wgmma reads the stage
    AuxSync::sync();
    stamp(t == 0, kTimelineAuxGroup, chunk, 3);
  }

  // Gram: Q Kᵀ and K Kᵀ; P as a bf16 operand [i][j], L' in f32 for the inverse.
  {
    float qk[32], kk[32];
    zero(qk), zero(kk);
    wg::wgmma_fence();
    const auto q_op = wg::k_major_pieces(st.q, kChunk), k_op = wg::k_major_pieces(st.k, kChunk);
    if (!kStateOnly) wg::mma<kHeadDim>(qk, q_op, k_op, false);
    wg::mma<kHeadDim>(kk, k_op, k_op, false);
    wg::wgmma_commit();
    if constexpr (kGramFirst) {
      make_gates();
      stamp(t == 0, kTimelineAuxGroup, chunk, 3);
    }
    // The thread's rows row0 and row0 + 8: 1 / |q| and 1 / |k|, both found without a barrier while
    // the products run. |q_r|^2 is summed on the CUDA cores by the warp that holds row r: lane l
    // takes row 16 w + l % 16, pieces 8 (l / 16) .. + 7 (a quarter warp's loads are 8 rows of one
    // piece: no bank conflicts), in eight partial sums (element e of each piece into sum e); the two
    // halves meet by a shuffle, and each thread takes its rows' sums from lanes r % 16.
    float q_inv_row[2] = {1.0f, 1.0f}, k_inv_row[2] = {1.0f, 1.0f};
    if (!kStateOnly && normalize_qk) {
      const int r = 16 * frag.warp + frag.lane % 16;
      const unsigned char* row = st.q + wg::piece_offset(r, 8 * 8 * (frag.lane / 16), kChunk);
      float sum[8] = {};
#pragma unroll
      for (int part = 0; part < kHeadDim / 16; ++part) {
        const uint4 raw = *reinterpret_cast<const uint4*>(row + part * kPieceBytes);
        const uint32_t w[4] = {raw.x, raw.y, raw.z, raw.w};
#pragma unroll
        for (int j = 0; j < 4; ++j) {
          const float a = kernels::bf16_lo(w[j]), b = kernels::bf16_hi(w[j]);
          sum[2 * j] = fmaf(a, a, sum[2 * j]), sum[2 * j + 1] = fmaf(b, b, sum[2 * j + 1]);
        }
      }
      float total = ((sum[0] + sum[1]) + (sum[2] + sum[3])) + ((sum[4] + sum[5]) + (sum[6] + sum[7]));
      total += __shfl_xor_sync(0xffffffffu, total, 16);
      const float inv = rsqrtf(total + 1e-6f);
      if (frag.lane < 16) st.q_inv[r] = inv;  // for the state warpgroups' Q S
#pragma unroll
      for (int h = 0; h < 2; ++h) q_inv_row[h] = __shfl_sync(0xffffffffu, inv, frag.lane / 4 + 8 * h);
    }
    wg::wgmma_wait<0>();
    wg::fence_registers(qk), wg::fence_registers(kk);
    if (normalize_qk) {
      // |k_r|^2 is K Kᵀ's diagonal element (r, r): in the quad of row r's threads, the lane
      // 4 r' + r' / 2 (r' = r % 8) holds it as element r' % 2 of column group j = 2 w + h. Every lane
      // picks that element by masks of its bits (a select or a branch over j put kk in local memory, or
      // spilled), and the quad takes the holder's.
      const int rr = frag.lane / 4;
      const bool odd = rr % 2 != 0;
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        uint32_t bits = 0;
#pragma unroll
        for (int j = 0; j < kChunk / 8; ++j) {
          const int i = 4 * j + 2 * h;
          bits |= __float_as_uint(odd ? kk[i + 1] : kk[i]) & (j == 2 * frag.warp + h ? ~0u : 0u);
        }
        const float diagonal = __uint_as_float(__shfl_sync(0xffffffffu, bits, 4 * rr + rr / 2));
        k_inv_row[h] = rsqrtf(diagonal + 1e-6f);
        if (frag.lane % 4 == 0) st.k_inv[frag.row0 + 8 * h] = k_inv_row[h];  // for the state warpgroups
      }
    }
    if constexpr (kGramFirst) AuxSync::sync();  // warp 0's gates, before every warp reads them for P and L
    stamp(t == 0, kTimelineAuxGroup, chunk, 4);
    // With N = diag(1 / |k|), L = diag(beta) N A N for A = Gamma ⊙ K Kᵀ (strictly lower), and
    // (I + L)^-1 = N^-1 (I + L')^-1 N with L' = diag(beta / |k|^2) A: row factors alone. The state
    // warpgroups work with Vnew' = N Vnew = (I + L')^-1 N X, which is also what P's columns and the
    // state update take (P N Vnew = P' Vnew', Kᵀ N diag(tail) Vnew = Kᵀ diag(tail) Vnew'), so that
    // P' = scale diag(1 / |q|) Gamma ⊙ Q Kᵀ has no column factor either.
    // Per thread: rows row0 and row0 + 8, column pairs 8 j + col0. Every
    // thread computes all its entries, those above the diagonal masked to zeros: without a branch per
    // column group the loads and exponentials of all eight overlap (this runs on the auxiliary
    // warpgroup's critical path; a branch that skipped the groups above a warp's rows serialised them).
    // The decays are 2^((G_r - G_c) log2 e) by the hardware's approximation (relative error ~1e-6 for
    // |G_r - G_c| < 10, far below the bf16 rounding of P; L's entries decay with it), decays below
    // 2^-126 flushed to zero: __expf's handling of those took three of the loop's instructions a
    // decay.
    float p_row[2], l_row[2], G_row[2];
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int r = frag.row0 + 8 * h;
      G_row[h] = st.G[r], p_row[h] = kStateOnly ? 0.f : args.scale * q_inv_row[h];
      l_row[h] = st.beta[r] * (k_inv_row[h] * k_inv_row[h]);
    }
    // In whole-head CTAs, where this warpgroup is the chunk's critical path, the next column group's
    // G is read before this group's stores: the compiler cannot tell those stores from these loads,
    // and would otherwise issue each group's loads only after the stores of the group before (one load
    // latency per group on the chain). Measured 1.6-1.9% off the whole-head shapes and 0.6-1.9% onto
    // some half-head ones (docs/benchmarks/gdn-sm90.md, with 1 / |k| read beside G), which keep the
    // loads in place.
    const auto column_G = [&](int j) { return *reinterpret_cast<const float2*>(st.G + 8 * j + frag.col0); };
    float2 G_next;
    if constexpr (C::kGroups == 2) G_next = column_G(0);
#pragma unroll
    for (int j = 0; j < kChunk / 8; ++j) {
      const int c = 8 * j + frag.col0;
      float p[2][2], l[2][2];
      float2 G_col;
      if constexpr (C::kGroups == 2) {
        G_col = G_next;
        if (j + 1 < kChunk / 8) G_next = column_G(j + 1);
      } else {
        G_col = column_G(j);
      }
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int r = frag.row0 + 8 * h, i = 4 * j + 2 * h;
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          const int cc = c + e;
          const float decay = kernels::fast_exp2(fminf(G_row[h] - (e ? G_col.y : G_col.x), 0.f) * kernels::kLog2e);
          p[h][e] = cc <= r ? p_row[h] * decay * qk[i + e] : 0.f;
          l[h][e] = cc < r ? l_row[h] * decay * kk[i + e] : 0.f;
        }
      }
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int i = 4 * j + 2 * h;
        if (!kStateOnly)
          *reinterpret_cast<uint32_t*>(st.p + frag.direct_offset(i, kChunk)) = kernels::pack_bf16x2(p[h][0], p[h][1]);
        *reinterpret_cast<float2*>(inv_s + (frag.row0 + 8 * h) * kInvStride + c) = make_float2(l[h][0], l[h][1]);
      }
    }
  }
  AuxSync::sync();
  stamp(t == 0, kTimelineAuxGroup, chunk, 5);

  // (I + L)^-1 (invert_unit_lower_mma, its steps stamped one by one).
  invert_diagonal_blocks<kInvStride>(inv_s, t);
  AuxSync::sync();
  stamp(t == 0, kTimelineAuxGroup, chunk, 6);
  merge_inverse_blocks_mma<16, kInvStride, AuxSync, MergeProducts::tf32>(inv_s, t);
  stamp(t == 0, kTimelineAuxGroup, chunk, 7);
  merge_inverse_blocks_mma<32, kInvStride, AuxSync, MergeProducts::tf32>(inv_s, t);
  stamp(t == 0, kTimelineAuxGroup, chunk, 8);
  // Tinv = hi + lo in bf16, as operands [i][j], over the f32 inverse (read whole first): thread t
  // converts columns 8 ((t / 8) % 8) .. + 7 of rows t % 8 + 8 (t / 64) + 16 e, so that each store
  // phase fills one core matrix (and each read phase's eight float4 rows, 68 floats apart, cover all
  // 32 banks).
  {
    const int r0 = t % 8 + 8 * (t / 64), c = ((t / 8) % 8) * 8;
    const uint32_t dst = wg::operand_offset(r0, c, kChunk);
    float4 x[kChunk / 16][2];
#pragma unroll
    for (int e = 0; e < kChunk / 16; ++e) {
      const float* src = inv_s + (r0 + 16 * e) * kInvStride + c;
      x[e][0] = *reinterpret_cast<const float4*>(src), x[e][1] = *reinterpret_cast<const float4*>(src + 4);
    }
    AuxSync::sync();  // every read of the f32 inverse is done before its bytes become operands
#pragma unroll
    for (int e = 0; e < kChunk / 16; ++e) {
      uint32_t hi[4], lo[4];
      kernels::split_bf16x2(x[e][0].x, x[e][0].y, hi[0], lo[0]), kernels::split_bf16x2(x[e][0].z, x[e][0].w, hi[1], lo[1]);
      kernels::split_bf16x2(x[e][1].x, x[e][1].y, hi[2], lo[2]), kernels::split_bf16x2(x[e][1].z, x[e][1].w, hi[3], lo[3]);
      const uint32_t at = dst + e * 2 * (kChunk / 8) * wg::kCoreBytes;  // 16 rows further
      *reinterpret_cast<uint4*>(st.t_hi + at) = make_uint4(hi[0], hi[1], hi[2], hi[3]);
      if constexpr (kSplits.tinv) *reinterpret_cast<uint4*>(st.t_lo + at) = make_uint4(lo[0], lo[1], lo[2], lo[3]);
    }
  }
  wg::fence_async_shared();
  AuxSync::sync();  // the stage's operands are all written before the state warpgroups are told
  stamp(t == 0, kTimelineAuxGroup, chunk, 9);
}

// What a launch runs: whole sequences, or a context split's (gdn/context_split.h) step 1 (a carried
// segment's N from a zero state, or its M from the identity with v = 0: the state alone, no output,
// so no Q) or step 3 (a segment from its entry state).
enum class Launch : int { sequences, carried, segments };
struct SplitWork {
  const ContextSegment* segments;
  const int32_t* carried_segment;
  const int32_t* counts;      // segments, carried segments (the launches are sized by their bounds),
                              // the CTA shape of step 1 and of step 3 (state warpgroups)
  float* transfer;            // M of each carried segment and head, [K, K'] (K' contiguous)
  float* local_state;         // N, [K, V]
  const float* entry_state;   // each segment's entry state, [K, V]
};

// What a CTA computes: its tokens, its head and value tile, where its state comes from and goes to.
struct CtaWork {
  bool active;
  int head, tile;
  int64_t begin, length;
  const float* initial;  // nullptr: zero (or the identity)
  bool initial_kv, identity;
  float* final_state;    // nullptr: not written
  bool final_kv;
  bool zero_v;
};

template <typename C, Launch kLaunch>
__device__ __forceinline__ CtaWork cta_work(const di_gdn_prefill_args& args, const SplitWork& split) {
  constexpr int64_t kMatrix = int64_t(kHeadDim) * kHeadDim;
  const int Hv = args.geometry.num_v_heads;
  const uint32_t item = blockIdx.x / uint32_t(C::kTilesPerHead);
  CtaWork w{};
  w.active = true;
  w.tile = int(blockIdx.x % uint32_t(C::kTilesPerHead));
  w.head = int(item % uint32_t(Hv));
  w.initial_kv = w.final_kv = args.state_layout == DI_GDN_STATE_KV;
  // The sequence's slot in the state pools: the initial state from it, the final state to it.
  auto pool_matrix = [&](int seq, const float* pool) -> int64_t {
    const int64_t slot = args.state_indices ? args.state_indices[seq] : seq;
    return pool != nullptr && slot >= 0 ? (slot * Hv + w.head) * kMatrix : int64_t(-1);
  };
  if constexpr (kLaunch == Launch::sequences) {
    const int seq = int(item / uint32_t(Hv));
    w.begin = args.cu_seqlens[seq];
    w.length = args.cu_seqlens[seq + 1] - w.begin;
    const int64_t in = pool_matrix(seq, args.initial_state), out = pool_matrix(seq, args.final_state);
    if (in >= 0) w.initial = args.initial_state + in;
    if (out >= 0) w.final_state = args.final_state + out;
  } else if constexpr (kLaunch == Launch::carried) {
    const int64_t carried = item / (2u * uint32_t(Hv));
    if (carried >= split.counts[1] || split.counts[2] != C::kGroups) return CtaWork{};
    const ContextSegment seg = split.segments[split.carried_segment[carried]];
    const bool transfer = (item / uint32_t(Hv)) % 2 == 1;
    w.begin = seg.begin, w.length = seg.length;
    w.identity = w.zero_v = transfer;
    w.final_state = (transfer ? split.transfer : split.local_state) + (carried * Hv + w.head) * kMatrix;
    w.final_kv = true;
  } else {
    const int64_t index = item / uint32_t(Hv);
    if (index >= split.counts[0] || split.counts[3] != C::kGroups) return CtaWork{};
    const ContextSegment seg = split.segments[index];
    w.begin = seg.begin, w.length = seg.length;
    if (seg.entry >= 0) {
      w.initial = split.entry_state + (int64_t(seg.entry) * Hv + w.head) * kMatrix;
      w.initial_kv = true;
    } else if (const int64_t in = pool_matrix(seg.seq, args.initial_state); in >= 0) {
      w.initial = args.initial_state + in;
    }
    const int64_t out = seg.carried < 0 ? pool_matrix(seg.seq, args.final_state) : int64_t(-1);
    if (out >= 0) w.final_state = args.final_state + out;
  }
  return w;
}

template <typename C, Launch kLaunch>
__global__ void __launch_bounds__(C::kThreads, 1) gdn_sm90_prefill_kernel(const di_gdn_prefill_args args,
                                                                          const __grid_constant__ InputMaps maps,
                                                                          const SplitWork split) {
#if defined(__CUDA_ARCH__) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
  extern __shared__ __align__(128) unsigned char smem[];
  uint64_t* const landed = reinterpret_cast<uint64_t*>(smem + C::kOffBarriers);  // per input slot

  constexpr bool kStateOnly = kLaunch == Launch::carried;  // no output: no Q, Q S, P or output products
  // A split's launches follow each other early (programmatic dependent launch, run_split). Step 1
  // waits for the plan before it reads the segment table. Step 3 starts while the carry runs: only
  // its state warpgroups wait for the entry states; its inputs and the plan were complete before
  // step 1 began. A CTA that idles still waits, so that a launch behind it never finds the carry
  // unfinished when this grid is.
  if constexpr (kLaunch == Launch::carried) kernels::wait_for_prior_grid();
  if constexpr (kLaunch != Launch::sequences) kernels::allow_dependent_grid();
  const CtaWork work = cta_work<C, kLaunch>(args, split);
  if (!work.active) {  // a split's launches are sized by its bounds and made in both shapes: no work
    if constexpr (kLaunch == Launch::segments) kernels::wait_for_prior_grid();
    return;
  }
  const int Hk = args.geometry.num_k_heads, Hv = args.geometry.num_v_heads;
  const int tile = work.tile, head = work.head;
  const int key_head = head / (Hv / Hk);
  const int64_t seq_begin = work.begin;
  const int64_t seq_len = work.length;
  const bool zero_v = kStateOnly && work.zero_v;
  const int num_chunks = int((seq_len + kChunk - 1) / kChunk);
  auto chunk_len = [&](int chunk) {
    const int64_t remaining = seq_len - int64_t(chunk) * kChunk;
    return int(remaining < kChunk ? remaining : kChunk);
  };

  if (threadIdx.x == 0)
    for (int slot = 0; slot < C::kInputSlots; ++slot) kernels::mbarrier_init(landed + slot, kWarpgroup);
  __syncthreads();

  if (threadIdx.x >= C::kStateThreads) {
    // ---- Auxiliary warpgroup a: chunks a, a + kAuxGroups, ..., ahead of the state warpgroups, each
    // into stage chunk % kStages.
    release_registers<C::kAuxRegisters>();
    const int a = (int(threadIdx.x) - C::kStateThreads) / kWarpgroup, t = int(threadIdx.x) % kWarpgroup;
    for (int chunk = a; chunk < num_chunks; chunk += C::kAuxGroups) {
      stamp(t == 0, kTimelineAuxGroup, chunk, 0);
      // The state warpgroups are done with chunk - kStages, the stage's last chunk.
      if (chunk >= kStages) bar_sync<C>(kBarEmpty0 + chunk % kStages);
      stamp(t == 0, kTimelineAuxGroup, chunk, 1);
      kernels::mbarrier_wait(landed + chunk % C::kInputSlots, uint32_t(chunk / C::kInputSlots) & 1);
      stamp(t == 0, kTimelineAuxGroup, chunk, 2);
      prepare_chunk<C, kStateOnly>(args, Stage<C>(smem, chunk), chunk_len(chunk), t, chunk);
      bar_arrive<C>(kBarFull0 + chunk % kStages);
    }
    return;
  }

  // ---- State warpgroup w: value columns v0 .. v0 + 63, every product transposed (rows = values).
  claim_registers<C::kStateRegisters>();
  using StatesSync = NamedSync<kBarStates, C::kStateThreads>;
  using Turns = ProductTurns<C::kGroups == 2 && kLaunch == Launch::sequences>;
  const int w = int(threadIdx.x) / kWarpgroup, tid = int(threadIdx.x) % kWarpgroup;
  const int v0 = (tile * C::kGroups + w) * kTileV;
  unsigned char* const out_s = smem + C::kOffOut + w * kMatOpBytes;  // the output's staging tile
  const wg::Fragment frag(tid);
  bf16* const out = static_cast<bf16*>(args.out);
  auto load_chunk = [&](int chunk) {
    if (w == 0)
      load_chunk_async<C, kStateOnly>(args, maps, Stage<C>(smem, chunk), landed + chunk % C::kInputSlots,
                          seq_begin + int64_t(chunk) * kChunk, chunk_len(chunk), head, key_head, v0, tid);
  };
  for (int chunk = 0; chunk < C::kInputSlots && chunk < num_chunks; ++chunk) load_chunk(chunk);

  // Sᵀ in accumulator form: state[half][i] = S[64 half + col(i)][v0 + row(i)] (keys along the columns).
  if constexpr (kLaunch == Launch::segments) kernels::wait_for_prior_grid();  // the carry's entry states
  float state[2][32];
  if (work.initial != nullptr) {
    const float* src = work.initial;
#pragma unroll
    for (int half = 0; half < 2; ++half)
#pragma unroll
      for (int i = 0; i < 32; i += 2) {
        const int v = v0 + frag.row(i), key = 64 * half + frag.col(i);
        if (work.initial_kv) {
          state[half][i] = src[int64_t(key) * kHeadDim + v], state[half][i + 1] = src[int64_t(key + 1) * kHeadDim + v];
        } else {
          const float2 x = *reinterpret_cast<const float2*>(src + int64_t(v) * kHeadDim + key);
          state[half][i] = x.x, state[half][i + 1] = x.y;
        }
      }
  } else {
    zero(state[0]), zero(state[1]);
    if (kStateOnly && work.identity) {  // M's columns start as the identity's: S[key][v] = (key == v)
#pragma unroll
      for (int half = 0; half < 2; ++half)
#pragma unroll
        for (int i = 0; i < 32; ++i) state[half][i] = 64 * half + frag.col(i) == v0 + frag.row(i) ? 1.0f : 0.0f;
    }
  }

  if (w == 1) Turns::pass(w);  // warpgroup 0 goes first
  for (int chunk = 0; chunk < num_chunks; ++chunk) {
    const int b = chunk % kStages;
    const Stage<C> st(smem, chunk);
    const int64_t t0 = seq_begin + int64_t(chunk) * kChunk;
    const int len = chunk_len(chunk);
    stamp(tid == 0, w, chunk, 0);
    bar_sync<C>(kBarFull0 + b);  // an auxiliary warpgroup has prepared this chunk
    // Already complete (the auxiliary warpgroup waited on it): the boxes' writes are visible here too.
    kernels::mbarrier_wait(landed + chunk % C::kInputSlots, uint32_t(chunk / C::kInputSlots) & 1);
    stamp(tid == 0, w, chunk, 1);

    // ---- (K S)ᵀ = Sᵀ Kᵀ and (Q S)ᵀ = Sᵀ Qᵀ: A = Sᵀ in bf16 from the state's own registers (the pairs of
    // its two 64-key tiles are the k16 steps 0..3 and 4..7), B = the K and Q tiles as loaded.
    float ks[32], qs[32];
    {
      uint32_t s_pairs[2 * 16];
      pack_pairs(state[0], s_pairs);
      pack_pairs(state[1], s_pairs + 16);
      zero(ks), zero(qs);
      Turns::take(w);
      wg::wgmma_fence();
      wg::mma_rs<kHeadDim>(ks, s_pairs, wg::k_major_pieces(st.k, kChunk), false);
      if (!kStateOnly) wg::mma_rs<kHeadDim>(qs, s_pairs, wg::k_major_pieces(st.q, kChunk), false);
      wg::wgmma_commit();
      Turns::pass(w);
      wg::wgmma_wait<0>();
    }
    wg::fence_registers(ks), wg::fence_registers(qs);
    stamp(tid == 0, w, chunk, 2);

    // X'ᵀ = (V - D diag(1/|k|) K S)ᵀ diag(beta / |k|) (X' = N X, see prepare_chunk), the
    // per-token factors now per column; Vᵀ's pairs come from the V tile by ldmatrix.trans. The output
    // starts as (scale D diag(1/|q|) Q S)ᵀ. X' is split into bf16 hi + lo pairs, the A operands of
    // Vnew'ᵀ = X'ᵀ Tinv'ᵀ.
    uint32_t x_hi[16], x_lo[16];  // x_lo unused without the X split
    {
      uint32_t v_pairs[16];
      frag.load_pairs_transposed_pieces(st.v + w * kVBytes, kChunk, v_pairs);
      if (zero_v) zero_pairs(v_pairs);  // M: the recurrence with v = 0
#pragma unroll
      for (int i = 0; i < 32; i += 2) {
        const int c = frag.col(i);  // tokens c, c + 1
        const float2 bt = *reinterpret_cast<const float2*>(st.beta + c);
        const float2 eg = *reinterpret_cast<const float2*>(st.exp_G + c);
        const float2 ki = *reinterpret_cast<const float2*>(st.k_inv + c);
        ks[i] = bt.x * ki.x * (kernels::bf16_lo(v_pairs[i / 2]) - eg.x * ki.x * ks[i]);  // ks becomes X'ᵀ
        ks[i + 1] = bt.y * ki.y * (kernels::bf16_hi(v_pairs[i / 2]) - eg.y * ki.y * ks[i + 1]);
        if (!kStateOnly) {
          const float2 qi = *reinterpret_cast<const float2*>(st.q_inv + c);
          qs[i] *= args.scale * eg.x * qi.x, qs[i + 1] *= args.scale * eg.y * qi.y;
        }
      }
      pack_pairs(ks, x_hi);
      if constexpr (kSplits.x) low_pairs(ks, x_lo);
    }
    stamp(tid == 0, w, chunk, 3);

    // ---- Vnew'ᵀ = X'ᵀ Tinv'ᵀ = X_hiᵀ Tinv_hiᵀ + X_hiᵀ Tinv_loᵀ + X_loᵀ Tinv_hiᵀ (the lo x lo term is
    // below f32 rounding); Tinv's [i][j] tiles are the K-major B operands as they are.
    float vnew[32];
    zero(vnew);
    const auto t_hi = wg::k_major(st.t_hi, kChunk), t_lo = wg::k_major(st.t_lo, kChunk);
    Turns::take(w);
    wg::wgmma_fence();
    wg::mma_rs<kChunk>(vnew, x_hi, t_hi, false);
    if constexpr (kSplits.tinv) wg::mma_rs<kChunk>(vnew, x_hi, t_lo, true);
    if constexpr (kSplits.x) wg::mma_rs<kChunk>(vnew, x_lo, t_hi, true);
    wg::wgmma_commit();
    Turns::pass(w);
    wg::wgmma_wait<0>();
    wg::fence_registers(vnew);
    stamp(tid == 0, w, chunk, 4);

    // Vnew' as hi + lo pairs (A of the output's products); Wᵀ = Vnew'ᵀ diag(exp(G_last - G)) as hi +
    // lo pairs (A of the state's).
    uint32_t vnew_hi[16], vnew_lo[16], w_hi[16], w_lo[16];
    pack_pairs(vnew, vnew_hi);
    if constexpr (kSplits.vnew_out) low_pairs(vnew, vnew_lo);
#pragma unroll
    for (int i = 0; i < 32; i += 2) {
      const int c = frag.col(i);
      const float2 tl = *reinterpret_cast<const float2*>(st.tail + c);
      vnew[i] *= tl.x, vnew[i + 1] *= tl.y;  // vnew becomes Wᵀ
    }
    pack_pairs(vnew, w_hi);
    if constexpr (kSplits.w) low_pairs(vnew, w_lo);

    // ---- Oᵀ += Vnewᵀ Pᵀ (P's [i][j] tile is the K-major B operand); Sᵀ = exp(G_last) Sᵀ + Wᵀ K, K read
    // from the slot's tile as the MN-major B operand (keys 64 .. 127 from column 64 on).
    const float chunk_decay = st.exp_G[len - 1];
#pragma unroll
    for (int half = 0; half < 2; ++half)
#pragma unroll
      for (int i = 0; i < 32; ++i) state[half][i] *= chunk_decay;
    const auto p_op = wg::k_major(st.p, kChunk);
    const auto k_keys_lo = wg::mn_major_pieces(st.k, kChunk),
               k_keys_hi = wg::mn_major_pieces(st.k + wg::piece_offset(0, 64, kChunk), kChunk);
    Turns::take(w);
    wg::wgmma_fence();
    wg::mma_rs<kChunk>(state[0], w_hi, k_keys_lo, true);
    wg::mma_rs<kChunk>(state[1], w_hi, k_keys_hi, true);
    if constexpr (kSplits.w) {
      wg::mma_rs<kChunk>(state[0], w_lo, k_keys_lo, true);
      wg::mma_rs<kChunk>(state[1], w_lo, k_keys_hi, true);
    }
    if (!kStateOnly) {
      wg::mma_rs<kChunk>(qs, vnew_hi, p_op, true);
      if constexpr (kSplits.vnew_out) wg::mma_rs<kChunk>(qs, vnew_lo, p_op, true);
    }
    wg::wgmma_commit();
    Turns::pass(w);
    wg::wgmma_wait<0>();
    wg::fence_registers(qs), wg::fence_registers(state[0]), wg::fence_registers(state[1]);
    stamp(tid == 0, w, chunk, 5);
    StatesSync::sync();  // every state warpgroup's products are done with the stage and the input slot
    if (chunk + kStages < num_chunks) bar_arrive<C>(kBarEmpty0 + b);  // the stage may take chunk + kStages
    if (chunk + C::kInputSlots < num_chunks) load_chunk(chunk + C::kInputSlots);  // the slot its next chunk
    stamp(tid == 0, w, chunk, 6);

    // The output, transposed back through the staging tile (its last reads, the previous chunk's
    // stores, came before the barrier above).
    if (!kStateOnly) {
      stage_output_transposed(qs, out_s, frag);
      state_sync(w);
      store_output(out_s, out + (t0 * Hv + head) * kHeadDim + v0, int64_t(Hv) * kHeadDim, len, tid);
    }
    stamp(tid == 0, w, chunk, 7);
  }
  if (w == 0) Turns::take(w);  // warpgroup 1's last arrival

  if (work.final_state != nullptr) {
    float* dst = work.final_state;
#pragma unroll
    for (int half = 0; half < 2; ++half)
#pragma unroll
      for (int i = 0; i < 32; i += 2) {
        const int v = v0 + frag.row(i), key = 64 * half + frag.col(i);
        if (work.final_kv) {
          dst[int64_t(key) * kHeadDim + v] = state[half][i], dst[int64_t(key + 1) * kHeadDim + v] = state[half][i + 1];
        } else {
          *reinterpret_cast<float2*>(dst + int64_t(v) * kHeadDim + key) = make_float2(state[half][i], state[half][i + 1]);
        }
      }
  }
#endif
}

// ---------------------------------------------------------------------------------------------
// The ABI entry points.

// cuTensorMapEncodeTiled, from the driver the runtime has loaded.
PFN_cuTensorMapEncodeTiled_v12000 tensor_map_encoder() {
  static const PFN_cuTensorMapEncodeTiled_v12000 encode = [] {
    void* fn = nullptr;
    cudaDriverEntryPointQueryResult found{};
    if (cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &fn, 12000, cudaEnableDefault, &found) !=
            cudaSuccess ||
        found != cudaDriverEntryPointSuccess)
      fn = nullptr;
    return reinterpret_cast<PFN_cuTensorMapEncodeTiled_v12000>(fn);
  }();
  return encode;
}

// The map of a [tokens, heads, 128] bf16 tensor as {8 elements, tokens, 16 pieces, heads}, boxes of
// {8, 64 tokens, `box_pieces`, 1}.
bool encode_input_map(CUtensorMap& map, const void* data, int64_t tokens, int heads, int box_pieces) {
  const PFN_cuTensorMapEncodeTiled_v12000 encode = tensor_map_encoder();
  if (encode == nullptr) return false;
  const cuuint64_t dims[4] = {8, cuuint64_t(tokens), kHeadDim / 8, cuuint64_t(heads)};
  const cuuint64_t strides[3] = {cuuint64_t(heads) * kHeadDim * 2, 16, kHeadDim * 2};  // bytes, dims 1..3
  const cuuint32_t box[4] = {8, kChunk, cuuint32_t(box_pieces), 1};
  const cuuint32_t element_strides[4] = {1, 1, 1, 1};
  return encode(&map, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 4, const_cast<void*>(data), dims, strides, box,
                element_strides, CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_NONE,
                CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE) == CUDA_SUCCESS;
}

// One launch of the kernel over `pairs` (sequence or segment, value head) pairs.
template <typename C, Launch kLaunch>
int launch(const di_gdn_prefill_args& a, di_gdn_stream stream, int64_t pairs, const SplitWork& split = {}) {
  const int64_t ctas = pairs * C::kTilesPerHead;
  if (ctas > int64_t(INT32_MAX)) return DI_GDN_UNSUPPORTED;
  if (ctas == 0) return DI_GDN_OK;
  // A batch of zero-length sequences reads no input: its maps stay empty.
  InputMaps maps{};
  if (a.total_tokens > 0 &&
      !(encode_input_map(maps.q, a.q, a.total_tokens, a.geometry.num_k_heads, kHeadDim / 8) &&
        encode_input_map(maps.k, a.k, a.total_tokens, a.geometry.num_k_heads, kHeadDim / 8) &&
        encode_input_map(maps.v, a.v, a.total_tokens, a.geometry.num_v_heads, C::kGroups * kTileV / 8)))
    return DI_GDN_LAUNCH_FAILED;
  if (cudaFuncSetAttribute(gdn_sm90_prefill_kernel<C, kLaunch>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                           int(C::kSmemBytes)) != cudaSuccess)
    return DI_GDN_LAUNCH_FAILED;
  const auto stream_ = reinterpret_cast<cudaStream_t>(stream);
  if constexpr (kLaunch != Launch::sequences)  // a split's steps: early, behind the plan or the carry
    return kernels::launch_early(gdn_sm90_prefill_kernel<C, kLaunch>, dim3(unsigned(ctas)), dim3(C::kThreads),
                                 C::kSmemBytes, stream_, a, maps, split) == cudaSuccess
               ? DI_GDN_OK
               : DI_GDN_LAUNCH_FAILED;
  gdn_sm90_prefill_kernel<C, kLaunch><<<unsigned(ctas), C::kThreads, C::kSmemBytes, stream_>>>(a, maps, split);
  return cudaGetLastError() == cudaSuccess ? DI_GDN_OK : DI_GDN_LAUNCH_FAILED;
}

int launch_plain(bool whole_head, const di_gdn_prefill_args& a, di_gdn_stream stream, int64_t pairs) {
  return whole_head ? launch<Head, Launch::sequences>(a, stream, pairs)
                    : launch<HalfHead, Launch::sequences>(a, stream, pairs);
}

// A step of a split: in half-head CTAs, and in whole-head ones too where the plan may choose them
// (the shape the plan did not choose returns at once).
template <Launch kLaunch>
int launch_split_step(bool may_be_whole_head, const di_gdn_prefill_args& a, di_gdn_stream stream, int64_t pairs,
                      const SplitWork& split) {
  if (may_be_whole_head)
    if (const int status = launch<Head, kLaunch>(a, stream, pairs, split); status != DI_GDN_OK) return status;
  return launch<HalfHead, kLaunch>(a, stream, pairs, split);
}

// A split batch (gdn/context_split.h): the plan, step 1 (N and M of every carried segment), the
// carry, step 3. Every launch is sized by the split's bounds; the plan's counts idle the rest.
int run_split(const di_gdn_prefill_args& a, const ContextSplit& split, void* scratch, int num_sms, di_gdn_stream stream) {
  const ContextSplitScratch layout = context_split_scratch(split, a.num_seqs, a.geometry.num_v_heads);
  auto at = [&](size_t offset) { return static_cast<unsigned char*>(scratch) + offset; };
  const int64_t Hv = a.geometry.num_v_heads;
  if (const int status = launch_context_plan(split, layout, scratch, a.cu_seqlens, a.num_seqs, int(Hv), num_sms, stream);
      status != DI_GDN_OK)
    return status;
  SplitWork work{};
  work.segments = reinterpret_cast<const ContextSegment*>(at(layout.segments));
  work.carried_segment = reinterpret_cast<const int32_t*>(at(layout.carried_segment));
  work.counts = reinterpret_cast<const int32_t*>(at(layout.counts));
  work.transfer = reinterpret_cast<float*>(at(layout.transfer));
  work.local_state = reinterpret_cast<float*>(at(layout.local_state));
  work.entry_state = reinterpret_cast<const float*>(at(layout.entry_state));
  if (const int status = launch_split_step<Launch::carried>(split.carried_may_be_whole_head, a, stream,
                                                           2 * Hv * split.max_carried, work);
      status != DI_GDN_OK)
    return status;
  if (const int status = launch_context_carry(layout, scratch, a, stream); status != DI_GDN_OK) return status;
  return launch_split_step<Launch::segments>(split.segments_may_be_whole_head, a, stream, Hv * split.max_segments, work);
}

// The split a run makes: the policy's, or the one a caller forces (sm90_prefill.h).
ContextSplit split_for(const di_gdn_prefill_shape& shape, int num_sms, int32_t segment_tokens) {
  if (segment_tokens < 0) return {};
  if (segment_tokens == 0)
    return choose_context_split(shape.num_seqs, shape.total_tokens, shape.max_seq_tokens, shape.geometry.num_v_heads,
                                num_sms);
  return context_split_of(shape.num_seqs, shape.total_tokens, shape.geometry.num_v_heads, num_sms, segment_tokens);
}

int sm90_supports(const di_gdn_geometry* geometry, const di_gdn_device* device, di_gdn_state_layout layout,
                  char* reason, size_t reason_capacity) {
  if (geometry == nullptr || device == nullptr) return refuse(reason, reason_capacity, "geometry or device is NULL");
  if (const int status = check_geometry("sm90", *geometry, layout, reason, reason_capacity); status != DI_GDN_OK)
    return status;
#if !DI_GDN_SM90A
  return refuse(reason, reason_capacity,
                "this build has no sm_90a code (CMAKE_CUDA_ARCHITECTURES lacks 90a): sm90 needs wgmma");
#endif
  if (device->sm_major != 9 || device->sm_minor != 0)
    return refuse(reason, reason_capacity,
                  "sm_%d%d unsupported: sm90 runs sm_90a code (wgmma), which only compute capability 9.0 executes",
                  device->sm_major, device->sm_minor);
  if (device->shared_memory_per_block_optin < sm90_prefill_smem_bytes())
    return refuse(reason, reason_capacity, "sm90 needs %zu bytes of shared memory per block, the device allows %zu",
                  sm90_prefill_smem_bytes(), device->shared_memory_per_block_optin);
  return accept(reason, reason_capacity);
}

size_t sm90_scratch_bytes(const di_gdn_prefill_shape* shape) { return sm90_split_scratch_bytes(shape, 0); }

int sm90_run(const di_gdn_prefill_args* args, void* scratch, size_t scratch_size, di_gdn_stream stream) {
  return sm90_run_split(args, scratch, scratch_size, stream, 0);
}

}  // namespace

size_t sm90_split_scratch_bytes(const di_gdn_prefill_shape* shape, int32_t segment_tokens) {
  if (shape == nullptr || shape->num_seqs <= 0 || shape->total_tokens < 0 ||
      !length_hint_ok(shape->num_seqs, shape->total_tokens, shape->max_seq_tokens))
    return 0;
  di_gdn_device info{};
  if (!current_device(info)) return 0;
  const ContextSplit split = split_for(*shape, info.num_sms, segment_tokens);
  return context_split_scratch(split, shape->num_seqs, shape->geometry.num_v_heads).total;
}

int sm90_run_split(const di_gdn_prefill_args* args, void* scratch, size_t scratch_size, di_gdn_stream stream,
                   int32_t segment_tokens) {
  if (const int status = check_run_args(args); status != DI_GDN_OK) return status;
  const di_gdn_prefill_args& a = *args;
  const di_gdn_geometry& g = a.geometry;
  // Vector accesses: q, k, v by 16 bytes (the tensor maps' boxes), out by 16, the state pools by 8.
  if (!aligned(a.q, 16) || !aligned(a.k, 16) || !aligned(a.v, 16) || !aligned(a.out, 16) ||
      !aligned(a.initial_state, 8) || !aligned(a.final_state, 8))
    return DI_GDN_INVALID_ARGUMENT;
  if (check_geometry("sm90", g, a.state_layout, nullptr, 0) != DI_GDN_OK) return DI_GDN_UNSUPPORTED;
  if (a.num_seqs == 0) return DI_GDN_OK;
  if (a.total_tokens > INT32_MAX) return DI_GDN_UNSUPPORTED;  // a tensor map's coordinates are int32
  if (segment_tokens > 0 && segment_tokens % kContextSplitChunk != 0) return DI_GDN_INVALID_ARGUMENT;

  di_gdn_device info{};
  if (!current_device(info)) return DI_GDN_LAUNCH_FAILED;
  if (sm90_supports(&g, &info, a.state_layout, nullptr, 0) != DI_GDN_OK) return DI_GDN_UNSUPPORTED;
  const ContextSplit split =
      split_for(di_gdn_prefill_shape{g, a.num_seqs, a.total_tokens, a.max_seq_tokens}, info.num_sms, segment_tokens);
  if (split.segment_tokens > 0) {
    // The scratch the split needs (what scratch_bytes() said for this shape), aligned for its vectors.
    if (scratch == nullptr || scratch_size < context_split_scratch(split, a.num_seqs, g.num_v_heads).total ||
        !aligned(scratch, 256))
      return DI_GDN_INVALID_ARGUMENT;
    return run_split(a, split, scratch, info.num_sms, stream);
  }
  // A CTA per head unless half-head CTAs would all run at once, each on an SM of its own. Both shapes
  // compute every value column the same way: the choice changes no bit of the results.
  const int64_t pairs = int64_t(a.num_seqs) * g.num_v_heads;
  return launch_plain(whole_head_ctas(pairs, info.num_sms), a, stream, pairs);
}

const di_gdn_prefill_backend& gdn_sm90_backend() {
  static const di_gdn_prefill_backend backend{"sm90", &sm90_supports, &sm90_scratch_bytes, &sm90_run};
  return backend;
}

bool sm90_timeline_built() { return DI_SM90_TIMELINE != 0; }

std::string sm90_timeline_attach(const Sm90Timeline& timeline) {
#if DI_SM90_TIMELINE
  if (timeline.stamps != nullptr && timeline.chunks <= 0) return "a timeline needs a positive chunk count";
  const int chunks = timeline.stamps != nullptr ? timeline.chunks : 0;
  cudaError_t e = cudaMemcpyToSymbol(g_timeline_stamps, &timeline.stamps, sizeof(timeline.stamps));
  if (e == cudaSuccess) e = cudaMemcpyToSymbol(g_timeline_chunks, &chunks, sizeof(chunks));
  return e == cudaSuccess ? "" : std::string("attaching the timeline: ") + cudaGetErrorString(e);
#else
  (void)timeline;
  return "this build does not record the sm90 timeline (configure with -DDI_SM90_TIMELINE=ON)";
#endif
}

size_t sm90_prefill_smem_bytes() { return Head::kSmemBytes > HalfHead::kSmemBytes ? Head::kSmemBytes : HalfHead::kSmemBytes; }

}  // namespace di::gdn
