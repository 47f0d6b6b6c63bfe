#pragma once
// The text stages before BPE: NFC normalisation (utf8proc) and the pre-tokenizer's regex split
// (PCRE2, JIT, UTF + UCP mode).
#include <cstddef>
#include <memory>
#include <string>
#include <string_view>

// PCRE2_CODE_UNIT_WIDTH comes from the build (8).
#include <pcre2.h>

namespace di::tokenizer_detail {

// NFC of valid UTF-8. Only the stretches around code points that NFC could change are handed to
// utf8proc: a code point with canonical combining class 0 that NFC leaves alone and that never
// combines with a preceding character is a normalisation boundary (Unicode's NFC_Quick_Check=Yes
// and ccc=0), so text between two such points normalises independently. Returns `in` itself when
// nothing needed normalising, else a view of buf.
std::string_view nfc(std::string_view in, std::string& buf);

// The regex in PCRE2 form with Oniguruma's character classes, which tokenizers uses: \p{L}, \p{N}
// and \p{M} get the code points that Unicode 15.0-16.0 added to them (PCRE2 10.42 knows Unicode
// 14.0; unicode_compat.h), and \s (\S outside a class) is spelled out as the White_Space property.
// Other property escapes are left as they are.
std::string oniguruma_compatible(const std::string& pattern);

// The Split pre-tokenizer with behaviour Isolated: every match, and every stretch between matches,
// becomes a piece. It holds the pattern twice: as PCRE2 reads it, and oniguruma_compatible(); the
// two differ only on the code points that oniguruma_compatible() adds to or takes from a class,
// and the second is about twice as slow, so it runs only on text that holds such a code point.
class SplitRegex {
 public:
  // Throws di::Error naming `where` (file and field) when PCRE2 rejects the pattern.
  SplitRegex(const std::string& pattern, const std::string& where);
  SplitRegex(SplitRegex&&) noexcept;
  SplitRegex& operator=(SplitRegex&&) noexcept;
  ~SplitRegex();

  // Per-call state (match data, JIT stack): one per thread at a time.
  class Matcher {
   public:
    explicit Matcher(const SplitRegex& re);
    ~Matcher();
    Matcher(const Matcher&) = delete;
    Matcher& operator=(const Matcher&) = delete;

    // Calls on_piece(std::string_view piece, bool is_match) for each piece of s (valid UTF-8), in
    // order; the pieces concatenate to s. is_match is false for a gap between matches.
    template <typename F>
    void split(std::string_view s, F&& on_piece);

   private:
    // The next match at or after `from`: true and [start, end), or false when there is none.
    bool next_match(const pcre2_code* code, std::string_view s, size_t from, size_t& start, size_t& end);
    const SplitRegex& re_;
    pcre2_match_data* md_ = nullptr;
    pcre2_match_context* mctx_ = nullptr;
    pcre2_jit_stack* jit_stack_ = nullptr;
  };

 private:
  static pcre2_code* compile(const std::string& pattern, const std::string& original, const std::string& where);
  pcre2_code* plain_ = nullptr;   // the pattern as PCRE2 reads it
  pcre2_code* compat_ = nullptr;  // oniguruma_compatible(pattern); null when the same
  bool jit_ = false;
};

// Whether s holds a code point on which PCRE2's and Oniguruma's classes differ (see
// oniguruma_compatible()).
bool needs_oniguruma_classes(std::string_view s);

template <typename F>
void SplitRegex::Matcher::split(std::string_view s, F&& on_piece) {
  const pcre2_code* code = re_.compat_ && needs_oniguruma_classes(s) ? re_.compat_ : re_.plain_;
  size_t pos = 0;      // end of the last piece
  size_t search = 0;   // where the next search starts
  while (search < s.size()) {
    size_t start, end;
    if (!next_match(code, s, search, start, end)) break;
    if (end == start) {  // an empty match: no piece; look again one character further on
      search = start + 1;
      while (search < s.size() && (uint8_t(s[search]) & 0xC0) == 0x80) ++search;
      continue;
    }
    if (start > pos) on_piece(s.substr(pos, start - pos), false);  // the gap before the match
    on_piece(s.substr(start, end - start), true);
    pos = search = end;
  }
  if (pos < s.size()) on_piece(s.substr(pos), false);
}

}  // namespace di::tokenizer_detail
