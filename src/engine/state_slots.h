#pragma once
// Host-side accounting of the state pool: one slot per running sequence, holding on the GPU side the
// conv state and the float32 recurrent state of every GDN layer. Slot ids are 0..capacity-1; the
// lowest free id is not guaranteed, only that a freed id is handed out again. Misuse (freeing a slot
// that is free or out of range) is a di::Error.
#include <cstdint>
#include <optional>
#include <vector>

namespace di {

class StateSlotPool {
 public:
  explicit StateSlotPool(int capacity);

  int capacity() const { return int(in_use_.size()); }
  int free_count() const { return int(free_.size()); }
  int used_count() const { return capacity() - free_count(); }
  bool in_use(int slot) const;

  std::optional<int> try_allocate();  // nullopt when every slot is taken
  int allocate();                     // di::Error when every slot is taken
  void free(int slot);

 private:
  std::vector<int> free_;  // a stack: pop_back gives the next slot (slot 0 first)
  std::vector<bool> in_use_;
};

}  // namespace di
