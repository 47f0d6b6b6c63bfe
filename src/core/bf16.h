#pragma once
// bfloat16 helpers. bf16 is the top half of an IEEE float32; rounding is round-to-nearest-even,
// the same as PyTorch and the CUDA __float2bfloat16_rn intrinsic. NaN stays NaN.
#include <bit>
#include <cstdint>

namespace di {

inline float bf16_to_f32(uint16_t bits) { return std::bit_cast<float>(uint32_t(bits) << 16); }

inline uint16_t f32_to_bf16(float x) {
  uint32_t u = std::bit_cast<uint32_t>(x);
  if ((u & 0x7f800000u) == 0x7f800000u && (u & 0x007fffffu) != 0) return uint16_t((u >> 16) | 0x40);
  u += 0x7fffu + ((u >> 16) & 1u);
  return uint16_t(u >> 16);
}

// The float32 value nearest to x that a bf16 can hold.
inline float round_bf16(float x) { return bf16_to_f32(f32_to_bf16(x)); }

}  // namespace di
