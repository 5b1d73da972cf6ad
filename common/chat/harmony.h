// Splitting gpt-oss output (OpenAI's harmony format) into reasoning and the
// answer.
//
// After the generation prompt "<|start|>assistant" a gpt-oss model writes
// one or more messages, each a header, "<|message|>", a body and "<|end|>"
// (the last one ends with <|return|> or <|call|>, which end generation and
// are not part of the text):
//   <|channel|>analysis<|message|>REASONING<|end|>
//   <|start|>assistant<|channel|>final<|message|>ANSWER
// A header is the role (absent right after the generation prompt), then
// "<|channel|>NAME", optionally " to=RECIPIENT" and "<|constrain|>TYPE";
// the recipient may also come first (" to=functions.x<|channel|>...").
//
// The rule (SplitHarmony):
//   1. Bodies of the `analysis` channel are reasoning_content; bodies of
//      every other channel (`final`, `commentary`) are content, except
//      messages addressed to a recipient (" to=functions.x": tool calls),
//      which are neither: HarmonyStream::calls() / HarmonyCalls() keep them
//      (recipient and body) for the tool-call parser (tool_calls.h).
//      Consecutive bodies of the same part are joined as written.
//   2. Text that does not start with a header (a model that ignores the
//      format) is content, unchanged.
//   3. A body cut off by the end of generation is kept as far as it goes;
//      a header cut off is dropped. A body ends at <|end|> or <|call|>.
//
// HarmonyStream applies the same rule to a stream of text deltas: the
// concatenation of what it returns (up to and including Finish()) equals
// SplitHarmony of the concatenated input, however the input was cut. It
// holds back only a possible partial "<|...|>" tag. Not thread-safe.
#pragma once

#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "common/chat/reasoning.h"

namespace moesplit::chat {

ReasoningSplit SplitHarmony(std::string_view text);

// A message addressed to a recipient (" to=functions.get_weather"):
// `recipient` is what follows "to=" up to a space or a tag.
struct HarmonyCall {
  std::string recipient;
  std::string body;
};

// The messages of `text` addressed to a recipient, in order.
std::vector<HarmonyCall> HarmonyCalls(std::string_view text);

class HarmonyStream {
 public:
  HarmonyStream() = default;

  // Newly classified text; either part may be empty.
  ReasoningSplit Push(std::string_view delta);
  // Flushes what was held back at the end of generation. Push after Finish
  // is not allowed.
  ReasoningSplit Finish();
  // The messages addressed to a recipient so far (the last one's body may
  // still grow).
  const std::vector<HarmonyCall>& calls() const { return calls_; }

 private:
  enum class State { kStart, kHeader, kBody, kBetween, kPlain };
  enum class Part { kReasoning, kContent, kNone };
  void Process(bool final, ReasoningSplit* out);
  void Emit(std::string_view text, ReasoningSplit* out);

  State state_ = State::kStart;
  Part part_ = Part::kContent;
  std::string pending_;
  std::vector<HarmonyCall> calls_;
};

// A model's output split as its chat format says: harmony (gpt-oss), or a
// reasoning block (ReasoningStream; `starts_in_reasoning` as there) with
// the format's tags: <think>…</think> (kThink), or Gemma 4's thought channel
// "<|channel>thought" … "<channel|>" (kThoughtChannel).
enum class OutputFormat { kThink, kHarmony, kThoughtChannel };

// The reasoning block's tags of a format (harmony: none, both empty).
ReasoningTags ReasoningTagsFor(OutputFormat format);
// PromptOpensReasoning with the format's tags (harmony: false).
bool PromptOpensReasoning(std::string_view prompt, OutputFormat format);

ReasoningSplit SplitOutput(std::string_view text, OutputFormat format, bool starts_in_reasoning);

class OutputStream {
 public:
  OutputStream(OutputFormat format, bool starts_in_reasoning);
  ReasoningSplit Push(std::string_view delta);
  ReasoningSplit Finish();

 private:
  std::variant<ReasoningStream, HarmonyStream> stream_;
};

}  // namespace moesplit::chat
