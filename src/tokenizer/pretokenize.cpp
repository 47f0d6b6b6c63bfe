#include "tokenizer/pretokenize.h"

#include <utf8proc.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "core/error.h"
#include "tokenizer/unicode_compat.h"
#include "tokenizer/utf8.h"

namespace di::tokenizer_detail {
namespace {

template <size_t N>
bool in_ranges(const CodeRange (&table)[N], uint32_t cp) {
  for (const CodeRange& r : table) {
    if (cp < r.first) return false;  // sorted
    if (cp <= r.last) return true;
  }
  return false;
}

// The canonical combining class as tokenizers' NFC sees it (Unicode 9.0): marks added later are
// starters to it.
int hf_combining_class(utf8proc_int32_t cp) {
  const int ccc = utf8proc_get_property(cp)->combining_class;
  return ccc != 0 && in_ranges(kMarksUnknownToHfNfc, uint32_t(cp)) ? 0 : ccc;
}

bool is_composite_unknown_to_hf(utf8proc_int32_t cp) {
  for (const auto& c : kCompositesUnknownToHfNfc)
    if (uint32_t(cp) == c[0]) return true;
  return false;
}

bool is_second_of_composite_unknown_to_hf(utf8proc_int32_t cp) {
  for (const auto& c : kCompositesUnknownToHfNfc)
    if (uint32_t(cp) == c[2]) return true;
  return false;
}

// One bit per code point: set when NFC might change the text around it, i.e. the code point has a
// non-zero combining class, is changed by NFC on its own (NFC_Quick_Check=No), or can be the second
// part of a canonical composition (NFC_Quick_Check=Maybe). The last set is over-approximated with
// every non-initial code point of every full canonical decomposition, and the Hangul vowel and
// trailing jamo; a false "unsafe" only costs a call to utf8proc.
class NfcUnsafe {
 public:
  NfcUnsafe() : bits_(0x110000 / 64, 0) {
    utf8proc_int32_t buf[32];
    for (utf8proc_int32_t cp = 0x80; cp < 0x110000; ++cp) {
      if (cp >= 0xD800 && cp <= 0xDFFF) continue;
      const utf8proc_property_t* p = utf8proc_get_property(cp);
      if (p->combining_class != 0) set(cp);
      const bool hangul_syllable = cp >= 0xAC00 && cp <= 0xD7A3;
      if (!hangul_syllable && (p->decomp_seqindex == UINT16_MAX || p->decomp_type != 0)) continue;
      int last_boundclass = 0;
      const utf8proc_ssize_t n = utf8proc_decompose_char(cp, buf, 32, UTF8PROC_DECOMPOSE, &last_boundclass);
      if (n <= 0 || n > 32) {
        set(cp);
        continue;
      }
      for (utf8proc_ssize_t k = 1; k < n; ++k) set(buf[k]);
      if (n == 1 && buf[0] != cp) set(cp);  // a singleton decomposition
      // Composite characters that NFC does not recompose (composition exclusions) change under NFC.
      if (!hangul_syllable && n >= 2 && !recomposes_to_itself(cp)) set(cp);
    }
    for (utf8proc_int32_t cp = 0x1161; cp <= 0x1175; ++cp) set(cp);
    for (utf8proc_int32_t cp = 0x11A8; cp <= 0x11C2; ++cp) set(cp);
  }
  bool operator()(char32_t cp) const { return (bits_[cp >> 6] >> (cp & 63)) & 1; }

 private:
  void set(utf8proc_int32_t cp) { bits_[size_t(cp) >> 6] |= uint64_t(1) << (cp & 63); }
  static bool recomposes_to_itself(utf8proc_int32_t cp) {
    std::string s;
    append_utf8(s, char32_t(cp));
    utf8proc_uint8_t* out = nullptr;
    const utf8proc_ssize_t n = utf8proc_map(reinterpret_cast<const utf8proc_uint8_t*>(s.data()), utf8proc_ssize_t(s.size()),
                                            &out, utf8proc_option_t(UTF8PROC_STABLE | UTF8PROC_COMPOSE));
    const bool same = n >= 0 && std::string_view(reinterpret_cast<char*>(out), size_t(n)) == s;
    std::free(out);
    return same;
  }
  std::vector<uint64_t> bits_;
};

const NfcUnsafe& nfc_unsafe() {
  static const NfcUnsafe table;
  return table;
}

// NFC of a stretch of valid UTF-8, appended to out, as tokenizers computes it.
//
// utf8proc_map(STABLE | COMPOSE) would be the plain NFC, but its canonical reordering is a gnome
// sort, quadratic in the length of a run of combining marks (megabytes of "Zalgo" text would take
// hours). So each code point is decomposed on its own, each run of non-starters is put in canonical
// order by a stable sort, and utf8proc composes (linear).
//
// tokenizers' normaliser has Unicode 9.0 data (unicode_compat.h), and this follows it:
//  - a mark that Unicode 9.0 did not know is a starter (class 0): it is not reordered, and it
//    blocks composition across it, like any starter that composes with nothing;
//  - a canonical composite that Unicode 9.0 did not know is neither decomposed nor composed.
// Composition runs separately on the stretches between such starters (and before the second
// character of such a composite), where utf8proc would otherwise see a non-starter.
void append_nfc(std::string& out, std::string_view s) {
  thread_local std::vector<utf8proc_int32_t> cps;
  thread_local std::vector<int> classes;
  cps.clear();
  const auto* p = reinterpret_cast<const unsigned char*>(s.data());
  utf8proc_int32_t buf[32];
  for (size_t i = 0; i < s.size();) {
    const Utf8Step st = utf8_step(p + i, s.size() - i);
    i += st.len;
    const auto cp = utf8proc_int32_t(st.cp);
    if (is_composite_unknown_to_hf(cp)) {
      cps.push_back(cp);
      continue;
    }
    int last_boundclass = 0;
    const utf8proc_ssize_t n = utf8proc_decompose_char(cp, buf, 32, UTF8PROC_DECOMPOSE, &last_boundclass);
    if (n < 0 || n > 32) fail("tokenizer: NFC normalisation (utf8proc) failed on U+{:04X}", uint32_t(st.cp));
    cps.insert(cps.end(), buf, buf + n);
  }
  classes.resize(cps.size());
  for (size_t i = 0; i < cps.size(); ++i) classes[i] = hf_combining_class(cps[i]);
  for (size_t i = 0; i < cps.size();) {
    if (classes[i] == 0) {
      ++i;
      continue;
    }
    size_t j = i + 1;
    while (j < cps.size() && classes[j] != 0) ++j;
    if (j - i > 1) {
      // Sort (class, code point) pairs of the run by class, stably.
      thread_local std::vector<std::pair<int, utf8proc_int32_t>> run;
      run.clear();
      for (size_t k = i; k < j; ++k) run.emplace_back(classes[k], cps[k]);
      std::stable_sort(run.begin(), run.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
      for (size_t k = i; k < j; ++k) cps[k] = run[k - i].second;
    }
    i = j;
  }
  size_t start = 0;
  auto compose = [&](size_t end) {
    if (end == start) return;
    const utf8proc_ssize_t n = utf8proc_normalize_utf32(cps.data() + start, utf8proc_ssize_t(end - start),
                                                        utf8proc_option_t(UTF8PROC_STABLE | UTF8PROC_COMPOSE));
    if (n < 0) fail("tokenizer: NFC normalisation (utf8proc) failed: {}", utf8proc_errmsg(n));
    for (utf8proc_ssize_t k = 0; k < n; ++k) append_utf8(out, char32_t(cps[start + size_t(k)]));
    start = end;
  };
  for (size_t i = 0; i < cps.size(); ++i) {
    const bool legacy_starter = classes[i] == 0 && utf8proc_get_property(cps[i])->combining_class != 0;
    if (legacy_starter || is_second_of_composite_unknown_to_hf(cps[i])) compose(i);
  }
  compose(cps.size());
}

}  // namespace

std::string_view nfc(std::string_view s, std::string& buf) {
  const NfcUnsafe& unsafe = nfc_unsafe();
  const auto* p = reinterpret_cast<const unsigned char*>(s.data());
  const size_t n = s.size();
  size_t copied = 0;  // s[0, copied) is already in buf
  bool changed = false;
  size_t i = 0;
  while (i < n) {
    if (p[i] < 0x80) {
      ++i;
      continue;
    }
    const Utf8Step st = utf8_step(p + i, n - i);
    if (!unsafe(st.cp)) {
      i += st.len;
      continue;
    }
    // The stretch to normalise starts at the previous code point (a boundary: it is safe, or the
    // start) and runs to the next safe code point.
    size_t start = i;
    if (start > copied) {
      --start;
      while (start > copied && (p[start] & 0xC0) == 0x80) --start;
    }
    size_t end = i + st.len;
    while (end < n && p[end] >= 0x80) {
      const Utf8Step e = utf8_step(p + end, n - end);
      if (!unsafe(e.cp)) break;
      end += e.len;
    }
    if (!changed) buf.clear();
    changed = true;
    buf.append(s.data() + copied, start - copied);
    append_nfc(buf, s.substr(start, end - start));
    copied = i = end;
  }
  if (!changed) return s;
  buf.append(s.data() + copied, n - copied);
  return buf;
}

namespace {

// Oniguruma's \s: the White_Space property. (PCRE2's \s also matches U+180E.)
constexpr char kWhiteSpace[] =
    "\\x{9}-\\x{D}\\x{20}\\x{85}\\x{A0}\\x{1680}\\x{2000}-\\x{200A}\\x{2028}\\x{2029}\\x{202F}\\x{205F}\\x{3000}";

template <size_t N>
std::string class_items(const char* property, const CodeRange (&extra)[N]) {
  std::string s = fmt::format("\\p{{{}}}", property);
  for (const CodeRange& r : extra) s += fmt::format("\\x{{{:X}}}-\\x{{{:X}}}", r.first, r.last);
  return s;
}

}  // namespace

std::string oniguruma_compatible(const std::string& pattern) {
  const std::string letters = class_items("L", kOnigExtraLetters);
  const std::string numbers = class_items("N", kOnigExtraNumbers);
  const std::string marks = class_items("M", kOnigExtraMarks);
  std::string out;
  bool in_class = false;
  for (size_t i = 0; i < pattern.size(); ++i) {
    const char c = pattern[i];
    if (c == '[' && !in_class) {
      in_class = true;
      out += c;
      if (i + 1 < pattern.size() && pattern[i + 1] == '^') out += pattern[++i];
      if (i + 1 < pattern.size() && pattern[i + 1] == ']') out += pattern[++i];  // a literal ']'
      continue;
    }
    if (c == '[' && in_class && i + 1 < pattern.size() && pattern[i + 1] == ':') {  // [:alpha:]
      const size_t end = pattern.find(":]", i + 2);
      if (end != std::string::npos) {
        out.append(pattern, i, end + 2 - i);
        i = end + 1;
        continue;
      }
    }
    if (c == ']' && in_class) {
      in_class = false;
      out += c;
      continue;
    }
    if (c != '\\' || i + 1 >= pattern.size()) {
      out += c;
      continue;
    }
    const char e = pattern[i + 1];
    const std::string_view rest = std::string_view(pattern).substr(i);
    const std::string* items = rest.starts_with("\\p{L}") ? &letters
                               : rest.starts_with("\\p{N}") ? &numbers
                               : rest.starts_with("\\p{M}") ? &marks
                                                             : nullptr;
    if (items) {
      out += in_class ? *items : "[" + *items + "]";
      i += 4;
    } else if (e == 's') {
      out += in_class ? std::string(kWhiteSpace) : "[" + std::string(kWhiteSpace) + "]";
      i += 1;
    } else if (e == 'S' && !in_class) {
      out += "[^" + std::string(kWhiteSpace) + "]";
      i += 1;
    } else {
      out += c;  // any other escape stays as it is
      out += e;
      i += 1;
    }
  }
  return out;
}

namespace {

// One bit per code point: those on which PCRE2's \p{L}, \p{N}, \p{M}, \s differ from Oniguruma's.
class OnigurumaDifferences {
 public:
  OnigurumaDifferences() : bits_(0x110000 / 64, 0) {
    add(kOnigExtraLetters);
    add(kOnigExtraNumbers);
    add(kOnigExtraMarks);
    bits_[0x180E >> 6] |= uint64_t(1) << (0x180E & 63);  // in PCRE2's \s only
  }
  bool operator()(char32_t cp) const { return (bits_[cp >> 6] >> (cp & 63)) & 1; }

 private:
  template <size_t N>
  void add(const CodeRange (&table)[N]) {
    for (const CodeRange& r : table)
      for (uint32_t cp = r.first; cp <= r.last; ++cp) bits_[cp >> 6] |= uint64_t(1) << (cp & 63);
  }
  std::vector<uint64_t> bits_;
};

}  // namespace

bool needs_oniguruma_classes(std::string_view s) {
  static const OnigurumaDifferences differs;
  const auto* p = reinterpret_cast<const unsigned char*>(s.data());
  const size_t n = s.size();
  size_t i = 0;
  while (i < n) {
    if (p[i] < 0x80) {  // ASCII, eight bytes at a time where possible
      uint64_t w;
      if (i + 8 <= n && (std::memcpy(&w, p + i, 8), (w & 0x8080808080808080ull) == 0)) {
        i += 8;
        continue;
      }
      ++i;
      continue;
    }
    const Utf8Step st = utf8_step(p + i, n - i);
    if (differs(st.cp)) return true;
    i += st.len;
  }
  return false;
}

pcre2_code* SplitRegex::compile(const std::string& pattern, const std::string& original, const std::string& where) {
  int err = 0;
  PCRE2_SIZE err_offset = 0;
  pcre2_code* code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(), PCRE2_UTF | PCRE2_UCP,
                                   &err, &err_offset, nullptr);
  if (!code) {
    PCRE2_UCHAR msg[256];
    pcre2_get_error_message(err, msg, sizeof msg);
    fail("{}: PCRE2 cannot compile the regex {}: {} (at offset {} of its PCRE2 form {})", where, original,
         reinterpret_cast<const char*>(msg), err_offset, pattern);
  }
  return code;
}

SplitRegex::SplitRegex(const std::string& pattern, const std::string& where) {
  plain_ = compile(pattern, pattern, where);
  const std::string patched = oniguruma_compatible(pattern);
  if (patched != pattern) {
    try {
      compat_ = compile(patched, pattern, where);
    } catch (...) {
      pcre2_code_free(plain_);
      throw;
    }
  }
  jit_ = pcre2_jit_compile(plain_, PCRE2_JIT_COMPLETE) == 0 && (!compat_ || pcre2_jit_compile(compat_, PCRE2_JIT_COMPLETE) == 0);
}

SplitRegex::SplitRegex(SplitRegex&& o) noexcept : plain_(o.plain_), compat_(o.compat_), jit_(o.jit_) {
  o.plain_ = o.compat_ = nullptr;
}

SplitRegex& SplitRegex::operator=(SplitRegex&& o) noexcept {
  if (this != &o) {
    pcre2_code_free(plain_);
    pcre2_code_free(compat_);
    plain_ = o.plain_;
    compat_ = o.compat_;
    jit_ = o.jit_;
    o.plain_ = o.compat_ = nullptr;
  }
  return *this;
}

SplitRegex::~SplitRegex() {
  pcre2_code_free(plain_);
  pcre2_code_free(compat_);
}

SplitRegex::Matcher::Matcher(const SplitRegex& re) : re_(re) {
  md_ = pcre2_match_data_create_from_pattern(re.compat_ ? re.compat_ : re.plain_, nullptr);
  mctx_ = pcre2_match_context_create(nullptr);
  if (!md_ || !mctx_) fail("tokenizer: out of memory for PCRE2 match data");
  // Long inputs (megabytes of one character class) must not hit PCRE2's default limits.
  pcre2_set_match_limit(mctx_, UINT32_MAX);
  pcre2_set_depth_limit(mctx_, UINT32_MAX);
  pcre2_set_heap_limit(mctx_, UINT32_MAX);
}

SplitRegex::Matcher::~Matcher() {
  pcre2_match_data_free(md_);
  pcre2_match_context_free(mctx_);
  pcre2_jit_stack_free(jit_stack_);
}

bool SplitRegex::Matcher::next_match(const pcre2_code* code, std::string_view s, size_t from, size_t& start,
                                     size_t& end) {
  const auto* subject = reinterpret_cast<PCRE2_SPTR>(s.data());
  for (;;) {
    const int rc = re_.jit_ ? pcre2_jit_match(code, subject, s.size(), from, 0, md_, mctx_)
                            : pcre2_match(code, subject, s.size(), from, PCRE2_NO_UTF_CHECK, md_, mctx_);
    if (rc == PCRE2_ERROR_NOMATCH) return false;
    if (rc == PCRE2_ERROR_JIT_STACKLIMIT && !jit_stack_) {
      // The default 32 KiB JIT stack is too small for this input: retry with one that can grow.
      jit_stack_ = pcre2_jit_stack_create(64 * 1024, 512 * 1024 * 1024, nullptr);
      if (!jit_stack_) fail("tokenizer: out of memory for a PCRE2 JIT stack");
      pcre2_jit_stack_assign(mctx_, nullptr, jit_stack_);
      continue;
    }
    if (rc < 0) {
      PCRE2_UCHAR msg[256];
      pcre2_get_error_message(rc, msg, sizeof msg);
      fail("tokenizer: the pre-tokenizer regex failed at byte offset {} of a {}-byte piece: {}", from, s.size(),
           reinterpret_cast<const char*>(msg));
    }
    const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(md_);
    start = ov[0];
    end = ov[1];
    return true;
  }
}

}  // namespace di::tokenizer_detail
