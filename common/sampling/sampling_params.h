// SamplingParams: the per-request knobs of token sampling, and their
// validation in the spirit of OpenAI's API (a bad value is answered with
// InvalidArgument naming the field, the allowed range and the value got).
//
// Field semantics (the pipeline itself is documented in sampler.h):
//   temperature         [0, 2]. 0 = greedy: exact argmax of the penalised
//                       logits (ties -> lowest token id).
//   top_k               >= 0. 0 disables; values above n_vocab act as n_vocab.
//   top_p               (0, 1]. 1 disables.
//   min_p               [0, 1]. 0 disables.
//   repetition_penalty  > 0 (finite). 1 disables.
//   presence_penalty    [-2, 2]. 0 disables.
//   frequency_penalty   [-2, 2]. 0 disables.
//   penalty_last_n      >= -1: how many of the most recent history tokens the
//                       three penalties look at; 0 = penalties off, -1 = the
//                       whole history (llama.cpp maps -1 to the context size).
//   seed / has_seed     with has_seed the RNG is seeded with `seed`, otherwise
//                       from std::random_device (Sampler::seed() reports it).
//   return_logprob      report the chosen token's log-probability (OpenAI
//                       `logprobs: true`).
//   logprobs            [0, 20]: also report this many top alternatives
//                       (OpenAI `top_logprobs`); > 0 implies return_logprob.
//   typical_p           [0, 1]. 1 disables (locally typical sampling).
//   top_n_sigma         finite; <= 0 disables (llama.cpp's default -1).
//   xtc_probability     [0, 1]: the chance, per token, that XTC ("exclude
//                       top choices") runs. 0 disables.
//   xtc_threshold       [0, 1]: the probability a top choice needs to be
//                       excluded; > 0.5 disables (llama.cpp's default 0.1).
//   dry                 DRY (dry.h): multiplier finite (0 disables), base
//                       >= 1, allowed_length >= 0, penalty_last_n >= -1.
//   logit_bias          (token, bias) pairs added to the raw logits before
//                       everything else (a token may appear more than once:
//                       the biases add up); bias finite or -inf (the token
//                       is never sampled). Tokens in [0, n_vocab).
//
// Thread-safe: plain value type; Validate is a pure function.
#pragma once

#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "common/sampling/dry.h"

namespace moesplit {

struct LogitBias {
  int32_t token = 0;
  float bias = 0.0f;
};

struct SamplingParams {
  float temperature = 1.0f;
  int32_t top_k = 0;
  float top_p = 1.0f;
  float min_p = 0.0f;
  float repetition_penalty = 1.0f;
  float presence_penalty = 0.0f;
  float frequency_penalty = 0.0f;
  int32_t penalty_last_n = 64;
  uint64_t seed = 0;
  bool has_seed = false;
  bool return_logprob = false;
  int32_t logprobs = 0;
  float typical_p = 1.0f;
  float top_n_sigma = -1.0f;
  float xtc_probability = 0.0f;
  float xtc_threshold = 0.1f;
  std::vector<LogitBias> logit_bias;
  DryParams dry;
};

// Largest `logprobs` accepted (OpenAI's top_logprobs limit).
inline constexpr int32_t kMaxTopLogprobs = 20;

// OK when every field is in range and n_vocab > 0; otherwise InvalidArgument
// for the first offending field in declaration order, e.g.
// "temperature must be in [0, 2], got 3". NaN is out of every range.
absl::Status Validate(const SamplingParams& params, int n_vocab);

}  // namespace moesplit
