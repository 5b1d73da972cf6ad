#include "services/expert_worker/slot_policy.h"

#include <algorithm>
#include <limits>

namespace moesplit::worker {

ExpertSlotPolicy::ExpertSlotPolicy(int n_slots, int n_keys)
    : slots_(n_slots), key_slot_(n_keys, -1), freq_(n_keys, 0) {
  // Four fifths protected: the probation fifth absorbs a scan.
  n_protected_cap_ = std::max(0, n_slots - std::max(1, n_slots / 5));
  free_.reserve(n_slots);
  for (int s = n_slots - 1; s >= 0; --s) free_.push_back(s);
}

void ExpertSlotPolicy::Index(int slot) {
  const Slot& s = slots_[slot];
  if (s.key < 0 || s.pins > 0) return;
  if (s.is_protected) {
    protected_.emplace(freq_[s.key], s.tick, slot);
  } else {
    probation_.emplace(s.tick, slot);
  }
}

void ExpertSlotPolicy::Unindex(int slot) {
  const Slot& s = slots_[slot];
  if (s.key < 0 || s.pins > 0) return;
  if (s.is_protected) {
    protected_.erase({freq_[s.key], s.tick, slot});
  } else {
    probation_.erase({s.tick, slot});
  }
}

void ExpertSlotPolicy::MaybeProtect(int slot) {
  Slot& s = slots_[slot];
  if (n_protected_ < n_protected_cap_) {
    s.is_protected = true;
    ++n_protected_;
  } else if (!protected_.empty() && freq_[s.key] > std::get<0>(*protected_.begin())) {
    const int cold = std::get<2>(*protected_.begin());
    Unindex(cold);
    slots_[cold].is_protected = false;
    Index(cold);
    s.is_protected = true;
  }
}

void ExpertSlotPolicy::Age() {
  for (uint32_t& f : freq_) f /= 2;
  protected_.clear();
  for (int s = 0; s < n_slots(); ++s) {
    if (slots_[s].is_protected) Index(s);
  }
  uses_since_aging_ = 0;
}

std::optional<int> ExpertSlotPolicy::Touch(int key) {
  const int slot = key_slot_[key];
  if (slot >= 0) Unindex(slot);
  if (freq_[key] < std::numeric_limits<uint32_t>::max()) ++freq_[key];
  ++tick_;
  if (slot < 0) {
    if (++uses_since_aging_ >= static_cast<uint64_t>(kAgePeriodPerSlot) * n_slots()) Age();
    return std::nullopt;
  }
  Slot& s = slots_[slot];
  s.tick = tick_;
  if (!s.is_protected) MaybeProtect(slot);
  Index(slot);
  if (++uses_since_aging_ >= static_cast<uint64_t>(kAgePeriodPerSlot) * n_slots()) Age();
  return slot;
}

int ExpertSlotPolicy::Assign(int key, int* evicted, bool probation_only) {
  *evicted = -1;
  int slot = -1;
  if (!free_.empty()) {
    slot = free_.back();
    free_.pop_back();
  } else if (!probation_.empty()) {
    slot = probation_.begin()->second;
  } else if (!protected_.empty() && !probation_only) {
    slot = std::get<2>(*protected_.begin());
  } else {
    return -1;
  }
  Slot& s = slots_[slot];
  if (s.key >= 0) {
    Unindex(slot);
    *evicted = s.key;
    key_slot_[s.key] = -1;
    if (s.is_protected) --n_protected_;
    --resident_;
  }
  s = Slot{key, 1, false, tick_};
  key_slot_[key] = slot;
  ++resident_;
  // A key seen before (its frequency counts uses while not resident) goes
  // straight to the protected segment when that has room or when it is
  // hotter than the segment's coldest: a hot set larger than the probation
  // segment gets in, a first-time scan key does not.
  if (freq_[key] >= 2) MaybeProtect(slot);
  return slot;
}

void ExpertSlotPolicy::Pin(int slot) {
  if (slots_[slot].pins == 0) Unindex(slot);
  ++slots_[slot].pins;
}

void ExpertSlotPolicy::Unpin(int slot) {
  if (--slots_[slot].pins == 0) Index(slot);
}

void ExpertSlotPolicy::Drop(int slot) {
  Slot& s = slots_[slot];
  key_slot_[s.key] = -1;
  if (s.is_protected) --n_protected_;
  s = Slot{};
  free_.push_back(slot);
  --resident_;
}

}  // namespace moesplit::worker
