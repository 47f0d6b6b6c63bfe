#pragma once
// Byte-level BPE on token ids: GPT-2's byte <-> character alphabet, the merge table, the merge loop
// and a bounded cache of whole pre-tokens.
#include <cstdint>
#include <cstring>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace di::tokenizer_detail {

// GPT-2's bytes_to_unicode: every byte gets a printable character. Printable Latin-1 bytes ('!'..'~',
// '¡'..'¬', '®'..'ÿ') stand for themselves; the other 68 bytes get U+0100.. in byte order.
struct ByteLevelAlphabet {
  char32_t byte_to_char[256];
  int16_t char_to_byte[0x144];  // -1 for a character outside the alphabet
  ByteLevelAlphabet();
};
const ByteLevelAlphabet& byte_level();

// Maps a string of byte-level characters to the bytes they stand for; false (out left partial) when
// `text` holds a character outside the alphabet or is not valid UTF-8.
bool byte_level_to_bytes(std::string_view text, std::string& out);

// A fast 64-bit hash of a byte string (never 0).
uint64_t hash_bytes(std::string_view s);

// (left id, right id) -> (rank, merged id), open addressing with linear probing.
class MergeTable {
 public:
  struct Entry {
    uint64_t key;  // left << 32 | right; kEmpty for a free slot
    uint32_t rank;
    int32_t merged;
  };
  static constexpr uint64_t kEmpty = ~uint64_t(0);

  void reserve(size_t count);
  // Inserts or, for a pair already present, overwrites (the later merge wins, as in tokenizers).
  void insert(int32_t left, int32_t right, uint32_t rank, int32_t merged);
  const Entry* find(int32_t left, int32_t right) const {
    const uint64_t key = make_key(left, right);
    size_t i = slot_of(key);
    for (;;) {
      const Entry& e = slots_[i];
      if (e.key == key) return &e;
      if (e.key == kEmpty) return nullptr;
      i = (i + 1) & mask_;
    }
  }
  size_t size() const { return count_; }
  void prefetch(int32_t left, int32_t right) const { __builtin_prefetch(&slots_[slot_of(make_key(left, right))]); }

 private:
  static uint64_t make_key(int32_t a, int32_t b) { return (uint64_t(uint32_t(a)) << 32) | uint32_t(b); }
  size_t slot_of(uint64_t key) const { return size_t((key * 0x9E3779B97F4A7C15ull) >> shift_); }
  std::vector<Entry> slots_;
  size_t mask_ = 0;
  int shift_ = 64;
  size_t count_ = 0;
};

// Reusable buffers of the merge loop.
struct BpeScratch {
  std::vector<int32_t> sym;
  std::vector<uint32_t> rank;
  std::vector<int32_t> merged;
  std::vector<int32_t> prev, next;
  struct HeapItem {
    uint32_t rank;
    uint32_t pos;
    int32_t merged;
  };
  std::vector<HeapItem> heap;
};

// Appends the ids of one pre-token: its bytes start as single-byte tokens, and the adjacent pair of
// lowest rank (the leftmost among equals) is merged until no pair has a merge. byte_ids maps each
// byte to its token id.
void bpe_merge(const MergeTable& merges, const int32_t* byte_ids, std::string_view word, BpeScratch& scratch,
               std::vector<int32_t>& out);

// A bounded map from pre-token bytes to their ids. When full it starts over (simple, and a working set
// of common words refills it at once).
class WordCache {
 public:
  static constexpr size_t kMaxWordBytes = 64;  // longer words are not cached

  WordCache();
  // On a hit appends the ids to out and returns true.
  bool lookup(std::string_view word, uint64_t hash, std::vector<int32_t>& out) const {
    size_t i = hash & kMask;
    for (;;) {
      const Slot& s = slots_[i];
      if (s.hash == 0) return false;
      if (s.hash == hash && s.key_len == word.size() && std::memcmp(keys_.data() + s.key_off, word.data(), word.size()) == 0) {
        out.insert(out.end(), ids_.begin() + s.ids_off, ids_.begin() + s.ids_off + s.n_ids);
        return true;
      }
      i = (i + 1) & kMask;
    }
  }
  void insert(std::string_view word, uint64_t hash, std::span<const int32_t> ids);
  void clear();

 private:
  static constexpr size_t kSlots = size_t(1) << 16;
  static constexpr size_t kMask = kSlots - 1;
  static constexpr size_t kMaxEntries = kSlots / 2;
  struct Slot {
    uint64_t hash;  // 0: free
    uint32_t key_off;
    uint32_t ids_off;
    uint16_t key_len;
    uint16_t n_ids;
  };
  std::vector<Slot> slots_;
  std::string keys_;
  std::vector<int32_t> ids_;
  size_t count_ = 0;
};

}  // namespace di::tokenizer_detail
