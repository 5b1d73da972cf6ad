#include "common/chat/harmony.h"

#include <algorithm>

namespace moesplit::chat {
namespace {

constexpr std::string_view kChannel = "<|channel|>";
constexpr std::string_view kMessage = "<|message|>";
constexpr std::string_view kStart = "<|start|>";
constexpr std::string_view kEnd = "<|end|>";

bool StartsWith(std::string_view s, std::string_view prefix) {
  return s.substr(0, prefix.size()) == prefix;
}

// `s` could still become `tag` (it is a proper prefix of it).
bool CouldBecome(std::string_view s, std::string_view tag) {
  return s.size() < tag.size() && StartsWith(tag, s);
}

// The length of the longest proper prefix of `tag` that ends `s`.
size_t PartialTagSuffix(std::string_view s, std::string_view tag) {
  for (size_t k = std::min(s.size(), tag.size() - 1); k > 0; --k) {
    if (s.substr(s.size() - k) == tag.substr(0, k)) return k;
  }
  return 0;
}

}  // namespace

ReasoningSplit SplitHarmony(std::string_view text) {
  HarmonyStream stream;
  ReasoningSplit out = stream.Push(text);
  ReasoningSplit rest = stream.Finish();
  out.reasoning_content += rest.reasoning_content;
  out.content += rest.content;
  return out;
}

ReasoningSplit HarmonyStream::Push(std::string_view delta) {
  pending_.append(delta);
  ReasoningSplit out;
  Process(false, &out);
  return out;
}

ReasoningSplit HarmonyStream::Finish() {
  ReasoningSplit out;
  Process(true, &out);
  pending_.clear();
  return out;
}

void HarmonyStream::Emit(std::string_view text, ReasoningSplit* out) const {
  if (text.empty()) return;
  switch (part_) {
    case Part::kReasoning: out->reasoning_content.append(text); break;
    case Part::kContent: out->content.append(text); break;
    case Part::kNone: break;
  }
}

void HarmonyStream::Process(bool final, ReasoningSplit* out) {
  for (;;) {
    const std::string_view p = pending_;
    switch (state_) {
      case State::kStart:
        if (p.empty()) return;
        if (StartsWith(p, kStart)) {
          pending_.erase(0, kStart.size());
          state_ = State::kHeader;
          continue;
        }
        if (StartsWith(p, kChannel)) {
          state_ = State::kHeader;
          continue;
        }
        if (!final && (CouldBecome(p, kChannel) || CouldBecome(p, kStart))) return;
        state_ = State::kPlain;
        part_ = Part::kContent;
        continue;
      case State::kPlain:
        Emit(p, out);
        pending_.clear();
        return;
      case State::kHeader: {
        const size_t pos = p.find(kMessage);
        if (pos == std::string_view::npos) {
          if (final) pending_.clear();  // a header cut off: nothing to show
          return;
        }
        const std::string_view header = p.substr(0, pos);
        std::string_view channel;
        if (const size_t c = header.find(kChannel); c != std::string_view::npos) {
          channel = header.substr(c + kChannel.size());
          channel = channel.substr(0, std::min(channel.find(' '), channel.find('<')));
        }
        if (header.find("to=") != std::string_view::npos) {
          part_ = Part::kNone;  // addressed to a tool: a call, not text
        } else {
          part_ = channel == "analysis" ? Part::kReasoning : Part::kContent;
        }
        pending_.erase(0, pos + kMessage.size());
        state_ = State::kBody;
        continue;
      }
      case State::kBody: {
        const size_t pos = p.find(kEnd);
        if (pos != std::string_view::npos) {
          Emit(p.substr(0, pos), out);
          pending_.erase(0, pos + kEnd.size());
          state_ = State::kBetween;
          continue;
        }
        const size_t keep = final ? 0 : PartialTagSuffix(p, kEnd);
        Emit(p.substr(0, p.size() - keep), out);
        pending_.erase(0, p.size() - keep);
        return;
      }
      case State::kBetween:
        if (p.empty()) return;
        if (StartsWith(p, kStart)) {
          pending_.erase(0, kStart.size());
          state_ = State::kHeader;
          continue;
        }
        if (!final && CouldBecome(p, kStart)) return;
        // Text after a message that opens none: shown as it is.
        state_ = State::kPlain;
        part_ = Part::kContent;
        continue;
    }
  }
}

ReasoningSplit SplitOutput(std::string_view text, OutputFormat format, bool starts_in_reasoning) {
  return format == OutputFormat::kHarmony ? SplitHarmony(text)
                                          : SplitReasoning(text, starts_in_reasoning);
}

OutputStream::OutputStream(OutputFormat format, bool starts_in_reasoning)
    : stream_(format == OutputFormat::kHarmony
                  ? std::variant<ReasoningStream, HarmonyStream>(HarmonyStream())
                  : std::variant<ReasoningStream, HarmonyStream>(
                        ReasoningStream(starts_in_reasoning))) {}

ReasoningSplit OutputStream::Push(std::string_view delta) {
  return std::visit([&](auto& s) { return s.Push(delta); }, stream_);
}

ReasoningSplit OutputStream::Finish() {
  return std::visit([](auto& s) { return s.Finish(); }, stream_);
}

}  // namespace moesplit::chat
