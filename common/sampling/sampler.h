// Sampler: turns one row of logits into the next token of one sequence.
//
// A Sampler belongs to one sequence: it keeps that sequence's token history
// (for the penalties) and its RNG state. Each Sample() runs, in llama.cpp's
// default chain order (common/sampling.cpp: logit_bias, then common/common.h's
// samplers: penalties, dry, top_n_sigma, top_k, typical_p, top_p, min_p, xtc,
// temperature, dist):
//   0. logit_bias: each (token, bias) is added to the raw logit (-inf bans).
//   1. penalties over the last `penalty_last_n` history tokens (llama.cpp
//      llama_sampler_penalties_apply), for each token t seen c > 0 times:
//        logit = logit <= 0 ? logit * repetition_penalty
//                           : logit / repetition_penalty;
//        logit -= c * frequency_penalty + presence_penalty;
//      then DRY (params.dry; dry.h) over the history.
//   2. temperature == 0: the token is the argmax of the penalised logits,
//      ties -> lowest token id; steps 3-5 are skipped and no RNG is drawn --
//      unless typical_p < 1 or XTC is on, which can remove the argmax: then
//      step 3 runs first (XTC drawing its coin) and the argmax is taken over
//      its survivors, as llama.cpp's chain does.
//   3. top_n_sigma, top_k, typical_p, top_p, min_p on the penalised logits
//      (not yet divided by the temperature, as in llama.cpp), then XTC: with
//      xtc_probability > 0, xtc_threshold <= 0.5 and two or more candidates
//      left, one uniform draw u from the RNG, and XTC runs when
//      u < xtc_probability; see internal/filters.h. Ties at a top_k cut keep
//      the lowest ids.
//   4. temperature: softmax((logit - max) / T) over the survivors.
//   5. one uniform draw u in [0, 1) from the RNG; the token is the first
//      survivor, in canonical order, whose running probability mass exceeds
//      u * total (a zero-probability survivor is never chosen). Canonical
//      order is logit descending then id ascending when a filter sorted the
//      set (top_k cut it, top_p < 1, typical_p < 1, XTC ran), else
//      ascending id.
// The chosen token is then appended to the history (as llama.cpp's
// llama_sampler_sample does).
//
// RNG: std::mt19937_64 (its output sequence is fixed by the C++ standard),
// seeded with params.seed; u = (next() >> 11) * 2^-53. No std::*_distribution
// is used, so the same seed, params, history and logits give the same tokens
// on every conforming toolchain. The float math (expf, summation order) is
// fixed by this code; only a libm whose expf rounds differently could move a
// draw that lands within ~1e-7 relative of a boundary.
//
// Log-probabilities (when params.return_logprob or params.logprobs > 0) are
// of the RAW logits passed to Sample(): log_softmax(logits), before
// penalties, filters and temperature -- the model's own distribution, as
// OpenAI reports and vLLM's default logprobs mode does. The top alternatives
// are the `logprobs` tokens with the highest raw logits (ties -> lowest id),
// highest first; they may or may not include the chosen token.
//
// Cost per token: O(n_vocab): one copy, penalties O(window), heap selection
// for top_k (O(n + k log k)) and for top_p's first block, a few linear
// passes and one expf per surviving candidate (full vocabulary when no
// filter cuts it first); never a full sort unless top_p keeps a large part of
// a flat distribution (then O(n + kept log kept)), typical_p < 1 (a sort of
// what top_k left, the whole vocabulary without it) or XTC firing (a sort
// of the survivors). DRY costs O(window) per token (O(window x repeat) when
// the history repeats itself), logit_bias O(entries). Logprobs add two
// linear passes (expf over the vocabulary). sampling_bench prints ns/token.
// No allocation per token: buffers are reserved at Create(); the penalty
// counts map grows only with new distinct tokens when penalty_last_n == -1
// (DRY's map likewise);
// SampledToken::top_logprobs reuses its capacity.
//
// Thread-compatible: one thread at a time per Sampler; distinct Samplers are
// independent.
#pragma once

#include <cstdint>
#include <random>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "common/sampling/internal/filters.h"
#include "common/sampling/sampling_params.h"

namespace moesplit {

struct TokenLogprob {
  int32_t token = -1;
  float logprob = 0.0f;
};

struct SampledToken {
  int32_t token = -1;
  // log_softmax(raw logits)[token]; 0 unless logprobs were requested.
  float logprob = 0.0f;
  // params.logprobs entries (min with n_vocab), highest raw logit first.
  std::vector<TokenLogprob> top_logprobs;
};

class Sampler {
 public:
  using Candidate = sampling_internal::Candidate;

  // InvalidArgument when Validate(params, n_vocab) fails.
  static absl::StatusOr<Sampler> Create(const SamplingParams& params,
                                        int n_vocab);

  // Picks the next token from `logits` (size n_vocab) and appends it to the
  // history. `out` is overwritten (its top_logprobs capacity is reused).
  // InvalidArgument, with nothing changed (history, RNG), when logits has the
  // wrong size, holds a NaN or +inf, or every logit is -inf after penalties.
  absl::Status Sample(absl::Span<const float> logits, SampledToken* out);
  absl::StatusOr<SampledToken> Sample(absl::Span<const float> logits);
  // The same, choosing only among the tokens whose bit is set in `allowed`
  // (bit id & 63 of word id / 64; token_constraint.h): after the penalties
  // every other token leaves the candidate set, so top_k/top_p/min_p, the
  // temperature and greedy see the masked distribution. Logprobs stay those
  // of the raw logits (as above). An empty span allows every token.
  // InvalidArgument, nothing changed, when `allowed` has the wrong size or
  // allows no token with a logit above -inf.
  absl::Status Sample(absl::Span<const float> logits,
                      absl::Span<const uint64_t> allowed, SampledToken* out);

  // Appends tokens (e.g. the prompt, as llama-server does) to the history
  // without sampling. InvalidArgument (nothing appended) for an id outside
  // [0, n_vocab).
  absl::Status Accept(absl::Span<const int32_t> tokens);

  // Forgets the history and restarts the RNG from seed().
  void Reset();

  uint64_t seed() const { return seed_; }
  const SamplingParams& params() const { return params_; }
  int n_vocab() const { return n_vocab_; }
  const std::vector<int32_t>& history() const { return history_; }

  // Debug/test view of the last Sample(): the candidates that survived the
  // filters, in the order the draw walked them, with their penalised logits
  // (before temperature). Greedy leaves just the argmax. Empty before the
  // first Sample() and after a failed one.
  absl::Span<const Candidate> last_candidates() const {
    return {candidates_.data.data(), candidates_.size};
  }

 private:
  Sampler(const SamplingParams& params, int n_vocab, uint64_t seed);

  bool PenaltiesActive() const;
  void AcceptOne(int32_t token);
  // Copies logits into candidates_ and applies the penalties.
  absl::Status LoadCandidates(absl::Span<const float> logits);
  // Keeps the candidates whose bit is set (ascending id order is kept).
  void KeepAllowed(absl::Span<const uint64_t> allowed);
  // Step 3 (the filters and XTC).
  void Filter();
  bool XtcActive() const;
  // Steps 3-5: returns the chosen token.
  int32_t Draw();
  double NextUniform();
  void FillLogprobs(absl::Span<const float> logits, SampledToken* out) const;

  // Constant after construction.
  SamplingParams params_;
  int n_vocab_;
  uint64_t seed_;

  // Per-sequence state.
  std::mt19937_64 rng_;
  std::vector<int32_t> history_;
  absl::flat_hash_map<int32_t, int32_t> window_counts_;  // last_n window
  absl::flat_hash_map<int32_t, int> dry_scratch_;         // DRY's repeats

  // Per-token scratch (reserved to n_vocab).
  sampling_internal::CandidateSet candidates_;
  std::vector<float> weights_;
};

}  // namespace moesplit
