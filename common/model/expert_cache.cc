#include "common/model/expert_cache.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"

namespace moesplit::model {
namespace {

constexpr double kRescaleAbove = 1e100;

}  // namespace

absl::StatusOr<ExpertCache> ExpertCache::Create(ExpertCacheOptions o) {
  if (o.n_layer < 1 || o.n_expert < 1) {
    return absl::InvalidArgumentError(absl::StrCat("expert cache: n_layer (", o.n_layer,
                                                   ") and n_expert (", o.n_expert,
                                                   ") must be >= 1"));
  }
  if (o.n_slots < 0) {
    return absl::InvalidArgumentError(absl::StrCat("expert cache: n_slots ", o.n_slots, " < 0"));
  }
  if (o.expert_bytes.size() != static_cast<size_t>(o.n_layer)) {
    return absl::InvalidArgumentError(absl::StrCat("expert cache: expert_bytes has ",
                                                   o.expert_bytes.size(), " entries for ",
                                                   o.n_layer, " layers"));
  }
  if (!(o.decay > 0 && o.decay <= 1)) {
    return absl::InvalidArgumentError(absl::StrCat("expert cache: decay ", o.decay,
                                                   " outside (0, 1]"));
  }
  if (!(o.prefetch_credit >= 0) || !std::isfinite(o.prefetch_credit)) {
    return absl::InvalidArgumentError(absl::StrCat("expert cache: prefetch_credit ",
                                                   o.prefetch_credit, " must be >= 0"));
  }
  return ExpertCache(std::move(o));
}

ExpertCache::ExpertCache(ExpertCacheOptions o) : options_(std::move(o)) {
  const size_t keys = static_cast<size_t>(options_.n_layer) * options_.n_expert;
  // More slots than experts are never used.
  options_.n_slots = std::min<int64_t>(options_.n_slots, static_cast<int64_t>(keys));
  score_.assign(keys, 0.0);
  slot_of_.assign(keys, -1);
  pinned_step_.assign(keys, 0);
  predicted_step_.assign(keys, 0);
  slot_owner_.assign(options_.n_slots, -1);
  for (int64_t s = options_.n_slots - 1; s >= 0; --s) free_slots_.push_back(s);
  per_layer_.assign(options_.n_layer, 0);
  stats_.layer_hits.assign(options_.n_layer, 0);
  stats_.layer_misses.assign(options_.n_layer, 0);
}

absl::Status ExpertCache::Check(int layer, absl::Span<const int32_t> experts) const {
  if (layer < 0 || layer >= options_.n_layer) {
    return absl::InvalidArgumentError(absl::StrCat("expert cache: layer ", layer,
                                                   " out of range [0, ", options_.n_layer, ")"));
  }
  for (int32_t e : experts) {
    if (e < 0 || e >= options_.n_expert) {
      return absl::InvalidArgumentError(absl::StrCat("expert cache: expert ", e,
                                                     " out of range [0, ", options_.n_expert,
                                                     ") in layer ", layer));
    }
  }
  return absl::OkStatus();
}

void ExpertCache::AddScore(int key, double amount) {
  if (amount == 0) return;
  const bool in = slot_of_[key] >= 0;
  if (in) resident_.erase({score_[key], key});
  score_[key] += amount * inc_;
  if (in) resident_.insert({score_[key], key});
}

void ExpertCache::Admit(int key, std::vector<ExpertAdmission>* admitted) {
  if (slot_of_[key] >= 0 || options_.n_slots == 0) return;
  ExpertAdmission a;
  a.layer = key / options_.n_expert;
  a.expert = key % options_.n_expert;
  if (!free_slots_.empty()) {
    a.slot = free_slots_.back();
    free_slots_.pop_back();
  } else {
    // The weakest resident not pinned by this step.
    auto victim = resident_.begin();
    while (victim != resident_.end() && pinned_step_[victim->second] == step_) ++victim;
    if (victim == resident_.end() || !(score_[key] > victim->first)) return;
    const int v = victim->second;
    a.slot = slot_of_[v];
    a.evicted_layer = v / options_.n_expert;
    a.evicted_expert = v % options_.n_expert;
    resident_.erase(victim);
    slot_of_[v] = -1;
    --per_layer_[a.evicted_layer];
    ++stats_.evictions;
  }
  slot_of_[key] = a.slot;
  slot_owner_[a.slot] = key;
  resident_.insert({score_[key], key});
  ++per_layer_[a.layer];
  pinned_step_[key] = step_;
  ++stats_.admissions;
  stats_.h2d_bytes += options_.expert_bytes[a.layer];
  if (admitted != nullptr) admitted->push_back(a);
}

absl::Status ExpertCache::Access(int layer, absl::Span<const int32_t> experts,
                                 std::vector<ExpertAdmission>* admitted) {
  if (absl::Status s = Check(layer, experts); !s.ok()) return s;
  // Activations per distinct expert, in order of first appearance.
  std::vector<int> order;
  std::vector<int> count(options_.n_expert, 0);
  for (int32_t e : experts) {
    if (count[e]++ == 0) order.push_back(e);
  }
  const int base = Key(layer, 0);
  for (int e = 0; e < options_.n_expert; ++e) {
    if (predicted_step_[base + e] != step_) continue;
    if (count[e] > 0) ++stats_.prefetch_hits; else ++stats_.prefetch_misses;
    predicted_step_[base + e] = 0;
  }
  for (int e : order) AddScore(base + e, count[e]);
  // Every hit is pinned before any miss is admitted: a miss listed first must
  // not evict an expert this very access computes from its slot.
  for (int e : order) {
    const int key = base + e;
    if (slot_of_[key] >= 0) {
      ++stats_.hits;
      ++stats_.layer_hits[layer];
      pinned_step_[key] = step_;
    }
  }
  for (int e : order) {
    const int key = base + e;
    if (slot_of_[key] < 0) {
      ++stats_.misses;
      ++stats_.layer_misses[layer];
      Admit(key, admitted);
    }
  }
  return absl::OkStatus();
}

absl::Status ExpertCache::Prefetch(int layer, absl::Span<const int32_t> experts,
                                   std::vector<ExpertAdmission>* admitted) {
  if (absl::Status s = Check(layer, experts); !s.ok()) return s;
  for (int32_t e : experts) {
    const int key = Key(layer, e);
    if (predicted_step_[key] == step_) continue;  // repeated prediction
    predicted_step_[key] = step_;
    AddScore(key, options_.prefetch_credit);
    if (slot_of_[key] >= 0) {
      pinned_step_[key] = step_;
    } else {
      Admit(key, admitted);
    }
  }
  return absl::OkStatus();
}

void ExpertCache::EndStep() {
  ++step_;
  inc_ /= options_.decay;
  if (inc_ > kRescaleAbove) Rescale();
}

void ExpertCache::Rescale() {
  for (double& s : score_) s /= inc_;
  inc_ = 1.0;
  resident_.clear();
  for (size_t key = 0; key < slot_of_.size(); ++key) {
    if (slot_of_[key] >= 0) resident_.insert({score_[key], static_cast<int>(key)});
  }
}

}  // namespace moesplit::model
