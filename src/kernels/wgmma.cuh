#pragma once
// Hopper warpgroup MMA (wgmma, sm_90a) for kernels that keep their operands in shared memory in the
// "canonical" no-swizzle layout, and the accumulator fragment map that goes with it.
//
// Operand layout (PTX ISA, "Shared Memory Matrix Layout", K-major, no swizzle). A tile of R rows (M
// for A, N for B) by Kd contraction elements, bf16, is stored as 8x8 "core matrices" of 128
// contiguous bytes (8 rows of 16 bytes, the 8 contraction elements of a row contiguous). Core matrices
// follow each other along the contraction dimension first, then along the rows:
//     byte offset of (r, k) = ((r / 8) * (Kd / 8) + k / 8) * 128 + (r % 8) * 16 + (k % 8) * 2
// so the descriptor's leading byte offset (next core matrix along K) is 128 and its stride byte
// offset (next 8 rows) is Kd * 16. A k16 step advances the start address by 256 bytes; rows 64..127
// of a 128-row operand start 8 * Kd * 16 bytes further.
//
// MN-major operands (bf16 only, the wgmma "transpose" bit): the same bytes read the other way. A
// tile stored as [Kd][W] in the layout above (operand_offset(k, n, W)) is the operand whose element
// (n, k) sits at (k, n): core matrices are 8 contraction rows of 8 contiguous M/N elements, the
// next 8 M/N elements 128 bytes further (stride byte offset), the next 8 contraction rows W * 16
// bytes further (leading byte offset); a k16 step is W * 32 bytes. So an accumulator that is D[k][n]
// becomes a B operand by direct, packed stores (no transposition in registers), and a loaded K tile
// [tokens][keys] is Kᵀ as an A operand without a copy (keys 64..127 start 1024 bytes further).
//
// Accumulator fragment (m64nNk16, f32): thread t of the warpgroup (warp w = t / 32, lane l) holds
// d[4 j + 2 h + e] = D[16 w + l / 4 + 8 h][8 j + 2 (l % 4) + e]  for j < N / 8, h, e in {0, 1}.
//
// Ordering rules the callers follow: shared memory written by ordinary stores (or cp.async) becomes
// visible to wgmma after fence_async_shared() by the writers and a barrier; registers written by
// ordinary instructions become wgmma accumulators after wgmma_fence(); results are read only after
// wgmma_wait<0>().
#include <cstdint>

namespace di::kernels::wgmma {

constexpr int kCoreBytes = 128;  // one 8x8 bf16 core matrix

// Byte offset of element (r, k) of an R x Kd operand tile in the layout above.
__device__ __forceinline__ constexpr uint32_t operand_offset(int r, int k, int kd) {
  return uint32_t(((r >> 3) * (kd >> 3) + (k >> 3)) * kCoreBytes + (r & 7) * 16 + (k & 7) * 2);
}

// The 64-bit shared memory matrix descriptor: start address, leading byte offset, stride byte
// offset, each in 16-byte units; swizzle mode 0 (none).
__device__ __forceinline__ uint64_t descriptor(const void* smem, uint32_t leading_bytes, uint32_t stride_bytes) {
  const uint32_t address = static_cast<uint32_t>(__cvta_generic_to_shared(smem));
  const uint64_t start = (address >> 4) & 0x3fff;
  const uint64_t leading = (leading_bytes >> 4) & 0x3fff;
  const uint64_t stride = (stride_bytes >> 4) & 0x3fff;
  return start | (leading << 16) | (stride << 32);
}
__device__ __forceinline__ uint64_t descriptor(const void* smem, int kd) {
  return descriptor(smem, kCoreBytes, uint32_t(kd) * 16);
}

// An operand as wgmma reads it: the descriptor of its first k16 step, the descriptor increment to the
// next one (16-byte units), and whether it is MN-major (an immediate of the instruction).
template <bool mn_major_>
struct Operand {
  static constexpr bool mn_major = mn_major_;
  uint64_t desc;
  uint32_t step;
};
// A K-major tile [rows][kd].
__device__ __forceinline__ Operand<false> k_major(const void* tile, int kd) { return {descriptor(tile, kd), 16}; }
// An MN-major tile stored as [kd][width] (width elements per contraction row).
__device__ __forceinline__ Operand<true> mn_major(const void* tile, int width) {
  return {descriptor(tile, uint32_t(width) * 16, kCoreBytes), uint32_t(width) * 2};
}

// The piece-major layout: what a TMA box {8 elements, R rows, pieces} writes. A tile of R rows by Kd
// contraction elements is stored as Kd / 8 "pieces" of R rows x 16 bytes, one after the other:
//     byte offset of (r, k) = (k / 8) * R * 16 + r * 16 + (k % 8) * 2
// Its core matrices are still 128 contiguous bytes, now following each other along the rows first:
// read K-major, the leading byte offset (next core matrix along K) is R * 16 and the stride byte
// offset (next 8 rows) 128, a k16 step R * 32 bytes; read MN-major (rows = contraction, pieces = M/N),
// the next 8 contraction rows are 128 bytes further, the next 8 M/N elements R * 16, a k16 step 256.
__device__ __forceinline__ constexpr uint32_t piece_offset(int r, int k, int rows) {
  return uint32_t((k >> 3) * rows * 16 + r * 16 + (k & 7) * 2);
}
__device__ __forceinline__ Operand<false> k_major_pieces(const void* tile, int rows) {
  return {descriptor(tile, uint32_t(rows) * 16, kCoreBytes), uint32_t(rows) * 2};
}
__device__ __forceinline__ Operand<true> mn_major_pieces(const void* tile, int rows) {
  return {descriptor(tile, kCoreBytes, uint32_t(rows) * 16), 16};
}

__device__ __forceinline__ void fence_async_shared() {
  asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
}
__device__ __forceinline__ void wgmma_fence() { asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void wgmma_commit() { asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory"); }
template <int pending>
__device__ __forceinline__ void wgmma_wait() {
  asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(pending) : "memory");
}

// Keeps the compiler from moving accumulator reads or writes across an asynchronous wgmma.
template <int n>
__device__ __forceinline__ void fence_registers(float (&d)[n]) {
#pragma unroll
  for (int i = 0; i < n; ++i) asm volatile("" : "+f"(d[i])::"memory");
}

// d (+)= A B for one m64n64k16 step, bf16 operands from shared memory, f32 accumulators, A and/or B
// MN-major when trans_a / trans_b. accumulate == false ignores d's old values (D = A B).
template <bool trans_a = false, bool trans_b = false>
__device__ __forceinline__ void mma_m64n64k16(float (&d)[32], uint64_t desc_a, uint64_t desc_b, bool accumulate) {
  asm volatile(
      "{\n"
      ".reg .pred p;\n"
      "setp.ne.b32 p, %34, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 "
      "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
      "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}, "
      "%32, %33, p, 1, 1, %35, %36;\n"
      "}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
        "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]),
        "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),
        "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
      : "l"(desc_a), "l"(desc_b), "r"(int(accumulate)), "n"(int(trans_a)), "n"(int(trans_b)));
}

// D (+)= A B over a whole contraction of kd elements (kd / 16 wgmmas; the caller commits and waits).
template <int kd, bool ta, bool tb>
__device__ __forceinline__ void mma(float (&d)[32], Operand<ta> a, Operand<tb> b, bool accumulate) {
#pragma unroll
  for (int s = 0; s < kd / 16; ++s)
    mma_m64n64k16<ta, tb>(d, a.desc + uint64_t(s) * a.step, b.desc + uint64_t(s) * b.step, accumulate || s > 0);
}

// The same with A 64 x kd at a and B 64 x kd at b, both K-major.
template <int kd>
__device__ __forceinline__ void mma_m64n64(float (&d)[32], const void* a, const void* b, bool accumulate) {
  mma<kd>(d, k_major(a, kd), k_major(b, kd), accumulate);
}

// d (+)= A B for one m64n64k16 step with A from registers: a[0..3] are this thread's bf16 pairs of the
// 64 x 16 A slice, laid out as an accumulator's columns (warp w rows 16 w .. 16 w + 15; a[0] row
// l / 4, columns 2 (l % 4) and + 1; a[1] eight rows further; a[2], a[3] the same eight columns
// further). So the pairs of an accumulator tile D (pairs[i / 2] = D's elements i, i + 1, as
// Fragment::store_pairs takes them) are, four at a time, the A operand of a product that contracts
// over D's columns: k16 step s is pairs[4 s .. 4 s + 3]. B from shared memory, MN-major when trans_b.
template <bool trans_b = false>
__device__ __forceinline__ void mma_m64n64k16_rs(float (&d)[32], const uint32_t* a, uint64_t desc_b, bool accumulate) {
  asm volatile(
      "{\n"
      ".reg .pred p;\n"
      "setp.ne.b32 p, %37, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 "
      "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
      "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}, "
      "{%32, %33, %34, %35}, %36, p, 1, 1, %38;\n"
      "}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
        "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]),
        "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),
        "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc_b), "r"(int(accumulate)), "n"(int(trans_b)));
}

// D (+)= A B over kd contraction elements with A's pairs in registers (pairs[4 s .. 4 s + 3] for k16
// step s, as mma_m64n64k16_rs) and B from shared memory.
template <int kd, bool tb>
__device__ __forceinline__ void mma_rs(float (&d)[32], const uint32_t* pairs, Operand<tb> b, bool accumulate) {
#pragma unroll
  for (int s = 0; s < kd / 16; ++s)
    mma_m64n64k16_rs<tb>(d, pairs + 4 * s, b.desc + uint64_t(s) * b.step, accumulate || s > 0);
}

// Fragment coordinates of accumulator element i for this thread (see the header comment), and the
// byte offsets at which element i lands in an operand tile: "direct" stores D[row][col] as operand
// element (row, col), "transposed" as (col, row). Offsets are a per-thread base plus a constant of i,
// so unrolled loops address shared memory with immediates instead of keeping one register per element.
struct Fragment {
  int row0;  // 16 w + l / 4; element i sits at row row0 + 8 h
  int col0;  // 2 (l % 4); element i sits at column 8 j + col0 + e
  int warp, lane;
  __device__ __forceinline__ explicit Fragment(int thread)
      : row0(16 * (thread / 32) + (thread % 32) / 4), col0(2 * (thread % 4)), warp(thread / 32), lane(thread % 32) {}
  __device__ __forceinline__ int row(int i) const { return row0 + 8 * ((i >> 1) & 1); }
  __device__ __forceinline__ int col(int i) const { return 8 * (i >> 2) + col0 + (i & 1); }
  // (row(i) + row_shift, col(i)) in an operand whose contraction is kd (row_shift a multiple of 8).
  __device__ __forceinline__ uint32_t direct_offset(int i, int kd, int row_shift = 0) const {
    return uint32_t((row0 >> 3) * (kd / 8) * kCoreBytes + (row0 & 7) * 16 + col0 * 2) +
           uint32_t((((i >> 1) & 1) + row_shift / 8) * (kd / 8) * kCoreBytes + (i >> 2) * kCoreBytes + (i & 1) * 2);
  }
  // The thread's 16 bf16 pairs, pairs[i / 2] holding elements i and i + 1 (i even), stored as
  // direct_offset puts them, or loaded back: stmatrix / ldmatrix, four 8x8 blocks (a block is one core
  // matrix) per instruction where pair stores take sixteen. In instruction k, lane l gives the address
  // of row l % 8 of block 4 k + l / 8, i.e. rows 16 w + 8 h, columns 8 j for (j, h) = (2 k + l / 16,
  // (l / 8) % 2); its register m carries pairs[4 k + m], the same (j, h) for the lanes that own it.
  __device__ __forceinline__ uint32_t block_row_offset(int kd, int row_shift) const {
    const int m = lane / 8;
    return uint32_t(((2 * warp + (m & 1) + row_shift / 8) * (kd / 8) + (m >> 1)) * kCoreBytes + (lane % 8) * 16);
  }
  __device__ __forceinline__ void store_pairs(void* tile, int kd, const uint32_t (&pairs)[16], int row_shift = 0) const {
    const uint32_t base = static_cast<uint32_t>(__cvta_generic_to_shared(tile)) + block_row_offset(kd, row_shift);
#pragma unroll
    for (int k = 0; k < 4; ++k)
      asm volatile("stmatrix.sync.aligned.m8n8.x4.shared.b16 [%0], {%1, %2, %3, %4};\n" ::"r"(base + k * 2 * kCoreBytes),
                   "r"(pairs[4 * k]), "r"(pairs[4 * k + 1]), "r"(pairs[4 * k + 2]), "r"(pairs[4 * k + 3])
                   : "memory");
  }
  __device__ __forceinline__ void load_pairs(const void* tile, int kd, uint32_t (&pairs)[16]) const {
    const uint32_t base = static_cast<uint32_t>(__cvta_generic_to_shared(tile)) + block_row_offset(kd, 0);
#pragma unroll
    for (int k = 0; k < 4; ++k)
      asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                   : "=r"(pairs[4 * k]), "=r"(pairs[4 * k + 1]), "=r"(pairs[4 * k + 2]), "=r"(pairs[4 * k + 3])
                   : "r"(base + k * 2 * kCoreBytes)
                   : "memory");
  }
  // The pairs of the transposed tile: pairs[i / 2] = (T[col(i)][row(i)], T[col(i) + 1][row(i)]) for a
  // tile T stored as rows of kd elements (operand_offset(r, c, kd)), i.e. the fragment of Tᵀ: ldmatrix
  // .trans, four 8x8 blocks per instruction. Block (j, h) holds T's rows 8 j .. 8 j + 7 (Tᵀ's columns)
  // and columns 16 w + 8 h .. + 7 (Tᵀ's rows); in instruction k, lane l gives row l % 8 of block
  // (j, h) = (2 k + l / 16, (l / 8) % 2), and register m receives pairs[4 k + m].
  __device__ __forceinline__ void load_pairs_transposed(const void* tile, int kd, uint32_t (&pairs)[16]) const {
    const int m = lane / 8;
    const uint32_t base = static_cast<uint32_t>(__cvta_generic_to_shared(tile)) +
                          uint32_t(((m >> 1) * (kd / 8) + 2 * warp + (m & 1)) * kCoreBytes + (lane % 8) * 16);
#pragma unroll
    for (int k = 0; k < 4; ++k)
      asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                   : "=r"(pairs[4 * k]), "=r"(pairs[4 * k + 1]), "=r"(pairs[4 * k + 2]), "=r"(pairs[4 * k + 3])
                   : "r"(base + uint32_t(k * 2 * (kd / 8) * kCoreBytes))
                   : "memory");
  }
  // The same pairs from a tile T in the piece-major layout (piece_offset(r, c, rows)): block (j, h)'s row
  // l % 8 is T's row 8 j + l % 8 in piece 2 w + h, 16 contiguous bytes.
  __device__ __forceinline__ void load_pairs_transposed_pieces(const void* tile, int rows, uint32_t (&pairs)[16]) const {
    const int m = lane / 8;
    const uint32_t base = static_cast<uint32_t>(__cvta_generic_to_shared(tile)) +
                          uint32_t((2 * warp + (m & 1)) * rows * 16 + (8 * (m >> 1) + lane % 8) * 16);
#pragma unroll
    for (int k = 0; k < 4; ++k)
      asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                   : "=r"(pairs[4 * k]), "=r"(pairs[4 * k + 1]), "=r"(pairs[4 * k + 2]), "=r"(pairs[4 * k + 3])
                   : "r"(base + uint32_t(k * 16 * 16))
                   : "memory");
  }
  // (col(i), row(i) + row_shift) in an operand whose contraction is kd.
  __device__ __forceinline__ uint32_t transposed_offset(int i, int kd, int row_shift = 0) const {
    return uint32_t((row0 >> 3) * kCoreBytes + col0 * 16 + (row0 & 7) * 2) +
           uint32_t(((i >> 2) * (kd / 8) + ((i >> 1) & 1) + row_shift / 8) * kCoreBytes + (i & 1) * 16);
  }
};

}  // namespace di::kernels::wgmma
