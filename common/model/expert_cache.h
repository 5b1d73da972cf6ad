// Hot-expert cache policy of the dense service: which routed experts occupy
// the GPU's expert slots (the number of slots comes from the memory plan,
// common/plan/memory_plan.h). Policy only: no CUDA here; the caller copies
// the weights of each admitted expert into its slot and computes the hits.
//
// Policy: decayed LFU per (layer, expert). Every activation (one token
// routed to the expert) adds 1 to its score; at each EndStep() all scores
// are multiplied by `decay` (kept lazily: increments grow by 1/decay per
// step and everything is rescaled now and then, which preserves order).
// A missed expert is admitted into a free slot, or else in place of the
// lowest-scored resident that is not pinned, only when its score is strictly
// higher than that victim's. Experts touched in the current step (hit,
// admitted or prefetched) are pinned until EndStep(), so a later layer's or
// a prefetch's admission never evicts weights the current step still uses.
// Ties between victims go to the lower (layer, expert) key, so a given
// sequence of calls always gives the same slots: deterministic.
//
// Prefetch(layer, experts) is the predictor's hint for a layer that has not
// been routed yet in this step: each predicted expert gets `prefetch_credit`
// score and is admitted under the same rule; the next Access() of that layer
// counts each prediction as a hit (the expert was routed) or a miss.
//
// Counters (ExpertCacheStats): hits and misses count distinct (layer,
// expert) pairs per Access (an expert used by 5 tokens of a step is one hit
// or one miss); h2d_bytes adds the admitted expert's bytes for every
// admission (Access or Prefetch).
//
// Thread-safety: not thread-safe; one cache per dense service step loop.
#pragma once

#include <cstdint>
#include <set>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"

namespace moesplit::model {

struct ExpertCacheOptions {
  int n_layer = 0;
  int n_expert = 0;
  int64_t n_slots = 0;                // >= 0 (0: every access misses)
  // Bytes copied host->device for one expert of each layer (n_layer entries),
  // e.g. gate + up + down from the tensor types.
  std::vector<uint64_t> expert_bytes;
  double decay = 0.99;                // per step, in (0, 1]
  double prefetch_credit = 0.5;       // score a prediction adds, >= 0
};

struct ExpertCacheStats {
  uint64_t hits = 0;
  uint64_t misses = 0;
  uint64_t h2d_bytes = 0;
  uint64_t admissions = 0;
  uint64_t evictions = 0;
  uint64_t prefetch_hits = 0;    // predicted and then routed
  uint64_t prefetch_misses = 0;  // predicted and not routed
  // hits and misses by layer (n_layer entries each; they sum to the above).
  std::vector<uint64_t> layer_hits, layer_misses;
};

// One admission: copy expert (layer, expert) into `slot`, whose previous
// occupant (evicted_layer, evicted_expert; -1 when the slot was free) is
// dropped.
struct ExpertAdmission {
  int layer = 0;
  int expert = 0;
  int64_t slot = 0;
  int evicted_layer = -1;
  int evicted_expert = -1;
};

class ExpertCache {
 public:
  // InvalidArgument for n_layer or n_expert < 1, n_slots < 0, expert_bytes
  // of the wrong length, decay outside (0, 1] or a negative credit.
  static absl::StatusOr<ExpertCache> Create(ExpertCacheOptions options);

  // The slot holding (layer, expert), or -1. REQUIRES: indices in range.
  int64_t Lookup(int layer, int expert) const { return slot_of_[Key(layer, expert)]; }

  // One layer's routing in the current step: `experts` holds the routed
  // expert id of every (token, k) pair (repeats are activations). Counts
  // each distinct expert as a hit or miss, adds the activations to the
  // scores, and admits missed experts that win (appended to *admitted, may
  // be nullptr). InvalidArgument (nothing changed) for an index out of range.
  absl::Status Access(int layer, absl::Span<const int32_t> experts,
                      std::vector<ExpertAdmission>* admitted);
  // The predictor's experts for `layer` (see the file comment).
  absl::Status Prefetch(int layer, absl::Span<const int32_t> experts,
                        std::vector<ExpertAdmission>* admitted);
  // Ends the step: decays every score and unpins.
  void EndStep();
  // Zeroes the counters (not the scores): after a warm-up or a preload.
  void ResetStats() {
    stats_ = ExpertCacheStats();
    stats_.layer_hits.assign(options_.n_layer, 0);
    stats_.layer_misses.assign(options_.n_layer, 0);
  }

  const ExpertCacheStats& stats() const { return stats_; }
  int64_t n_slots() const { return options_.n_slots; }
  int64_t resident() const { return static_cast<int64_t>(resident_.size()); }
  int64_t resident_in_layer(int layer) const { return per_layer_[layer]; }
  int n_layer() const { return options_.n_layer; }
  int n_expert() const { return options_.n_expert; }
  // The current score of (layer, expert) in activations (decay applied).
  double score(int layer, int expert) const { return score_[Key(layer, expert)] / inc_; }

 private:
  explicit ExpertCache(ExpertCacheOptions options);
  int Key(int layer, int expert) const { return layer * options_.n_expert + expert; }
  absl::Status Check(int layer, absl::Span<const int32_t> experts) const;
  void AddScore(int key, double amount);
  // Admits `key` if a slot is free or it beats the weakest unpinned resident.
  void Admit(int key, std::vector<ExpertAdmission>* admitted);
  void Rescale();

  ExpertCacheOptions options_;
  uint64_t step_ = 1;
  double inc_ = 1.0;                     // value of one activation now
  std::vector<double> score_;            // per key, in units of inc_
  std::vector<int64_t> slot_of_;         // per key, -1 when not resident
  std::vector<uint64_t> pinned_step_;    // per key: step it was last touched
  std::vector<uint64_t> predicted_step_; // per key: step it was last predicted
  std::vector<int> slot_owner_;          // per slot: key or -1
  std::vector<int64_t> free_slots_;      // a stack, lowest slot on top
  std::vector<int64_t> per_layer_;       // residents per layer
  std::set<std::pair<double, int>> resident_;  // (score, key), weakest first
  ExpertCacheStats stats_;
};

}  // namespace moesplit::model
