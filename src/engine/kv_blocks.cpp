#include "engine/kv_blocks.h"

#include <limits>
#include <string>

#include "core/error.h"

namespace di {

KvBlockAllocator::KvBlockAllocator(int64_t num_blocks, int64_t block_size) : block_size_(block_size) {
  DI_CHECK(block_size > 0, "KV blocks: block_size must be > 0, found {}", block_size);
  DI_CHECK(num_blocks >= 0 && num_blocks <= std::numeric_limits<int32_t>::max(),
           "KV blocks: num_blocks must be in [0, 2^31), found {}", num_blocks);
  owner_.assign(size_t(num_blocks), kFree);
  free_.resize(size_t(num_blocks));
  for (int64_t i = 0; i < num_blocks; ++i) free_[size_t(i)] = int32_t(num_blocks - 1 - i);
}

int64_t KvBlockAllocator::blocks_for_tokens(int64_t tokens) const {
  DI_CHECK(tokens >= 0, "KV blocks: token count must be >= 0, found {}", tokens);
  return (tokens + block_size_ - 1) / block_size_;
}

int64_t KvBlockAllocator::extra_blocks_for(int64_t seq, int64_t n) const {
  DI_CHECK(n >= 0, "KV blocks: sequence {} asks for {} tokens (must be >= 0)", seq, n);
  auto it = tables_.find(seq);
  const int64_t have_tokens = it == tables_.end() ? 0 : it->second.tokens;
  const int64_t have_blocks = it == tables_.end() ? 0 : int64_t(it->second.blocks.size());
  const int64_t need = blocks_for_tokens(have_tokens + n);
  return need > have_blocks ? need - have_blocks : 0;
}

bool KvBlockAllocator::can_append(int64_t seq, int64_t n) const { return extra_blocks_for(seq, n) <= free_blocks(); }

int64_t KvBlockAllocator::appendable_tokens(int64_t seq) const {
  auto it = tables_.find(seq);
  const int64_t slack =
      it == tables_.end() ? 0 : int64_t(it->second.blocks.size()) * block_size_ - it->second.tokens;
  return slack + free_blocks() * block_size_;
}

bool KvBlockAllocator::append(int64_t seq, int64_t n) {
  const int64_t extra = extra_blocks_for(seq, n);
  if (extra > free_blocks()) return false;
  Table& t = tables_[seq];
  for (int64_t i = 0; i < extra; ++i) {
    const int32_t b = free_.back();
    free_.pop_back();
    owner_[size_t(b)] = seq;
    t.blocks.push_back(b);
  }
  t.tokens += n;
  return true;
}

void KvBlockAllocator::free(int64_t seq) {
  auto it = tables_.find(seq);
  if (it == tables_.end()) fail("KV blocks: free of sequence {}, which holds no blocks (unknown or already freed)", seq);
  // Returned in reverse so that a sequence freed and reallocated gets its blocks back in order.
  for (auto b = it->second.blocks.rbegin(); b != it->second.blocks.rend(); ++b) {
    owner_[size_t(*b)] = kFree;
    free_.push_back(*b);
  }
  tables_.erase(it);
}

const KvBlockAllocator::Table& KvBlockAllocator::table(int64_t seq, const char* what) const {
  auto it = tables_.find(seq);
  if (it == tables_.end()) fail("KV blocks: {} of sequence {}, which holds no blocks", what, seq);
  return it->second;
}

int64_t KvBlockAllocator::tokens(int64_t seq) const { return table(seq, "token count").tokens; }

const std::vector<int32_t>& KvBlockAllocator::block_table(int64_t seq) const {
  return table(seq, "block table").blocks;
}

void KvBlockAllocator::check_consistency() const {
  int64_t owned = 0;
  for (const auto& [seq, t] : tables_) {
    DI_CHECK(int64_t(t.blocks.size()) == blocks_for_tokens(t.tokens),
             "KV blocks: sequence {} holds {} blocks for {} tokens (expected {})", seq, t.blocks.size(), t.tokens,
             blocks_for_tokens(t.tokens));
    for (int32_t b : t.blocks) {
      DI_CHECK(b >= 0 && b < num_blocks(), "KV blocks: sequence {} lists block {} (out of range)", seq, b);
      DI_CHECK(owner_[size_t(b)] == seq, "KV blocks: sequence {} lists block {}, owned by {}", seq, b,
               owner_[size_t(b)] == kFree ? std::string("nobody") : std::to_string(owner_[size_t(b)]));
    }
    owned += int64_t(t.blocks.size());
  }
  for (int32_t b : free_)
    DI_CHECK(b >= 0 && b < num_blocks() && owner_[size_t(b)] == kFree, "KV blocks: free block {} is owned", b);
  DI_CHECK(owned + free_blocks() == num_blocks(), "KV blocks: {} owned + {} free != {} blocks", owned, free_blocks(),
           num_blocks());
}

}  // namespace di
