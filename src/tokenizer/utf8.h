#pragma once
// UTF-8 helpers of the tokenizer: strict validation (input text), and lossy conversion that replaces
// each maximal invalid subpart with one U+FFFD, as Rust's String::from_utf8_lossy does (Unicode's
// "substitution of maximal subparts"; Python's bytes.decode('utf-8', 'replace') does the same).
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace di::tokenizer_detail {

// What starts at the front of a byte buffer.
struct Utf8Step {
  enum Kind : uint8_t {
    kValid,       // a well-formed sequence of `len` bytes encoding `cp`
    kInvalid,     // `len` bytes (>= 1) form a maximal subpart that cannot be completed
    kIncomplete,  // all `len` bytes (the rest of the buffer) are a proper prefix of a sequence
  };
  Kind kind;
  uint32_t len;
  char32_t cp;
};

// Decodes the sequence at p[0..n), n >= 1, following Unicode's table of well-formed byte sequences
// (no overlongs, no surrogates, nothing above U+10FFFF).
inline Utf8Step utf8_step(const unsigned char* p, size_t n) {
  const unsigned char b0 = p[0];
  if (b0 < 0x80) return {Utf8Step::kValid, 1, b0};
  uint32_t need;           // total length
  unsigned char lo, hi;    // range of the second byte
  char32_t cp;
  if (b0 >= 0xC2 && b0 <= 0xDF) {
    need = 2, lo = 0x80, hi = 0xBF, cp = b0 & 0x1F;
  } else if (b0 >= 0xE0 && b0 <= 0xEF) {
    need = 3, cp = b0 & 0x0F;
    lo = b0 == 0xE0 ? 0xA0 : 0x80;
    hi = b0 == 0xED ? 0x9F : 0xBF;
  } else if (b0 >= 0xF0 && b0 <= 0xF4) {
    need = 4, cp = b0 & 0x07;
    lo = b0 == 0xF0 ? 0x90 : 0x80;
    hi = b0 == 0xF4 ? 0x8F : 0xBF;
  } else {
    return {Utf8Step::kInvalid, 1, 0};  // a continuation byte or C0, C1, F5..FF
  }
  for (uint32_t k = 1; k < need; ++k) {
    if (k >= n) return {Utf8Step::kIncomplete, uint32_t(n), 0};
    const unsigned char b = p[k];
    if (b < (k == 1 ? lo : 0x80) || b > (k == 1 ? hi : 0xBF)) return {Utf8Step::kInvalid, k, 0};
    cp = (cp << 6) | (b & 0x3F);
  }
  return {Utf8Step::kValid, need, cp};
}

// The byte offset of the first ill-formed or truncated sequence, or npos when `s` is valid UTF-8.
size_t utf8_first_invalid(std::string_view s);

// Appends `bytes` with every maximal invalid subpart (a truncated sequence at the end included)
// replaced by U+FFFD.
void append_utf8_lossy(std::string& out, std::string_view bytes);

// Like append_utf8_lossy, but stops before a truncated sequence at the very end (one that more bytes
// could still complete) and returns the number of bytes consumed; the rest is that prefix.
size_t append_utf8_lossy_prefix(std::string& out, std::string_view bytes);

// Appends the UTF-8 encoding of a scalar value.
inline void append_utf8(std::string& out, char32_t cp) {
  if (cp < 0x80) {
    out += char(cp);
  } else if (cp < 0x800) {
    out += char(0xC0 | (cp >> 6));
    out += char(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    out += char(0xE0 | (cp >> 12));
    out += char(0x80 | ((cp >> 6) & 0x3F));
    out += char(0x80 | (cp & 0x3F));
  } else {
    out += char(0xF0 | (cp >> 18));
    out += char(0x80 | ((cp >> 12) & 0x3F));
    out += char(0x80 | ((cp >> 6) & 0x3F));
    out += char(0x80 | (cp & 0x3F));
  }
}

}  // namespace di::tokenizer_detail
