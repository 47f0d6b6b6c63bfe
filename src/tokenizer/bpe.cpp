#include "tokenizer/bpe.h"

#include <algorithm>
#include <bit>
#include <limits>

#include "tokenizer/utf8.h"

namespace di::tokenizer_detail {

ByteLevelAlphabet::ByteLevelAlphabet() {
  std::fill(std::begin(char_to_byte), std::end(char_to_byte), int16_t(-1));
  auto printable = [](int b) { return (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF); };
  char32_t next = 0x100;
  for (int b = 0; b < 256; ++b) {
    const char32_t c = printable(b) ? char32_t(b) : next++;
    byte_to_char[b] = c;
    char_to_byte[c] = int16_t(b);
  }
}

const ByteLevelAlphabet& byte_level() {
  static const ByteLevelAlphabet alphabet;
  return alphabet;
}

bool byte_level_to_bytes(std::string_view text, std::string& out) {
  const ByteLevelAlphabet& a = byte_level();
  const auto* p = reinterpret_cast<const unsigned char*>(text.data());
  size_t i = 0;
  while (i < text.size()) {
    const Utf8Step s = utf8_step(p + i, text.size() - i);
    if (s.kind != Utf8Step::kValid || s.cp >= 0x144 || a.char_to_byte[s.cp] < 0) return false;
    out += char(a.char_to_byte[s.cp]);
    i += s.len;
  }
  return true;
}

uint64_t hash_bytes(std::string_view s) {
  constexpr uint64_t k1 = 0xBF58476D1CE4E5B9ull, k2 = 0x94D049BB133111EBull;
  uint64_t h = 0x9E3779B97F4A7C15ull ^ (uint64_t(s.size()) * k2);
  const char* p = s.data();
  size_t n = s.size();
  for (; n >= 8; p += 8, n -= 8) {
    uint64_t w;
    std::memcpy(&w, p, 8);
    h = (h ^ w) * k1;
    h ^= h >> 31;
  }
  if (n) {
    uint64_t w = 0;
    std::memcpy(&w, p, n);
    h = (h ^ w) * k1;
    h ^= h >> 31;
  }
  h ^= h >> 29;
  h *= k2;
  h ^= h >> 32;
  return h ? h : 1;
}

void MergeTable::reserve(size_t count) {
  size_t cap = 16;
  while (cap < count * 2) cap <<= 1;
  slots_.assign(cap, Entry{kEmpty, 0, 0});
  mask_ = cap - 1;
  shift_ = 64 - std::countr_zero(cap);
  count_ = 0;
}

void MergeTable::insert(int32_t left, int32_t right, uint32_t rank, int32_t merged) {
  if ((count_ + 1) * 2 > slots_.size()) {  // grow (reserve() normally makes this unnecessary)
    std::vector<Entry> old = std::move(slots_);
    reserve(std::max<size_t>(count_ + 1, old.size()));
    for (const Entry& e : old)
      if (e.key != kEmpty) insert(int32_t(e.key >> 32), int32_t(uint32_t(e.key)), e.rank, e.merged);
  }
  const uint64_t key = make_key(left, right);
  size_t i = slot_of(key);
  while (slots_[i].key != kEmpty && slots_[i].key != key) i = (i + 1) & mask_;
  if (slots_[i].key == kEmpty) ++count_;
  slots_[i] = Entry{key, rank, merged};
}

namespace {

constexpr uint32_t kNoMerge = std::numeric_limits<uint32_t>::max();
// Words up to this many bytes use the quadratic loop over a compact array, longer ones the heap.
constexpr size_t kLinearMax = 128;

void merge_linear(const MergeTable& merges, BpeScratch& s, std::vector<int32_t>& out) {
  auto& sym = s.sym;
  auto& rank = s.rank;
  auto& merged = s.merged;
  size_t m = sym.size();
  auto set_pair = [&](size_t i) {
    const MergeTable::Entry* e = merges.find(sym[i], sym[i + 1]);
    rank[i] = e ? e->rank : kNoMerge;
    merged[i] = e ? e->merged : -1;
  };
  rank.resize(m - 1);
  merged.resize(m - 1);
  for (size_t i = 0; i + 1 < m; ++i) set_pair(i);
  while (m > 1) {
    size_t best = 0;
    uint32_t best_rank = rank[0];
    for (size_t i = 1; i + 1 < m; ++i)
      if (rank[i] < best_rank) best_rank = rank[i], best = i;
    if (best_rank == kNoMerge) break;
    sym[best] = merged[best];
    // Drop symbol best+1 and pair best+1 (pair best is recomputed below).
    std::copy(sym.begin() + best + 2, sym.begin() + m, sym.begin() + best + 1);
    if (best + 2 < m - 1) {
      std::copy(rank.begin() + best + 2, rank.begin() + (m - 1), rank.begin() + best + 1);
      std::copy(merged.begin() + best + 2, merged.begin() + (m - 1), merged.begin() + best + 1);
    }
    --m;
    if (best > 0) set_pair(best - 1);
    if (best + 1 < m) set_pair(best);
  }
  out.insert(out.end(), sym.begin(), sym.begin() + m);
}

// The same merge order as merge_linear (lowest rank, then leftmost), in O(n log n): a doubly linked
// list of symbols and a min-heap of candidate pairs keyed by (rank, position of the left symbol).
// Entries made stale by an earlier merge are recognised and dropped when popped.
void merge_heap(const MergeTable& merges, BpeScratch& s, std::vector<int32_t>& out) {
  auto& sym = s.sym;
  auto& prev = s.prev;
  auto& next = s.next;
  auto& heap = s.heap;
  const size_t n = sym.size();
  prev.resize(n);
  next.resize(n);
  for (size_t i = 0; i < n; ++i) {
    prev[i] = int32_t(i) - 1;
    next[i] = i + 1 < n ? int32_t(i + 1) : -1;
  }
  auto later = [](const BpeScratch::HeapItem& a, const BpeScratch::HeapItem& b) {
    return a.rank != b.rank ? a.rank > b.rank : a.pos > b.pos;
  };
  heap.clear();
  auto push = [&](int32_t pos) {
    const int32_t r = next[pos];
    if (r < 0) return;
    if (const MergeTable::Entry* e = merges.find(sym[pos], sym[r])) {
      heap.push_back({e->rank, uint32_t(pos), e->merged});
      std::push_heap(heap.begin(), heap.end(), later);
    }
  };
  for (size_t i = 0; i + 1 < n; ++i)
    if (const MergeTable::Entry* e = merges.find(sym[i], sym[i + 1])) heap.push_back({e->rank, uint32_t(i), e->merged});
  std::make_heap(heap.begin(), heap.end(), later);
  constexpr int32_t kRemoved = -2;
  while (!heap.empty()) {
    std::pop_heap(heap.begin(), heap.end(), later);
    const BpeScratch::HeapItem top = heap.back();
    heap.pop_back();
    const int32_t pos = int32_t(top.pos);
    if (prev[pos] == kRemoved) continue;  // the left symbol was merged into its neighbour
    const int32_t r = next[pos];
    if (r < 0) continue;
    const MergeTable::Entry* e = merges.find(sym[pos], sym[r]);
    if (!e || e->rank != top.rank || e->merged != top.merged) continue;  // the pair has changed
    sym[pos] = top.merged;
    next[pos] = next[r];
    if (next[r] >= 0) prev[next[r]] = pos;
    prev[r] = kRemoved;
    if (prev[pos] >= 0) push(prev[pos]);
    push(pos);
  }
  for (int32_t i = 0; i >= 0; i = next[i]) out.push_back(sym[i]);
}

}  // namespace

void bpe_merge(const MergeTable& merges, const int32_t* byte_ids, std::string_view word, BpeScratch& scratch,
               std::vector<int32_t>& out) {
  const size_t n = word.size();
  if (n == 0) return;
  if (n == 1) {
    out.push_back(byte_ids[uint8_t(word[0])]);
    return;
  }
  scratch.sym.resize(n);
  for (size_t i = 0; i < n; ++i) scratch.sym[i] = byte_ids[uint8_t(word[i])];
  if (n <= kLinearMax)
    merge_linear(merges, scratch, out);
  else
    merge_heap(merges, scratch, out);
}

WordCache::WordCache() : slots_(kSlots, Slot{0, 0, 0, 0, 0}) {}

void WordCache::clear() {
  std::fill(slots_.begin(), slots_.end(), Slot{0, 0, 0, 0, 0});
  keys_.clear();
  ids_.clear();
  count_ = 0;
}

void WordCache::insert(std::string_view word, uint64_t hash, std::span<const int32_t> ids) {
  if (word.size() > kMaxWordBytes || ids.size() > 0xFFFF) return;
  if (count_ >= kMaxEntries) clear();
  size_t i = hash & kMask;
  while (slots_[i].hash != 0) i = (i + 1) & kMask;
  slots_[i] = Slot{hash, uint32_t(keys_.size()), uint32_t(ids_.size()), uint16_t(word.size()), uint16_t(ids.size())};
  keys_.append(word);
  ids_.insert(ids_.end(), ids.begin(), ids.end());
  ++count_;
}

}  // namespace di::tokenizer_detail
