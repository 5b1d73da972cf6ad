#include "common/chat/reasoning.h"

#include <algorithm>

namespace moesplit::chat {
namespace {

bool IsWs(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v'; }

std::string_view LStrip(std::string_view s) {
  size_t i = 0;
  while (i < s.size() && IsWs(s[i])) ++i;
  return s.substr(i);
}

std::string_view RStrip(std::string_view s) {
  size_t e = s.size();
  while (e > 0 && IsWs(s[e - 1])) --e;
  return s.substr(0, e);
}

bool StartsWith(std::string_view s, std::string_view p) { return s.substr(0, p.size()) == p; }

// Length of the longest proper suffix of s that is a prefix of tag.
size_t PartialTagSuffix(std::string_view s, std::string_view tag) {
  for (size_t n = std::min(s.size(), tag.size() - 1); n > 0; --n) {
    if (s.substr(s.size() - n) == tag.substr(0, n)) return n;
  }
  return 0;
}

}  // namespace

ReasoningSplit SplitReasoning(std::string_view text, bool starts_in_reasoning,
                              const ReasoningTags& tags) {
  ReasoningSplit out;
  std::string_view rest = LStrip(text);
  const bool explicit_open = !tags.open.empty() && StartsWith(rest, tags.open);
  if (!starts_in_reasoning && !explicit_open) {
    out.content = std::string(text);
    return out;
  }
  if (explicit_open) rest.remove_prefix(tags.open.size());
  const size_t close = tags.close.empty() ? std::string_view::npos : rest.find(tags.close);
  if (close == std::string_view::npos) {
    out.reasoning_content = std::string(RStrip(LStrip(rest)));
    return out;
  }
  out.reasoning_content = std::string(RStrip(LStrip(rest.substr(0, close))));
  out.content = std::string(LStrip(rest.substr(close + tags.close.size())));
  return out;
}

bool PromptOpensReasoning(std::string_view prompt, const ReasoningTags& tags) {
  if (tags.open.empty()) return false;
  const size_t open = prompt.rfind(tags.open);
  if (open == std::string_view::npos) return false;
  std::string_view after = prompt.substr(open + tags.open.size());
  return LStrip(after).empty();
}

ReasoningStream::ReasoningStream(bool starts_in_reasoning, ReasoningTags tags)
    : tags_(std::move(tags)), forced_(starts_in_reasoning) {}

ReasoningSplit ReasoningStream::Push(std::string_view delta) {
  ReasoningSplit out;
  pending_.append(delta.data(), delta.size());
  Process(&out);
  return out;
}

void ReasoningStream::Process(ReasoningSplit* out) {
  // Each step either changes state or returns, so this terminates.
  while (true) {
    const State before = state_;
    switch (state_) {
      case State::kStart: ProcessStart(out); break;
      case State::kReasoning: ProcessReasoning(out); break;
      case State::kContentLead: {
        std::string_view rest = LStrip(pending_);
        if (rest.empty()) {
          pending_.clear();
          return;
        }
        pending_ = std::string(rest);
        state_ = State::kContent;
        break;
      }
      case State::kContent:
        out->content += pending_;
        pending_.clear();
        return;
    }
    if (state_ == before) return;
  }
}

void ReasoningStream::ProcessStart(ReasoningSplit* out) {
  std::string_view rest = LStrip(pending_);
  const std::string_view open = tags_.open;
  if (!open.empty() && StartsWith(rest, open)) {
    pending_ = std::string(rest.substr(open.size()));
    state_ = State::kReasoning;
    return;
  }
  if (!open.empty() && rest.size() < open.size() && StartsWith(open, rest)) return;  // undecided
  if (forced_) {
    pending_ = std::string(rest);
    state_ = State::kReasoning;
  } else {
    state_ = State::kContent;
  }
  (void)out;
}

void ReasoningStream::EmitReasoning(std::string_view text, ReasoningSplit* out) {
  if (!reasoning_started_) text = LStrip(text);
  if (text.empty()) return;
  out->reasoning_content.append(text.data(), text.size());
  reasoning_started_ = true;
}

void ReasoningStream::ProcessReasoning(ReasoningSplit* out) {
  const size_t close = tags_.close.empty() ? std::string::npos : pending_.find(tags_.close);
  if (close != std::string::npos) {
    EmitReasoning(RStrip(std::string_view(pending_).substr(0, close)), out);
    pending_.erase(0, close + tags_.close.size());
    state_ = State::kContentLead;
    return;
  }
  // Hold back a possible partial close tag and the whitespace before it.
  size_t cut = pending_.size() - (tags_.close.empty() ? 0 : PartialTagSuffix(pending_, tags_.close));
  while (cut > 0 && IsWs(pending_[cut - 1])) --cut;
  EmitReasoning(std::string_view(pending_).substr(0, cut), out);
  pending_.erase(0, cut);
}

ReasoningSplit ReasoningStream::Finish() {
  ReasoningSplit out;
  switch (state_) {
    case State::kStart:
      if (forced_) {
        EmitReasoning(RStrip(pending_), &out);
      } else {
        out.content = pending_;
      }
      break;
    case State::kReasoning: EmitReasoning(RStrip(pending_), &out); break;
    case State::kContentLead:
    case State::kContent: out.content = pending_; break;
  }
  pending_.clear();
  return out;
}

}  // namespace moesplit::chat
