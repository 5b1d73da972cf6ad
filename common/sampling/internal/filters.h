// Candidate-set filters of the sampler (private to common/sampling).
//
// A CandidateSet is an array of (token id, logit) and an active prefix
// [0, size). Filters shrink the prefix and may reorder the array. `sorted`
// says the active prefix is in canonical order: logit descending, ties by
// ascending token id (a strict total order, so the sorted order is unique and
// does not depend on the standard library's nth_element/sort internals).
// An unsorted set is always in ascending token-id order (the initial order;
// MinP's compaction keeps it).
//
// Semantics are llama.cpp's (src/llama-sampling.cpp) with the ties rule above:
//   TopK(k)   k <= 0 or k >= size: no-op. Else keeps the k best (ties at the
//             cut -> lowest ids) and sorts them: heap selection for
//             k <= 4096 (~one comparison per candidate), else nth_element.
//   TopP(p)   p >= 1: no-op. Else softmax over the active set, keeps the
//             shortest canonical-order prefix whose probability mass >= p
//             (at least one), sorted. Unsorted input is sorted progressively:
//             a first block of 256 by heap selection, then blocks sized from
//             the mass still missing, so a peaked distribution costs O(n)
//             (one pass of expf plus a heap select), never a full sort; a
//             flat one costs O(n + kept log kept).
//   MinP(p)   p <= 0: no-op. Keeps tokens with logit >= max + log(p), i.e.
//             prob >= p * max prob. Keeps order.
//   TopNSigma(n)  n <= 0 or size <= 1: no-op. Keeps tokens with logit >=
//             max - n * sigma, sigma the population standard deviation of
//             the active logits that are not -inf (llama.cpp's top-n-sigma;
//             it sets the others to -inf, which never get drawn). Keeps order.
//   Typical(p)  p >= 1 or size <= 1: no-op. Locally typical sampling
//             (llama.cpp's typical): softmax over the active set, entropy
//             H = -sum p log p; candidates ordered by |-log p - H| ascending
//             (ties: canonical order), the shortest prefix whose mass > p is
//             kept (at least one; all when rounding never gets there), then
//             sorted canonically. O(n log n): a full sort of the active set.
//   Xtc(threshold, tokens)  exclude top choices (llama.cpp's xtc, once its
//             coin said yes): when c >= 2 candidates have softmax prob >=
//             threshold (-inf logits never count), the c - 1 most probable
//             are removed (the least probable of them stays), the rest
//             sorted. threshold > 0.5 or
//             size < 2: no-op (only one token can pass a threshold > 0.5).
// The logits must contain no NaN and no +inf (the sampler rejects them), and
// the active set must be non-empty with a finite maximum.
//
// Not thread-safe: a CandidateSet belongs to one Sampler.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace moesplit::sampling_internal {

struct Candidate {
  int32_t id;
  float logit;
};

// Canonical order: higher logit first, then lower id.
inline bool Precedes(const Candidate& a, const Candidate& b) {
  return a.logit > b.logit || (a.logit == b.logit && a.id < b.id);
}

struct CandidateSet {
  std::vector<Candidate> data;  // capacity reserved once (n_vocab)
  size_t size = 0;              // active prefix
  bool sorted = false;
};

// Largest logit of the active set (its first element when sorted).
float MaxLogit(const CandidateSet& set);

// Index of the canonical best candidate of the active set (highest logit,
// lowest id among ties).
size_t ArgMax(const CandidateSet& set);

void TopK(CandidateSet& set, int32_t k);
void TopP(CandidateSet& set, float p);
void MinP(CandidateSet& set, float p);
void TopNSigma(CandidateSet& set, float n);
void Typical(CandidateSet& set, float p);
void Xtc(CandidateSet& set, float threshold);

}  // namespace moesplit::sampling_internal
