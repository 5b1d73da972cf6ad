#include "common/sampling/internal/filters.h"

#include <algorithm>
#include <cmath>

namespace moesplit::sampling_internal {
namespace {

// First block TopP sorts when its input is unsorted.
constexpr size_t kTopPFirstBlock = 256;
// Blocks up to this size are selected with a heap (std::partial_sort: one
// mostly-predicted comparison per candidate); larger ones with nth_element.
constexpr size_t kHeapSelectMax = 4096;

// Sum of exp(logit - max) over the active set, in double.
double ExpSum(const CandidateSet& set, float max_logit) {
  double sum = 0.0;
  for (size_t i = 0; i < set.size; ++i) {
    sum += std::exp(set.data[i].logit - max_logit);
  }
  return sum;
}

// Makes [begin, end) hold, in canonical order, the candidates that come
// right after [0, begin) in canonical order; [0, begin) must already be the
// canonical prefix.
void SortNextBlock(CandidateSet& set, size_t begin, size_t end) {
  Candidate* first = set.data.data();
  if (end - begin <= kHeapSelectMax) {
    std::partial_sort(first + begin, first + end, first + set.size, Precedes);
    return;
  }
  if (end < set.size) {
    std::nth_element(first + begin, first + end, first + set.size, Precedes);
  }
  std::sort(first + begin, first + end, Precedes);
}

}  // namespace

float MaxLogit(const CandidateSet& set) {
  if (set.sorted) return set.data[0].logit;
  float m = set.data[0].logit;
  for (size_t i = 1; i < set.size; ++i) m = std::max(m, set.data[i].logit);
  return m;
}

size_t ArgMax(const CandidateSet& set) {
  if (set.sorted) return 0;
  // Unsorted sets are in ascending id order, so the first maximum found by
  // a strict comparison is the lowest id among ties.
  size_t best = 0;
  float best_logit = set.data[0].logit;
  for (size_t i = 1; i < set.size; ++i) {
    if (set.data[i].logit > best_logit) {
      best = i;
      best_logit = set.data[i].logit;
    }
  }
  return best;
}

void TopK(CandidateSet& set, int32_t k) {
  if (k <= 0 || static_cast<size_t>(k) >= set.size) return;
  if (!set.sorted) SortNextBlock(set, 0, static_cast<size_t>(k));
  set.size = static_cast<size_t>(k);
  set.sorted = true;
}

// Size of the next TopP block once [0, done) is sorted and has mass `cum`
// of the `target`: at least doubling, and at least 1.5x the lower bound on
// the count still needed (later weights are <= the last one).
size_t NextTopPBlock(const CandidateSet& set, size_t done, float max_logit,
                     double cum, double target) {
  if (done == 0) return kTopPFirstBlock;
  const double w_last = std::exp(set.data[done - 1].logit - max_logit);
  const double remaining = static_cast<double>(set.size - done);
  double block = w_last > 0 ? 1.5 * (target - cum) / w_last : remaining;
  block = std::clamp(block, static_cast<double>(done), remaining);
  return static_cast<size_t>(block);
}

void TopP(CandidateSet& set, float p) {
  if (p >= 1.0f) return;
  const float max_logit = MaxLogit(set);
  const double target = static_cast<double>(p) * ExpSum(set, max_logit);
  size_t sorted_end = set.sorted ? set.size : 0;
  double cum = 0.0;
  for (size_t i = 0; i < set.size; ++i) {
    if (i == sorted_end) {
      const size_t block = NextTopPBlock(set, i, max_logit, cum, target);
      sorted_end = std::min(set.size, i + std::max<size_t>(block, 1));
      SortNextBlock(set, i, sorted_end);
    }
    cum += std::exp(set.data[i].logit - max_logit);
    if (cum >= target) {
      set.size = i + 1;
      break;
    }
  }
  // Falling off the end (rounding) keeps everything, now fully sorted.
  set.sorted = true;
}

void MinP(CandidateSet& set, float p) {
  if (p <= 0.0f) return;
  const float min_logit = MaxLogit(set) + std::log(p);
  Candidate* first = set.data.data();
  if (set.sorted) {
    set.size = static_cast<size_t>(
        std::partition_point(first, first + set.size,
                             [&](const Candidate& c) {
                               return c.logit >= min_logit;
                             }) -
        first);
  } else {
    set.size = static_cast<size_t>(
        std::remove_if(first, first + set.size,
                       [&](const Candidate& c) { return c.logit < min_logit; }) -
        first);
  }
}

void TopNSigma(CandidateSet& set, float n) {
  if (n <= 0.0f || set.size <= 1) return;
  const float max_logit = MaxLogit(set);
  double sum = 0.0;
  size_t count = 0;
  for (size_t i = 0; i < set.size; ++i) {
    if (set.data[i].logit == -INFINITY) continue;
    sum += set.data[i].logit;
    ++count;
  }
  const double mean = count > 0 ? sum / static_cast<double>(count) : 0.0;
  double acc = 0.0;
  for (size_t i = 0; i < set.size; ++i) {
    if (set.data[i].logit == -INFINITY) continue;
    const double d = set.data[i].logit - mean;
    acc += d * d;
  }
  const double sigma = count > 0 ? std::sqrt(acc / static_cast<double>(count)) : 0.0;
  const float min_logit = static_cast<float>(max_logit - static_cast<double>(n) * sigma);
  Candidate* first = set.data.data();
  // remove_if keeps the relative order: a sorted set stays sorted.
  set.size = static_cast<size_t>(
      std::remove_if(first, first + set.size,
                     [&](const Candidate& c) { return c.logit < min_logit; }) -
      first);
}

void Typical(CandidateSet& set, float p) {
  if (p >= 1.0f || set.size <= 1) return;
  Candidate* first = set.data.data();
  const float max_logit = MaxLogit(set);
  const double log_sum = std::log(ExpSum(set, max_logit));
  // log p_i = logit_i - max - log_sum; H = -sum p_i log p_i.
  double entropy = 0.0;
  for (size_t i = 0; i < set.size; ++i) {
    const double lp = set.data[i].logit - max_logit - log_sum;
    if (std::isfinite(lp)) entropy -= std::exp(lp) * lp;
  }
  // |-log p_i - H| = |m - logit_i| with m = max + log_sum - H: a function
  // of the logit alone (-inf logits score +inf: last).
  const double m = max_logit + log_sum - entropy;
  auto score = [m](const Candidate& c) { return std::fabs(m - static_cast<double>(c.logit)); };
  std::sort(first, first + set.size, [&](const Candidate& a, const Candidate& b) {
    const double sa = score(a), sb = score(b);
    return sa < sb || (sa == sb && Precedes(a, b));
  });
  double cum = 0.0;
  for (size_t i = 0; i < set.size; ++i) {
    cum += std::exp(set.data[i].logit - max_logit - log_sum);
    if (cum > p) {
      set.size = i + 1;
      break;
    }
  }
  std::sort(first, first + set.size, Precedes);
  set.sorted = true;
}

void Xtc(CandidateSet& set, float threshold) {
  if (threshold > 0.5f || set.size < 2) return;
  const float max_logit = MaxLogit(set);
  const double sum = ExpSum(set, max_logit);
  size_t above = 0;
  for (size_t i = 0; i < set.size; ++i) {
    // A -inf logit (a banned token) never counts, even at threshold 0.
    above += set.data[i].logit != -INFINITY &&
             std::exp(set.data[i].logit - max_logit) / sum >= threshold;
  }
  if (above < 2) return;
  Candidate* first = set.data.data();
  if (!set.sorted) std::sort(first, first + set.size, Precedes);
  const size_t drop = above - 1;
  std::move(first + drop, first + set.size, first);
  set.size -= drop;
  set.sorted = true;
}

}  // namespace moesplit::sampling_internal
