// Encoding and decoding (loading is in tokenizer_load.cpp).
//
// encode() follows Hugging Face tokenizers (checked token for token by tests/tokenizer/hf_equality.py):
//  1. The text is validated as UTF-8.
//  2. Added tokens are split out first, on the raw text: at each position the longest added token
//     that starts there (leftmost-longest, like tokenizers' Aho-Corasick matcher). Without
//     parse_special, a match of a *special* added token is dropped and its text stays ordinary text,
//     while scanning resumes after it, exactly as tokenizers does with encode_special_tokens=True
//     (transformers' split_special_tokens=True). Non-special added tokens (<think>, <tool_call>,
//     <|fim_prefix|>, ...) are still matched then: tokenizers does so too, checked empirically with
//     tokenizers 0.23.3 ("a<think>b" -> [64, 248068, 65] either way).
//  3. Each stretch between added tokens is NFC-normalised, split by the pre-tokenizer regex (matches
//     and the gaps between them, if any, are pieces), and each piece's bytes are merged by BPE.
#include <algorithm>
#include <cstring>

#include "core/error.h"
#include "tokenizer/tokenizer_impl.h"
#include "tokenizer/utf8.h"

namespace di {

using tokenizer_detail::append_utf8_lossy;
using tokenizer_detail::append_utf8_lossy_prefix;
using tokenizer_detail::utf8_first_invalid;

Tokenizer::Tokenizer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Tokenizer::Tokenizer(Tokenizer&&) noexcept = default;
Tokenizer& Tokenizer::operator=(Tokenizer&&) noexcept = default;
Tokenizer::~Tokenizer() = default;

// The state of one encode() call.
class Tokenizer::Impl::Encoder {
 public:
  Encoder(const Impl& m, std::vector<int32_t>& out)
      : m_(m), out_(out), lock_(m.cache_mutex, std::try_to_lock), cache_(lock_.owns_lock() ? &m.cache : nullptr) {
    if (m.split) matcher_.emplace(*m.split);
  }

  // Encodes text that holds no added token.
  void text(std::string_view s) {
    if (s.empty()) return;
    const std::string_view norm = m_.nfc ? tokenizer_detail::nfc(s, norm_buf_) : s;
    if (matcher_)
      matcher_->split(norm, [this](std::string_view piece, bool) { this->piece(piece); });
    else
      piece(norm);
  }

 private:
  void piece(std::string_view p) {
    if (p.size() == 1) {
      out_.push_back(m_.byte_ids[uint8_t(p[0])]);
      return;
    }
    if (cache_ && p.size() <= tokenizer_detail::WordCache::kMaxWordBytes) {
      const uint64_t h = tokenizer_detail::hash_bytes(p);
      if (cache_->lookup(p, h, out_)) return;
      const size_t before = out_.size();
      tokenizer_detail::bpe_merge(m_.merges, m_.byte_ids, p, scratch_, out_);
      cache_->insert(p, h, std::span<const int32_t>(out_).subspan(before));
      return;
    }
    tokenizer_detail::bpe_merge(m_.merges, m_.byte_ids, p, scratch_, out_);
  }

  const Impl& m_;
  std::vector<int32_t>& out_;
  std::unique_lock<std::mutex> lock_;
  tokenizer_detail::WordCache* cache_;
  std::optional<tokenizer_detail::SplitRegex::Matcher> matcher_;
  tokenizer_detail::BpeScratch scratch_;
  std::string norm_buf_;
};

std::vector<int32_t> Tokenizer::encode(std::string_view text, bool parse_special) const {
  const Impl& m = *impl_;
  if (const size_t bad = utf8_first_invalid(text); bad != std::string_view::npos) {
    const auto* p = reinterpret_cast<const unsigned char*>(text.data());
    const auto st = tokenizer_detail::utf8_step(p + bad, text.size() - bad);
    std::string found;
    for (size_t k = bad; k < text.size() && k < bad + 4; ++k) found += fmt::format("{}0x{:02X}", k > bad ? " " : "", p[k]);
    if (st.kind == tokenizer_detail::Utf8Step::kIncomplete)
      fail("tokenizer: invalid UTF-8 in the text to encode at byte offset {}: the sequence {} is truncated by the end "
           "of the text ({} bytes)",
           bad, found, text.size());
    fail("tokenizer: invalid UTF-8 in the text to encode at byte offset {}: expected a well-formed sequence, found "
         "bytes {}",
         bad, found);
  }
  std::vector<int32_t> ids;
  ids.reserve(text.size() / 3 + 8);
  Impl::Encoder enc(m, ids);

  const auto* p = reinterpret_cast<const unsigned char*>(text.data());
  const size_t n = text.size();
  size_t seg = 0;  // start of the text not yet encoded
  size_t i = 0;
  if (!m.added.empty()) {
    const int only = m.added.single_first_byte();
    while (i < n) {
      if (only >= 0) {
        const void* hit = std::memchr(p + i, only, n - i);
        if (!hit) break;
        i = size_t(static_cast<const unsigned char*>(hit) - p);
      } else if (!m.added.may_start(p[i])) {
        ++i;
        continue;
      }
      int32_t id = -1;
      const size_t len = m.added.longest_at(p + i, n - i, id);
      if (len == 0) {
        ++i;
        continue;
      }
      if (!parse_special && (m.flags[size_t(id)] & Impl::kSpecial)) {
        i += len;  // stays text; no other added token may start inside it (as in tokenizers)
        continue;
      }
      enc.text(text.substr(seg, i - seg));
      ids.push_back(id);
      i += len;
      seg = i;
    }
  }
  enc.text(text.substr(seg));
  return ids;
}

const std::string& Tokenizer::token_bytes(int32_t id) const {
  const Impl& m = *impl_;
  if (id < 0 || size_t(id) >= m.flags.size() || !(m.flags[size_t(id)] & Impl::kPresent)) {
    if (id >= 0 && size_t(id) < m.flags.size())
      fail("tokenizer: token id {} is not in the vocabulary of {} (a gap between ids)", id, m.json_path);
    fail("tokenizer: token id {} is out of range: {} has ids 0..{}", id, m.json_path, int64_t(m.flags.size()) - 1);
  }
  return m.bytes[size_t(id)];
}

std::string Tokenizer::decode(std::span<const int32_t> ids, bool skip_special) const {
  const Impl& m = *impl_;
  std::string bytes;
  for (const int32_t id : ids) {
    const std::string& b = token_bytes(id);
    if (skip_special && (m.flags[size_t(id)] & Impl::kSpecial)) continue;
    bytes += b;
  }
  if (utf8_first_invalid(bytes) == std::string_view::npos) return bytes;
  std::string out;
  out.reserve(bytes.size() + 16);
  append_utf8_lossy(out, bytes);
  return out;
}

int64_t Tokenizer::vocab_size() const { return int64_t(impl_->flags.size()); }

std::optional<int32_t> Tokenizer::find_token(std::string_view content) const {
  const auto it = impl_->added_by_content.find(std::string(content));
  if (it == impl_->added_by_content.end()) return std::nullopt;
  return it->second;
}

bool Tokenizer::is_special(int32_t id) const {
  return id >= 0 && size_t(id) < impl_->flags.size() && (impl_->flags[size_t(id)] & Impl::kSpecial);
}

bool Tokenizer::is_added(int32_t id) const {
  return id >= 0 && size_t(id) < impl_->flags.size() && (impl_->flags[size_t(id)] & Impl::kAdded);
}

std::optional<int32_t> Tokenizer::eos_id() const { return impl_->eos; }
std::optional<int32_t> Tokenizer::pad_id() const { return impl_->pad; }
const std::string& Tokenizer::chat_template() const { return impl_->chat_template; }

StreamDecoder::StreamDecoder(const Tokenizer& tokenizer, bool skip_special)
    : tokenizer_(tokenizer), skip_special_(skip_special) {}

std::string StreamDecoder::push(int32_t id) {
  const std::string& b = tokenizer_.token_bytes(id);
  if (skip_special_ && tokenizer_.is_special(id)) return {};
  std::string out;
  if (pending_.empty()) {
    const size_t used = append_utf8_lossy_prefix(out, b);
    pending_.assign(b, used);
  } else {
    pending_ += b;
    const size_t used = append_utf8_lossy_prefix(out, pending_);
    pending_.erase(0, used);
  }
  return out;
}

std::string StreamDecoder::finish() {
  std::string out;
  append_utf8_lossy(out, pending_);  // an incomplete sequence: one U+FFFD
  pending_.clear();
  return out;
}

}  // namespace di
