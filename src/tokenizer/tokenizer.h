#pragma once
// The Qwen3.5 tokenizer: byte-level BPE loaded from a Hugging Face tokenizer.json (vocabulary,
// merges, added and special tokens, the NFC normaliser, the pre-tokenizer split regex) and
// tokenizer_config.json (eos, pad, chat template). Encoding follows the Hugging Face `tokenizers`
// library token for token: added tokens are split out first, each remaining piece is NFC-normalised
// (utf8proc), split by the pre-tokenizer regex (PCRE2, JIT, UTF mode), mapped to bytes and merged
// by BPE rank. encode() and decode() are const and may run on several threads at once.
#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace di {

class Tokenizer {
 public:
  // Loads dir/tokenizer.json and, when present, dir/tokenizer_config.json. Every problem (missing
  // file, bad JSON, an unsupported model/normaliser/pre-tokenizer type, a merge naming an unknown
  // token, duplicate ids) is a di::Error naming the file and the entry.
  static Tokenizer load(const std::filesystem::path& dir);

  Tokenizer(Tokenizer&&) noexcept;
  Tokenizer& operator=(Tokenizer&&) noexcept;
  ~Tokenizer();

  // Text to ids. Invalid UTF-8 in `text` is a di::Error naming the byte offset. With
  // parse_special, the text of an added token ("<|im_start|>") becomes its id; without, it is
  // encoded as ordinary text (transformers' split_special_tokens=True, for user content).
  std::vector<int32_t> encode(std::string_view text, bool parse_special = true) const;

  // Ids to text, like tokenizers' decode: byte-level bytes joined, invalid UTF-8 replaced as
  // Rust's String::from_utf8_lossy does (one U+FFFD per maximal invalid subsequence). An id outside
  // the vocabulary is a di::Error naming it.
  std::string decode(std::span<const int32_t> ids, bool skip_special = false) const;

  // The raw bytes of one token (for streaming). An added token's bytes are its content.
  const std::string& token_bytes(int32_t id) const;

  int64_t vocab_size() const;                          // largest id + 1
  std::optional<int32_t> find_token(std::string_view content) const;  // an added token by its text
  bool is_special(int32_t id) const;                   // added token marked special
  bool is_added(int32_t id) const;

  // From tokenizer_config.json (empty/nullopt when absent).
  std::optional<int32_t> eos_id() const;
  std::optional<int32_t> pad_id() const;
  const std::string& chat_template() const;            // "" when none

 private:
  struct Impl;
  explicit Tokenizer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// Incremental detokenisation for streaming. push() returns the text that the new token completes;
// it never returns a partial UTF-8 sequence, and the concatenation of every push() and finish()
// equals decode(all ids, skip_special) exactly.
class StreamDecoder {
 public:
  explicit StreamDecoder(const Tokenizer& tokenizer, bool skip_special = false);
  std::string push(int32_t id);
  std::string finish();  // what is still held (an incomplete sequence at the end, as U+FFFD)

 private:
  const Tokenizer& tokenizer_;
  bool skip_special_;
  std::string pending_;  // bytes not yet emitted: the start of an incomplete UTF-8 sequence
};

}  // namespace di
