#pragma once
// Host-side accounting of the paged KV cache of the full-attention layers: which fixed-size blocks
// (block_size tokens each, 64 in the engine) are free and which, in order, hold each sequence's
// tokens. It owns no GPU memory; the block ids it hands out index the KV buffers that the GPU side
// allocates for num_blocks blocks. Every attention layer uses the same block table.
//
// A request that cannot be satisfied (not enough free blocks) returns false and changes nothing.
// Misuse (an unknown sequence, a negative count) is a di::Error.
#include <cstdint>
#include <unordered_map>
#include <vector>

namespace di {

class KvBlockAllocator {
 public:
  KvBlockAllocator(int64_t num_blocks, int64_t block_size);

  int64_t num_blocks() const { return int64_t(owner_.size()); }
  int64_t block_size() const { return block_size_; }
  int64_t free_blocks() const { return int64_t(free_.size()); }
  int64_t used_blocks() const { return num_blocks() - free_blocks(); }

  // Blocks needed to hold `tokens` tokens.
  int64_t blocks_for_tokens(int64_t tokens) const;
  // Blocks `seq` would need beyond those it holds to hold `n` more tokens (an unknown sequence holds
  // none).
  int64_t extra_blocks_for(int64_t seq, int64_t n) const;
  bool can_append(int64_t seq, int64_t n) const;
  // The most tokens `seq` can still add: the room left in its last block plus every free block.
  int64_t appendable_tokens(int64_t seq) const;

  // Reserves room for n more tokens of `seq` (a new sequence starts with an empty table): takes the
  // blocks that are missing from the free list. False, and nothing changed, when too few are free.
  bool append(int64_t seq, int64_t n);
  // Returns every block of `seq` to the free list and forgets it. Unknown sequence: di::Error.
  void free(int64_t seq);

  bool has(int64_t seq) const { return tables_.count(seq) != 0; }
  int64_t tokens(int64_t seq) const;                        // tokens reserved so far
  const std::vector<int32_t>& block_table(int64_t seq) const;  // block ids in token order
  int64_t num_sequences() const { return int64_t(tables_.size()); }

  // Checks the bookkeeping (every block either free or owned by exactly one table that lists it;
  // each table exactly covers its tokens); di::Error naming the first inconsistency.
  void check_consistency() const;

 private:
  struct Table {
    int64_t tokens = 0;
    std::vector<int32_t> blocks;
  };
  const Table& table(int64_t seq, const char* what) const;

  int64_t block_size_;
  std::vector<int32_t> free_;   // a stack: pop_back gives the next block (block 0 first)
  std::vector<int64_t> owner_;  // per block: the owning sequence, or kFree
  std::unordered_map<int64_t, Table> tables_;
  static constexpr int64_t kFree = INT64_MIN;
};

}  // namespace di
