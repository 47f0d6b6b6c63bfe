#include "engine/state_slots.h"

#include "core/error.h"

namespace di {

StateSlotPool::StateSlotPool(int capacity) {
  DI_CHECK(capacity >= 0, "state slots: capacity must be >= 0, found {}", capacity);
  in_use_.assign(size_t(capacity), false);
  free_.resize(size_t(capacity));
  for (int i = 0; i < capacity; ++i) free_[size_t(i)] = capacity - 1 - i;
}

bool StateSlotPool::in_use(int slot) const {
  DI_CHECK(slot >= 0 && slot < capacity(), "state slots: slot {} is out of range [0, {})", slot, capacity());
  return in_use_[size_t(slot)];
}

std::optional<int> StateSlotPool::try_allocate() {
  if (free_.empty()) return std::nullopt;
  const int slot = free_.back();
  free_.pop_back();
  in_use_[size_t(slot)] = true;
  return slot;
}

int StateSlotPool::allocate() {
  const std::optional<int> slot = try_allocate();
  if (!slot) fail("state slots: all {} slots are in use", capacity());
  return *slot;
}

void StateSlotPool::free(int slot) {
  DI_CHECK(slot >= 0 && slot < capacity(), "state slots: free of slot {}, out of range [0, {})", slot, capacity());
  DI_CHECK(in_use_[size_t(slot)], "state slots: free of slot {}, which is not in use (double free?)", slot);
  in_use_[size_t(slot)] = false;
  free_.push_back(slot);
}

}  // namespace di
