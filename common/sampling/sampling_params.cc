#include "common/sampling/sampling_params.h"

#include <cmath>
#include <limits>

#include "absl/strings/str_cat.h"

namespace moesplit {
namespace {

// "<name> must be in <range>, got <value>".
absl::Status OutOfRange(const char* name, const char* range, double value) {
  return absl::InvalidArgumentError(
      absl::StrCat(name, " must be ", range, ", got ", value));
}

bool InClosed(float v, float lo, float hi) { return v >= lo && v <= hi; }

}  // namespace

absl::Status Validate(const SamplingParams& p, int n_vocab) {
  if (n_vocab <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("n_vocab must be > 0, got ", n_vocab));
  }
  if (!InClosed(p.temperature, 0.0f, 2.0f)) {
    return OutOfRange("temperature", "in [0, 2]", p.temperature);
  }
  if (p.top_k < 0) {
    return OutOfRange("top_k", ">= 0 (0 disables it)", p.top_k);
  }
  if (!(p.top_p > 0.0f && p.top_p <= 1.0f)) {
    return OutOfRange("top_p", "in (0, 1]", p.top_p);
  }
  if (!InClosed(p.min_p, 0.0f, 1.0f)) {
    return OutOfRange("min_p", "in [0, 1]", p.min_p);
  }
  if (!(p.repetition_penalty > 0.0f && std::isfinite(p.repetition_penalty))) {
    return OutOfRange("repetition_penalty", "a finite number > 0",
                      p.repetition_penalty);
  }
  if (!InClosed(p.presence_penalty, -2.0f, 2.0f)) {
    return OutOfRange("presence_penalty", "in [-2, 2]", p.presence_penalty);
  }
  if (!InClosed(p.frequency_penalty, -2.0f, 2.0f)) {
    return OutOfRange("frequency_penalty", "in [-2, 2]", p.frequency_penalty);
  }
  if (p.penalty_last_n < -1) {
    return OutOfRange("penalty_last_n", ">= -1 (-1: whole history, 0: off)",
                      p.penalty_last_n);
  }
  if (p.logprobs < 0 || p.logprobs > kMaxTopLogprobs) {
    return OutOfRange("logprobs", "in [0, 20]", p.logprobs);
  }
  if (!InClosed(p.typical_p, 0.0f, 1.0f)) {
    return OutOfRange("typical_p", "in [0, 1] (1 disables it)", p.typical_p);
  }
  if (!std::isfinite(p.top_n_sigma)) {
    return OutOfRange("top_n_sigma", "a finite number (<= 0 disables it)", p.top_n_sigma);
  }
  if (!InClosed(p.xtc_probability, 0.0f, 1.0f)) {
    return OutOfRange("xtc_probability", "in [0, 1] (0 disables it)", p.xtc_probability);
  }
  if (!InClosed(p.xtc_threshold, 0.0f, 1.0f)) {
    return OutOfRange("xtc_threshold", "in [0, 1] (> 0.5 disables it)", p.xtc_threshold);
  }
  if (!std::isfinite(p.dry.multiplier)) {
    return OutOfRange("dry_multiplier", "a finite number (0 disables it)", p.dry.multiplier);
  }
  if (!(p.dry.base >= 1.0f && std::isfinite(p.dry.base))) {
    return OutOfRange("dry_base", "a finite number >= 1", p.dry.base);
  }
  if (p.dry.allowed_length < 0) {
    return OutOfRange("dry_allowed_length", ">= 0", p.dry.allowed_length);
  }
  if (p.dry.penalty_last_n < -1) {
    return OutOfRange("dry_penalty_last_n", ">= -1 (-1: whole history, 0: off)",
                      p.dry.penalty_last_n);
  }
  for (const LogitBias& b : p.logit_bias) {
    if (b.token < 0 || b.token >= n_vocab) {
      return absl::InvalidArgumentError(absl::StrCat(
          "logit_bias: token id ", b.token, " is outside the vocabulary [0, ", n_vocab, ")"));
    }
    if (std::isnan(b.bias) || b.bias == std::numeric_limits<float>::infinity()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "logit_bias: the bias of token ", b.token, " must be a finite number or -inf (false), got ",
          b.bias));
    }
  }
  return absl::OkStatus();
}

}  // namespace moesplit
