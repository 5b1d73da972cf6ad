// ExpertSlotPolicy: which experts keep the RAM tier's slots (expert_tier.h).
//
// Keys are dense ints 0 <= key < n_keys (the tier numbers its (layer,
// expert) pairs); slots are 0 <= slot < n_slots. The policy is a segmented
// LRU guarded by frequency, so that one long prefill cannot flush the decode
// set:
//   - every use (Touch) counts one in the key's frequency, kept for every key
//     whether resident or not, and halved for all keys every
//     kAgePeriodPerSlot * n_slots uses (so yesterday's hot experts fade);
//   - a key loaded on a miss enters the probation segment, or the
//     protected one when it was used before (frequency >= 2) and that
//     segment has room or holds a colder key (which is demoted);
//   - a probation key used again is promoted to the protected segment
//     (at most n_protected slots); when that is full it is promoted only if
//     its frequency beats the protected segment's coldest key, which is
//     demoted to probation;
//   - a miss takes a free slot, else the least recently used unpinned
//     probation slot, else the coldest (lowest frequency, then least
//     recently used) unpinned protected slot.
// A scan (prefill touching every expert once per call) thus churns the
// probation segment only, while experts that decode uses token after token
// stay protected.
//
// Slots in use by a call are pinned (Assign pins; Pin/Unpin nest) and never
// chosen as victims.
//
// Thread-safety: none; the tier serialises calls under its mutex.
#pragma once

#include <cstdint>
#include <optional>
#include <set>
#include <tuple>
#include <utility>
#include <vector>

namespace moesplit::worker {

class ExpertSlotPolicy {
 public:
  static constexpr int kAgePeriodPerSlot = 16;

  // REQUIRES: n_slots >= 1, n_keys >= 1.
  ExpertSlotPolicy(int n_slots, int n_keys);

  int n_slots() const { return static_cast<int>(slots_.size()); }
  int n_protected() const { return n_protected_cap_; }
  // Counts one use of `key`; returns its slot when resident (promoting it as
  // above), nullopt otherwise.
  std::optional<int> Touch(int key);
  // The slot for a key that is not resident (after its Touch): a free slot
  // or a victim's, now holding `key` in probation and pinned once. -1 when
  // every slot is pinned. *evicted gets the key that lost its slot (-1:
  // none). `probation_only`: a free slot or a probation victim only (a
  // prefetch guess must not evict a protected expert), else -1.
  int Assign(int key, int* evicted, bool probation_only = false);
  void Pin(int slot);
  void Unpin(int slot);
  // Empties a slot (e.g. its read failed); REQUIRES: pinned once exactly,
  // which Drop consumes.
  void Drop(int slot);

  // -1 when the key is not resident.
  int SlotOf(int key) const { return key_slot_[key]; }
  // -1 for a free slot.
  int KeyOf(int slot) const { return slots_[slot].key; }
  bool Protected(int slot) const { return slots_[slot].is_protected; }
  int resident() const { return resident_; }
  uint32_t Frequency(int key) const { return freq_[key]; }

 private:
  struct Slot {
    int key = -1;
    int pins = 0;
    bool is_protected = false;
    uint64_t tick = 0;  // last use
  };
  using ProbationEntry = std::pair<uint64_t, int>;                 // (tick, slot)
  using ProtectedEntry = std::tuple<uint32_t, uint64_t, int>;      // (freq, tick, slot)

  void Index(int slot);    // into its segment's victim set (unpinned only)
  void Unindex(int slot);  // out of it
  // Moves an unindexed probation slot to the protected segment when that
  // has room or its coldest unpinned key is colder (that one is demoted).
  void MaybeProtect(int slot);
  void Age();

  std::vector<Slot> slots_;
  std::vector<int> key_slot_;
  std::vector<uint32_t> freq_;
  std::vector<int> free_;
  std::set<ProbationEntry> probation_;  // unpinned probation slots, LRU first
  std::set<ProtectedEntry> protected_;  // unpinned protected slots, coldest first
  int n_protected_cap_ = 0;
  int n_protected_ = 0;  // protected slots, pinned or not
  int resident_ = 0;
  uint64_t tick_ = 0;
  uint64_t uses_since_aging_ = 0;
};

}  // namespace moesplit::worker
