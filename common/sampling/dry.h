// DRY ("don't repeat yourself"), llama.cpp's repetition penalty for token
// sequences (src/llama-sampler.cpp, llama_sampler_dry_*; the sampler runs it
// right after the other penalties).
//
// Over the last w = min(history, dry_penalty_last_n) tokens h (h[0] the most
// recent): for each earlier position k in [1, w), the length n_k of the
// longest suffix of the history that also ends at h[k] (h[i] == h[i + k] for
// i < n_k, i + k < w), capped at the repetition limit (below). A token t
// that followed such a repeat (t = h[k - 1]) with n_k >= dry_allowed_length
// would extend it: its logit loses
//     dry_multiplier * dry_base ^ (max n_k - dry_allowed_length)
// (the exponent capped so that the power stays a finite float), unless t is
// a whole sequence breaker by itself. Sequence breakers (strings, e.g. "\n",
// ":") end repeats: scanning back from h[0], the first position i where a
// breaker's tokens end (h[i] and the tail tokens after it) sets the limit to
// i - (tail length); below dry_allowed_length DRY does nothing.
//
// Breakers are turned into token sequences once per request
// (DryBreakers::FromStrings: every token whose text contains the breaker is
// a single-token breaker; a token whose text ends with a prefix of the
// breaker is followed by the tokens of the rest, at most 20; breakers are cut
// to 40 bytes), as llama.cpp's get_overlapping_token_sequences.
//
// Thread-safe: DryBreakers is immutable; DryPenalize is a pure function of
// its arguments (it uses `scratch`).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "common/tokenizer/tokenizer.h"

namespace moesplit {

struct DryBreakers {
  // First token -> the tokens that must follow it (empty: the token is a
  // breaker by itself).
  std::unordered_multimap<int32_t, std::vector<int32_t>> sequences;

  // llama.cpp's default breakers.
  static std::vector<std::string> Defaults() { return {"\n", ":", "\"", "*"}; }
  // Empty strings are skipped. Fails only if the tokenizer does.
  static absl::StatusOr<std::shared_ptr<const DryBreakers>> FromStrings(
      const Tokenizer& tok, const std::vector<std::string>& breakers);
};

struct DryParams {
  float multiplier = 0.0f;  // 0: off
  float base = 1.75f;       // >= 1
  int32_t allowed_length = 2;
  int32_t penalty_last_n = 64;  // 0: off; -1: the whole history
  std::shared_ptr<const DryBreakers> breakers;  // null: none
  bool active() const { return multiplier != 0.0f && base >= 1.0f && penalty_last_n != 0; }
};

// Calls apply(token, penalty) once for each token to penalize (the caller
// subtracts the penalty from its logit). `history`: oldest first.
void DryPenalize(const DryParams& p, absl::Span<const int32_t> history,
                 absl::flat_hash_map<int32_t, int>* scratch,
                 const std::function<void(int32_t token, float penalty)>& apply);

}  // namespace moesplit
