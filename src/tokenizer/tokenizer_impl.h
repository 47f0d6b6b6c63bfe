#pragma once
// The tokenizer's state, shared by tokenizer.cpp (encode, decode) and tokenizer_load.cpp (loading).
#include <array>
#include <cstdint>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "tokenizer/bpe.h"
#include "tokenizer/pretokenize.h"
#include "tokenizer/tokenizer.h"

namespace di {
namespace tokenizer_detail {

// The added tokens' texts in a byte trie, for the leftmost-longest search of the input.
class AddedTokenMatcher {
 public:
  AddedTokenMatcher() : nodes_(1) {}
  void add(std::string_view content, int32_t id);
  bool empty() const { return nodes_.size() == 1; }
  bool may_start(uint8_t b) const { return first_[b]; }
  // The only byte any added token starts with, or -1 when there are several (or none).
  int single_first_byte() const { return single_first_; }
  // The length of the longest added token that starts at p[0..n) (0 for none) and its id.
  size_t longest_at(const unsigned char* p, size_t n, int32_t& id) const;

 private:
  struct Node {
    int32_t id = -1;
    std::vector<std::pair<uint8_t, int32_t>> next;  // byte -> node
  };
  std::vector<Node> nodes_;
  std::array<bool, 256> first_{};
  int single_first_ = -1;
  int n_first_ = 0;
};

}  // namespace tokenizer_detail

struct Tokenizer::Impl {
  enum Flag : uint8_t { kPresent = 1, kAdded = 2, kSpecial = 4 };
  class Encoder;  // the state of one encode() call (tokenizer.cpp)

  std::string json_path;               // for messages
  std::vector<std::string> bytes;      // by id: what the token decodes to
  std::vector<uint8_t> flags;          // by id: Flag bits
  int32_t byte_ids[256] = {};          // the token of each single byte
  tokenizer_detail::MergeTable merges;
  tokenizer_detail::AddedTokenMatcher added;
  std::unordered_map<std::string, int32_t> added_by_content;
  bool nfc = false;
  std::optional<tokenizer_detail::SplitRegex> split;  // none: the whole text is one piece

  std::optional<int32_t> eos, pad;
  std::string chat_template;

  // Pre-token -> ids. An encode() that finds the mutex taken (another thread encoding) runs without
  // the cache rather than wait.
  mutable std::mutex cache_mutex;
  mutable tokenizer_detail::WordCache cache;
};

}  // namespace di
