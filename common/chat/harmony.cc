#include "common/chat/harmony.h"

#include <algorithm>

namespace moesplit::chat {
namespace {

constexpr std::string_view kChannel = "<|channel|>";
constexpr std::string_view kMessage = "<|message|>";
constexpr std::string_view kStart = "<|start|>";
constexpr std::string_view kEnd = "<|end|>";
constexpr std::string_view kCall = "<|call|>";
constexpr std::string_view kRecipient = " to=";

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

// Where the body in `p` ends (<|end|> or <|call|>) and that tag's length.
std::pair<size_t, size_t> BodyEnd(std::string_view p) {
  const size_t end = p.find(kEnd), call = p.find(kCall);
  if (call < end) return {call, kCall.size()};
  return {end, kEnd.size()};
}

}  // namespace

std::vector<HarmonyCall> HarmonyCalls(std::string_view text) {
  HarmonyStream stream;
  stream.Push(text);
  stream.Finish();
  return stream.calls();
}

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

void HarmonyStream::Emit(std::string_view text, ReasoningSplit* out) {
  if (text.empty()) return;
  switch (part_) {
    case Part::kReasoning: out->reasoning_content.append(text); break;
    case Part::kContent: out->content.append(text); break;
    case Part::kNone: calls_.back().body.append(text); break;
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
        // The generation prompt ends at the role: a header may go on
        // with the recipient (" to=functions.x<|channel|>...").
        if (StartsWith(p, kChannel) || StartsWith(p, kRecipient)) {
          state_ = State::kHeader;
          continue;
        }
        if (!final && (CouldBecome(p, kChannel) || CouldBecome(p, kStart) ||
                       CouldBecome(p, kRecipient))) {
          return;
        }
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
        if (const size_t to = header.find("to="); to != std::string_view::npos) {
          part_ = Part::kNone;  // addressed to a tool: a call, not text
          std::string_view r = header.substr(to + 3);
          r = r.substr(0, std::min(r.find(' '), r.find('<')));
          calls_.push_back({std::string(r), ""});
        } else {
          part_ = channel == "analysis" ? Part::kReasoning : Part::kContent;
        }
        pending_.erase(0, pos + kMessage.size());
        state_ = State::kBody;
        continue;
      }
      case State::kBody: {
        const auto [pos, tag] = BodyEnd(p);
        if (pos != std::string_view::npos) {
          Emit(p.substr(0, pos), out);
          pending_.erase(0, pos + tag);
          state_ = State::kBetween;
          continue;
        }
        const size_t keep =
            final ? 0 : std::max(PartialTagSuffix(p, kEnd), PartialTagSuffix(p, kCall));
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

ReasoningTags ReasoningTagsFor(OutputFormat format) {
  switch (format) {
    case OutputFormat::kThink: return ReasoningTags();
    case OutputFormat::kThoughtChannel: return ReasoningTags{"<|channel>thought", "<channel|>"};
    case OutputFormat::kHarmony: break;
  }
  return ReasoningTags{"", ""};
}

bool PromptOpensReasoning(std::string_view prompt, OutputFormat format) {
  return format != OutputFormat::kHarmony && PromptOpensReasoning(prompt, ReasoningTagsFor(format));
}

ReasoningSplit SplitOutput(std::string_view text, OutputFormat format, bool starts_in_reasoning) {
  return format == OutputFormat::kHarmony
             ? SplitHarmony(text)
             : SplitReasoning(text, starts_in_reasoning, ReasoningTagsFor(format));
}

OutputStream::OutputStream(OutputFormat format, bool starts_in_reasoning)
    : stream_(format == OutputFormat::kHarmony
                  ? std::variant<ReasoningStream, HarmonyStream>(HarmonyStream())
                  : std::variant<ReasoningStream, HarmonyStream>(
                        ReasoningStream(starts_in_reasoning, ReasoningTagsFor(format)))) {}

ReasoningSplit OutputStream::Push(std::string_view delta) {
  return std::visit([&](auto& s) { return s.Push(delta); }, stream_);
}

ReasoningSplit OutputStream::Finish() {
  return std::visit([](auto& s) { return s.Finish(); }, stream_);
}

}  // namespace moesplit::chat
