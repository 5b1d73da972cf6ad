#include "common/sampling/dry.h"

#include <algorithm>
#include <cmath>
#include <cstdint>

#include "common/base/status.h"

namespace moesplit {
namespace {

constexpr size_t kMaxBreakerBytes = 40;  // llama.cpp's MAX_CHAR_LEN
constexpr size_t kMaxTailTokens = 20;    // llama.cpp's MAX_SEQ_LEN

absl::Status AddBreaker(const Tokenizer& tok, const std::string& breaker, DryBreakers* out) {
  for (int32_t id = 0; id < tok.n_vocab(); ++id) {
    const std::string& word = tok.Piece(id);
    if (word.find(breaker) != std::string::npos) {
      out->sequences.emplace(id, std::vector<int32_t>());
      continue;
    }
    // Every place where the word ends with a prefix of the breaker: the
    // rest of the breaker, tokenized, must follow.
    for (size_t pos = word.find(breaker[0]); pos != std::string::npos;
         pos = word.find(breaker[0], pos + 1)) {
      const size_t len = word.size() - pos;
      if (len >= breaker.size() || word.compare(pos, len, breaker, 0, len) != 0) continue;
      ASSIGN_OR_RETURN(std::vector<int32_t> tail,
                       tok.Encode(breaker.substr(len), /*parse_special=*/false,
                                  /*add_special=*/false));
      if (tail.size() > kMaxTailTokens) tail.resize(kMaxTailTokens);
      auto range = out->sequences.equal_range(id);
      const bool seen = std::any_of(range.first, range.second,
                                    [&](const auto& kv) { return kv.second == tail; });
      if (!seen) out->sequences.emplace(id, std::move(tail));
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::shared_ptr<const DryBreakers>> DryBreakers::FromStrings(
    const Tokenizer& tok, const std::vector<std::string>& breakers) {
  auto out = std::make_shared<DryBreakers>();
  for (std::string b : breakers) {
    if (b.empty()) continue;
    if (b.size() > kMaxBreakerBytes) b.resize(kMaxBreakerBytes);
    RETURN_IF_ERROR(AddBreaker(tok, b, out.get()));
  }
  return std::shared_ptr<const DryBreakers>(std::move(out));
}

void DryPenalize(const DryParams& p, absl::Span<const int32_t> history,
                 absl::flat_hash_map<int32_t, int>* scratch,
                 const std::function<void(int32_t, float)>& apply) {
  if (!p.active()) return;
  const int64_t last_n = p.penalty_last_n < 0 ? INT64_MAX : p.penalty_last_n;
  const int64_t w = std::min<int64_t>(static_cast<int64_t>(history.size()), last_n);
  if (w <= p.allowed_length) return;
  // h(i): the i-th most recent token.
  auto h = [&](int64_t i) { return history[history.size() - 1 - static_cast<size_t>(i)]; };
  // The closest sequence breaker limits how far back a repeat may reach.
  int64_t limit = w;
  if (p.breakers != nullptr) {
    for (int64_t i = 0; i < w; ++i) {
      auto range = p.breakers->sequences.equal_range(h(i));
      int64_t longest = -1;
      for (auto it = range.first; it != range.second; ++it) {
        const int64_t len = static_cast<int64_t>(it->second.size());
        if (len <= longest || len > i) continue;
        bool match = true;
        for (int64_t o = 0; o < len && match; ++o) match = it->second[o] == h(i - o - 1);
        if (match) longest = len;
      }
      if (longest >= 0) {
        limit = i - longest;
        break;
      }
    }
  }
  if (limit < p.allowed_length) return;
  // The longest repeat each next token would extend.
  scratch->clear();
  for (int64_t k = 1; k < w; ++k) {
    int64_t n = 0;
    while (n + k < w && h(n) == h(n + k)) ++n;
    n = std::min(n, limit);
    if (n < p.allowed_length) continue;
    int& longest = (*scratch)[h(k - 1)];
    longest = std::max(longest, static_cast<int>(n));
  }
  // Keeps base ^ exponent a finite float (llama.cpp's FLOAT_MAX_LOG).
  const int max_exponent =
      p.base > 1.000001f ? static_cast<int>(88.7228391f / std::log(p.base)) : 0;
  for (const auto& [token, repeat] : *scratch) {
    if (p.breakers != nullptr) {
      auto range = p.breakers->sequences.equal_range(token);
      if (std::any_of(range.first, range.second,
                      [](const auto& kv) { return kv.second.empty(); })) {
        continue;  // a breaker by itself is never penalized
      }
    }
    int exponent = repeat - p.allowed_length;
    if (max_exponent > 0 && exponent > max_exponent) exponent = max_exponent;
    apply(token, p.multiplier * std::pow(p.base, static_cast<float>(exponent)));
  }
}

}  // namespace moesplit
