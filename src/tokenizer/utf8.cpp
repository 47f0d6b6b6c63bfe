#include "tokenizer/utf8.h"

#include <cstring>

namespace di::tokenizer_detail {
namespace {

constexpr char kReplacement[] = "\xEF\xBF\xBD";  // U+FFFD

// The length of the run of ASCII bytes at p[0..n).
inline size_t ascii_run(const unsigned char* p, size_t n) {
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    uint64_t w;
    std::memcpy(&w, p + i, 8);
    if (w & 0x8080808080808080ull) break;
  }
  while (i < n && p[i] < 0x80) ++i;
  return i;
}

// Shared by both lossy converters; returns the bytes consumed.
size_t lossy(std::string& out, std::string_view bytes, bool hold_incomplete_tail) {
  const auto* p = reinterpret_cast<const unsigned char*>(bytes.data());
  const size_t n = bytes.size();
  size_t i = 0;
  size_t run = 0;  // start of the run of valid bytes not yet copied
  while (i < n) {
    i += ascii_run(p + i, n - i);
    if (i >= n) break;
    const Utf8Step s = utf8_step(p + i, n - i);
    if (s.kind == Utf8Step::kValid) {
      i += s.len;
      continue;
    }
    out.append(bytes.data() + run, i - run);
    if (s.kind == Utf8Step::kIncomplete && hold_incomplete_tail) return i;
    out.append(kReplacement, 3);
    i += s.len;
    run = i;
  }
  out.append(bytes.data() + run, n - run);
  return n;
}

}  // namespace

size_t utf8_first_invalid(std::string_view s) {
  const auto* p = reinterpret_cast<const unsigned char*>(s.data());
  const size_t n = s.size();
  size_t i = 0;
  while (i < n) {
    i += ascii_run(p + i, n - i);
    if (i >= n) break;
    const Utf8Step st = utf8_step(p + i, n - i);
    if (st.kind != Utf8Step::kValid) return i;
    i += st.len;
  }
  return std::string_view::npos;
}

void append_utf8_lossy(std::string& out, std::string_view bytes) { lossy(out, bytes, false); }

size_t append_utf8_lossy_prefix(std::string& out, std::string_view bytes) { return lossy(out, bytes, true); }

}  // namespace di::tokenizer_detail
