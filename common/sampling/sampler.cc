#include "common/sampling/sampler.h"

#include <cfloat>
#include <cmath>
#include <limits>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/base/status.h"

namespace moesplit {

using sampling_internal::ArgMax;
using sampling_internal::MaxLogit;

absl::StatusOr<Sampler> Sampler::Create(const SamplingParams& params,
                                        int n_vocab) {
  RETURN_IF_ERROR(Validate(params, n_vocab));
  uint64_t seed = params.seed;
  if (!params.has_seed) {
    std::random_device rd;
    seed = (static_cast<uint64_t>(rd()) << 32) ^ static_cast<uint64_t>(rd());
  }
  return Sampler(params, n_vocab, seed);
}

Sampler::Sampler(const SamplingParams& params, int n_vocab, uint64_t seed)
    : params_(params), n_vocab_(n_vocab), seed_(seed), rng_(seed) {
  candidates_.data.resize(static_cast<size_t>(n_vocab));
  weights_.resize(static_cast<size_t>(n_vocab));
  if (params_.penalty_last_n > 0) {
    window_counts_.reserve(static_cast<size_t>(params_.penalty_last_n));
  }
}

bool Sampler::PenaltiesActive() const {
  return params_.penalty_last_n != 0 &&
         !(params_.repetition_penalty == 1.0f &&
           params_.frequency_penalty == 0.0f &&
           params_.presence_penalty == 0.0f);
}

void Sampler::AcceptOne(int32_t token) {
  history_.push_back(token);
  if (!PenaltiesActive()) return;
  ++window_counts_[token];
  const int32_t last_n = params_.penalty_last_n;
  if (last_n > 0 && history_.size() > static_cast<size_t>(last_n)) {
    const int32_t old = history_[history_.size() - 1 - last_n];
    auto it = window_counts_.find(old);
    if (--it->second == 0) window_counts_.erase(it);
  }
}

absl::Status Sampler::Accept(absl::Span<const int32_t> tokens) {
  for (int32_t t : tokens) {
    if (t < 0 || t >= n_vocab_) {
      return absl::InvalidArgumentError(absl::StrCat(
          "token id ", t, " is outside the vocabulary [0, ", n_vocab_, ")"));
    }
  }
  for (int32_t t : tokens) AcceptOne(t);
  return absl::OkStatus();
}

void Sampler::Reset() {
  history_.clear();
  window_counts_.clear();
  rng_.seed(seed_);
  candidates_.size = 0;
}

absl::Status Sampler::LoadCandidates(absl::Span<const float> logits) {
  candidates_.size = 0;
  candidates_.sorted = false;
  Candidate* data = candidates_.data.data();
  bool bad = false;
  for (int32_t i = 0; i < n_vocab_; ++i) {
    const float x = logits[i];
    bad |= !(x < std::numeric_limits<float>::infinity());  // NaN or +inf
    data[i] = Candidate{i, x};
  }
  if (bad) {
    for (int32_t i = 0; i < n_vocab_; ++i) {
      if (!(logits[i] < std::numeric_limits<float>::infinity())) {
        return absl::InvalidArgumentError(
            absl::StrCat("logit of token ", i, " is ", logits[i],
                         "; logits must be finite or -inf"));
      }
    }
  }
  candidates_.size = static_cast<size_t>(n_vocab_);
  for (const LogitBias& b : params_.logit_bias) {
    float& l = data[b.token].logit;
    l += b.bias;
    if (l > FLT_MAX) l = FLT_MAX;  // a large bias overflowed
  }
  if (PenaltiesActive()) {
    const float rep = params_.repetition_penalty;
    for (const auto& [token, count] : window_counts_) {
      float& l = data[token].logit;
      l = l <= 0.0f ? l * rep : l / rep;
      l -= static_cast<float>(count) * params_.frequency_penalty +
           params_.presence_penalty;
      if (l > FLT_MAX) l = FLT_MAX;  // a tiny repetition_penalty overflowed
    }
  }
  DryPenalize(params_.dry, history_, &dry_scratch_, [data](int32_t token, float penalty) {
    float& l = data[token].logit;
    l -= penalty;
    if (l > FLT_MAX) l = FLT_MAX;  // a negative multiplier overflowed
  });
  return absl::OkStatus();
}

double Sampler::NextUniform() {
  return static_cast<double>(rng_() >> 11) * 0x1.0p-53;
}

bool Sampler::XtcActive() const {
  return params_.xtc_probability > 0.0f && params_.xtc_threshold <= 0.5f;
}

void Sampler::Filter() {
  sampling_internal::TopNSigma(candidates_, params_.top_n_sigma);
  sampling_internal::TopK(candidates_, params_.top_k);
  sampling_internal::Typical(candidates_, params_.typical_p);
  sampling_internal::TopP(candidates_, params_.top_p);
  sampling_internal::MinP(candidates_, params_.min_p);
  // XTC's coin is drawn only where llama.cpp draws it (two candidates left).
  if (XtcActive() && candidates_.size >= 2 && NextUniform() < params_.xtc_probability) {
    sampling_internal::Xtc(candidates_, params_.xtc_threshold);
  }
}

int32_t Sampler::Draw() {
  Filter();

  const Candidate* data = candidates_.data.data();
  const size_t n = candidates_.size;
  const float max_logit = MaxLogit(candidates_);
  const float t = params_.temperature;
  double total = 0.0;
  for (size_t i = 0; i < n; ++i) {
    weights_[i] = std::exp((data[i].logit - max_logit) / t);
    total += weights_[i];
  }
  const double target = NextUniform() * total;
  double cum = 0.0;
  for (size_t i = 0; i < n; ++i) {
    cum += weights_[i];
    if (cum > target) return data[i].id;
  }
  // Only reachable if u * total rounded up to total: last positive weight.
  size_t last = n - 1;
  while (last > 0 && weights_[last] == 0.0f) --last;
  return data[last].id;
}

void Sampler::FillLogprobs(absl::Span<const float> logits,
                           SampledToken* out) const {
  float max_logit = logits[0];
  for (float x : logits) max_logit = std::max(max_logit, x);
  double sum = 0.0;
  for (float x : logits) sum += std::exp(x - max_logit);
  const double lse = static_cast<double>(max_logit) + std::log(sum);
  out->logprob = static_cast<float>(logits[out->token] - lse);

  // Bounded insertion: top_logprobs stays in canonical order (raw logit
  // descending, lower id first); ids arrive ascending, so an equal logit
  // goes after the ones already kept.
  auto& top = out->top_logprobs;
  top.clear();
  const size_t want =
      std::min(static_cast<size_t>(params_.logprobs), logits.size());
  if (want == 0) return;
  top.reserve(want);
  for (int32_t id = 0; id < n_vocab_; ++id) {
    const float x = logits[id];
    if (top.size() == want) {
      if (!(x > top.back().logprob)) continue;
      top.pop_back();
    }
    size_t pos = top.size();
    while (pos > 0 && top[pos - 1].logprob < x) --pos;
    top.insert(top.begin() + pos, TokenLogprob{id, x});
  }
  for (TokenLogprob& e : top) {
    e.logprob = static_cast<float>(e.logprob - lse);
  }
}

void Sampler::KeepAllowed(absl::Span<const uint64_t> allowed) {
  Candidate* data = candidates_.data.data();
  size_t kept = 0;
  for (size_t i = 0; i < candidates_.size; ++i) {
    const int32_t id = data[i].id;
    if ((allowed[static_cast<size_t>(id) >> 6] >> (id & 63)) & 1) data[kept++] = data[i];
  }
  candidates_.size = kept;
}

absl::Status Sampler::Sample(absl::Span<const float> logits,
                             SampledToken* out) {
  return Sample(logits, {}, out);
}

absl::Status Sampler::Sample(absl::Span<const float> logits,
                             absl::Span<const uint64_t> allowed,
                             SampledToken* out) {
  candidates_.size = 0;
  if (logits.size() != static_cast<size_t>(n_vocab_)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "logits has ", logits.size(), " entries, expected n_vocab = ",
        n_vocab_));
  }
  const size_t words = (static_cast<size_t>(n_vocab_) + 63) / 64;
  if (!allowed.empty() && allowed.size() != words) {
    return absl::InvalidArgumentError(absl::StrCat(
        "the allowed-token mask has ", allowed.size(), " words, expected ",
        words));
  }
  RETURN_IF_ERROR(LoadCandidates(logits));
  if (!allowed.empty()) KeepAllowed(allowed);
  if (candidates_.size == 0 ||
      MaxLogit(candidates_) == -std::numeric_limits<float>::infinity()) {
    candidates_.size = 0;
    return absl::InvalidArgumentError(
        allowed.empty()
            ? "every logit is -inf (after penalties): nothing can be sampled"
            : "every allowed token's logit is -inf (after penalties): nothing "
              "can be sampled");
  }
  if (params_.temperature == 0.0f) {
    // Typical and XTC may remove the argmax (llama.cpp runs its chain before
    // the greedy pick); the other filters always keep it.
    if (params_.typical_p < 1.0f || XtcActive()) Filter();
    const size_t best = ArgMax(candidates_);
    std::swap(candidates_.data[0], candidates_.data[best]);
    candidates_.size = 1;
    candidates_.sorted = true;
    out->token = candidates_.data[0].id;
  } else {
    out->token = Draw();
  }
  if (params_.return_logprob || params_.logprobs > 0) {
    FillLogprobs(logits, out);
  } else {
    out->logprob = 0.0f;
    out->top_logprobs.clear();
  }
  AcceptOne(out->token);
  return absl::OkStatus();
}

absl::StatusOr<SampledToken> Sampler::Sample(absl::Span<const float> logits) {
  SampledToken out;
  RETURN_IF_ERROR(Sample(logits, &out));
  return out;
}

}  // namespace moesplit
