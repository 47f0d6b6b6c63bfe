// Tests of the bfloat16 helpers (core/bf16.h): round-to-nearest-even at exact ties, NaN and
// infinities, overflow, denormals, idempotence, an independent rounding oracle on random floats, and
// an exhaustive bf16 -> f32 -> bf16 round trip over all 65536 bit patterns.
#include "core/bf16.h"

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <string>

#include "support/seed.h"

namespace di {
namespace {

float from_bits(uint32_t u) { return std::bit_cast<float>(u); }
uint32_t bits_of(float x) { return std::bit_cast<uint32_t>(x); }

using di::testing::fresh_seed;
using di::testing::seed_trace;

bool is_bf16_nan(uint16_t b) { return (b & 0x7f80u) == 0x7f80u && (b & 0x007fu) != 0; }
bool is_bf16_quiet_nan(uint16_t b) { return is_bf16_nan(b) && (b & 0x0040u) != 0; }

// Independent oracle: the bf16 nearest to x (ties to the even bit pattern), worked out in double from
// the two bf16 neighbours of x. Past the largest finite bf16 the upper neighbour is 2^128, the value
// the next bit pattern would have with an unbounded exponent, so that overflow follows IEEE
// round-to-nearest (|x| >= max + half an ulp goes to infinity). Finite, non-NaN x only.
uint16_t nearest_bf16(float x) {
  const uint32_t u = bits_of(x);
  const uint16_t lo = uint16_t(u >> 16);  // truncation toward zero
  const uint16_t hi = uint16_t(lo + 1);   // next bf16 away from zero
  const double vlo = std::fabs(double(bf16_to_f32(lo)));
  const double vhi = (hi & 0x7fffu) == 0x7f80u ? std::ldexp(1.0, 128) : std::fabs(double(bf16_to_f32(hi)));
  const double ax = std::fabs(double(x));
  if (ax - vlo < vhi - ax) return lo;
  if (ax - vlo > vhi - ax) return hi;
  return (lo & 1u) ? hi : lo;
}

TEST(Bf16, ExactTiesRoundToEven) {
  // Upper half even (0x3f80): a tie stays; odd (0x3f81): a tie goes up to the even 0x3f82.
  EXPECT_EQ(f32_to_bf16(from_bits(0x3f808000u)), 0x3f80u);
  EXPECT_EQ(f32_to_bf16(from_bits(0x3f818000u)), 0x3f82u);
  // Negative values round the magnitude the same way.
  EXPECT_EQ(f32_to_bf16(from_bits(0xbf808000u)), 0xbf80u);
  EXPECT_EQ(f32_to_bf16(from_bits(0xbf818000u)), 0xbf82u);
  // A tie whose round-up carries into the exponent: 0x3fff (odd, largest mantissa) goes to 0x4000.
  EXPECT_EQ(f32_to_bf16(from_bits(0x3fff8000u)), 0x4000u);
  // One bit either side of a tie is not a tie.
  EXPECT_EQ(f32_to_bf16(from_bits(0x3f808001u)), 0x3f81u);
  EXPECT_EQ(f32_to_bf16(from_bits(0x3f807fffu)), 0x3f80u);
  EXPECT_EQ(f32_to_bf16(from_bits(0x3f818001u)), 0x3f82u);
  EXPECT_EQ(f32_to_bf16(from_bits(0x3f817fffu)), 0x3f81u);
  // Ties over many exponents and mantissas, both parities and signs.
  for (uint32_t upper = 0x0080u; upper < 0x7f7fu; upper += 37) {
    for (uint32_t sign : {0u, 0x8000u}) {
      const uint32_t hi = upper | sign;
      const uint16_t want = (hi & 1u) ? uint16_t(hi + 1) : uint16_t(hi);
      ASSERT_EQ(f32_to_bf16(from_bits((hi << 16) | 0x8000u)), want) << fmt::format("upper 0x{:04x}", hi);
    }
  }
  // Value-level: 1 + 2^-8 lies halfway between 1 and 1 + 2^-7 and goes to 1 (even).
  EXPECT_EQ(round_bf16(1.0f + 0x1p-8f), 1.0f);
  EXPECT_EQ(round_bf16(1.0f + 3 * 0x1p-8f), 1.0f + 2 * 0x1p-7f);
}

TEST(Bf16, NanStaysQuietNan) {
  const uint32_t nans[] = {
      0x7fc00000u,  // the default quiet NaN
      0xffc00000u,  // negative quiet NaN
      0x7f800001u,  // signalling NaN with only the lowest payload bit: truncation would give Inf
      0xff800001u,  // the same, negative
      0x7f80ffffu,  // payload only in the low half
      0x7fbfffffu,  // signalling, full payload
      0x7fffffffu,  // quiet, full payload: a plain round-up would carry into the sign (0x8000, -0)
      0xffffffffu,
  };
  for (uint32_t u : nans) {
    SCOPED_TRACE(fmt::format("input 0x{:08x}", u));
    ASSERT_TRUE(std::isnan(from_bits(u)));
    const uint16_t b = f32_to_bf16(from_bits(u));
    EXPECT_TRUE(is_bf16_quiet_nan(b)) << fmt::format("0x{:04x}", b);
    EXPECT_EQ(b >> 15, u >> 31) << "sign of the NaN";
    EXPECT_TRUE(std::isnan(round_bf16(from_bits(u))));
  }
  EXPECT_TRUE(std::isnan(round_bf16(std::numeric_limits<float>::quiet_NaN())));
  EXPECT_TRUE(std::isnan(round_bf16(std::numeric_limits<float>::signaling_NaN())));
}

TEST(Bf16, Infinities) {
  const float inf = std::numeric_limits<float>::infinity();
  EXPECT_EQ(f32_to_bf16(inf), 0x7f80u);
  EXPECT_EQ(f32_to_bf16(-inf), 0xff80u);
  EXPECT_EQ(bf16_to_f32(0x7f80u), inf);
  EXPECT_EQ(bf16_to_f32(0xff80u), -inf);
  EXPECT_EQ(round_bf16(inf), inf);
  EXPECT_EQ(round_bf16(-inf), -inf);
}

TEST(Bf16, OverflowToInfinity) {
  const float inf = std::numeric_limits<float>::infinity();
  const float max_bf16 = bf16_to_f32(0x7f7fu);  // (2 - 2^-7) * 2^127
  EXPECT_EQ(max_bf16, 0x1.fep127f);
  EXPECT_EQ(round_bf16(max_bf16), max_bf16);
  // Below the halfway point to 2^128 stays at max; the halfway point (a tie with the odd 0x7f7f)
  // and everything above it, up to FLT_MAX, goes to infinity.
  EXPECT_EQ(f32_to_bf16(from_bits(0x7f7f7fffu)), 0x7f7fu);
  EXPECT_EQ(f32_to_bf16(from_bits(0x7f7f8000u)), 0x7f80u);
  EXPECT_EQ(f32_to_bf16(from_bits(0x7f7f8001u)), 0x7f80u);
  EXPECT_EQ(round_bf16(std::numeric_limits<float>::max()), inf);
  EXPECT_EQ(round_bf16(-std::numeric_limits<float>::max()), -inf);
  EXPECT_EQ(f32_to_bf16(from_bits(0xff7f7fffu)), 0xff7fu);
  EXPECT_EQ(f32_to_bf16(from_bits(0xff7f8000u)), 0xff80u);
}

TEST(Bf16, Denormals) {
  // bf16 denormals are float32 denormals with a zero low half: exact both ways.
  EXPECT_EQ(bf16_to_f32(0x0001u), 0x1p-133f);
  EXPECT_EQ(f32_to_bf16(0x1p-133f), 0x0001u);
  EXPECT_EQ(f32_to_bf16(-0x1p-133f), 0x8001u);
  EXPECT_EQ(bf16_to_f32(0x007fu), 127 * 0x1p-133f);
  EXPECT_EQ(f32_to_bf16(bf16_to_f32(0x007fu)), 0x007fu);
  // Rounding among denormals: ties to even, otherwise nearest; the largest denormal rounds up into
  // the smallest normal.
  EXPECT_EQ(f32_to_bf16(from_bits(0x00008000u)), 0x0000u);
  EXPECT_EQ(f32_to_bf16(from_bits(0x00018000u)), 0x0002u);
  EXPECT_EQ(f32_to_bf16(from_bits(0x00008001u)), 0x0001u);
  EXPECT_EQ(f32_to_bf16(from_bits(0x00000001u)), 0x0000u);  // the smallest float denormal
  EXPECT_EQ(f32_to_bf16(from_bits(0x80000001u)), 0x8000u);  // keeps its sign as -0
  EXPECT_EQ(f32_to_bf16(from_bits(0x007fffffu)), 0x0080u);  // the largest float denormal
  // Signed zeros.
  EXPECT_EQ(f32_to_bf16(0.0f), 0x0000u);
  EXPECT_EQ(f32_to_bf16(-0.0f), 0x8000u);
  EXPECT_TRUE(std::signbit(round_bf16(-0.0f)));
}

TEST(Bf16, RoundingMatchesIndependentOracle) {
  const uint32_t seed = fresh_seed();
  SCOPED_TRACE(seed_trace(seed));
  std::mt19937 rng(seed);
  int checked = 0;
  for (int i = 0; i < 1'000'000; ++i) {
    uint32_t u = rng();
    if (i % 4 == 0) u = (u & 0xffff0000u) | 0x8000u;  // many exact ties
    const float x = from_bits(u);
    if (!std::isfinite(x)) continue;
    ++checked;
    const uint16_t got = f32_to_bf16(x), want = nearest_bf16(x);
    ASSERT_EQ(got, want) << fmt::format("input 0x{:08x} ({:g}): got 0x{:04x}, want 0x{:04x}", u, x, got, want);
  }
  EXPECT_GT(checked, 900'000);
}

TEST(Bf16, RoundIsIdempotent) {
  const uint32_t seed = fresh_seed();
  SCOPED_TRACE(seed_trace(seed));
  std::mt19937 rng(seed);
  for (int i = 0; i < 1'000'000; ++i) {
    const float x = from_bits(rng());
    const float once = round_bf16(x), twice = round_bf16(once);
    if (std::isnan(x)) {
      ASSERT_TRUE(std::isnan(once) && std::isnan(twice));
      continue;
    }
    ASSERT_EQ(bits_of(twice), bits_of(once)) << fmt::format("input 0x{:08x}", bits_of(x));
    ASSERT_EQ(bits_of(once) & 0xffffu, 0u);  // a bf16 value: the low half is zero
  }
}

TEST(Bf16, ExhaustiveRoundTripIsIdentity) {
  int nans = 0;
  for (uint32_t b = 0; b < 65536; ++b) {
    const uint16_t bits = uint16_t(b);
    const float f = bf16_to_f32(bits);
    ASSERT_EQ(bits_of(f), b << 16);  // bf16 is the top half of a float32
    const uint16_t back = f32_to_bf16(f);
    if (is_bf16_nan(bits)) {
      ++nans;
      ASSERT_TRUE(std::isnan(f)) << fmt::format("0x{:04x}", b);
      ASSERT_TRUE(is_bf16_quiet_nan(back)) << fmt::format("0x{:04x} -> 0x{:04x}", b, back);
      ASSERT_EQ(back >> 15, b >> 15) << "sign of the NaN";
      continue;
    }
    ASSERT_EQ(back, bits) << fmt::format("0x{:04x} -> {:g} -> 0x{:04x}", b, f, back);
    ASSERT_EQ(bits_of(round_bf16(f)), bits_of(f));
  }
  EXPECT_EQ(nans, 2 * 127);  // two signs, mantissas 1..127
}

}  // namespace
}  // namespace di
