// Splitting model output into reasoning ("thinking") and the answer, for
// models that wrap their reasoning in <think>…</think> (Qwen3, Qwen3.5,
// DeepSeek-R1/V3.1, …).
//
// The rule (SplitReasoning):
//   1. The output is "in reasoning from the start" when starts_in_reasoning
//      is true (the rendered prompt itself opened the block, as Qwen3.5 and
//      DeepSeek-V3.1 do with thinking on: PromptOpensReasoning(prompt) tells),
//      or when the output, after leading whitespace, begins with the open
//      tag. In the first case a redundant leading open tag is skipped too.
//   2. Then reasoning_content is everything up to the first close tag,
//      stripped of surrounding whitespace, and content is everything after
//      that close tag with its leading whitespace removed. Without a close
//      tag (generation stopped while thinking) all of it is reasoning and
//      content is empty.
//   3. Otherwise there is no reasoning: content is the output unchanged
//      (an open tag later in the text is ordinary content).
// Whitespace here is ASCII (space, \t, \n, \r, \f, \v).
//
// ReasoningStream applies the same rule to a stream of text deltas: the
// concatenation of the deltas it returns (up to and including Finish())
// equals SplitReasoning of the concatenated input, however the input was cut.
// It holds back only what it cannot classify yet (a possible partial tag,
// whitespace that may turn out to be trailing). Not thread-safe.
#pragma once

#include <string>
#include <string_view>

namespace moesplit::chat {

struct ReasoningTags {
  std::string open = "<think>";
  std::string close = "</think>";
};

struct ReasoningSplit {
  std::string reasoning_content;
  std::string content;
};

ReasoningSplit SplitReasoning(std::string_view text, bool starts_in_reasoning = false,
                              const ReasoningTags& tags = {});

// True when the prompt ends inside an open reasoning block: its last open
// tag has no close tag after it and only whitespace follows it.
bool PromptOpensReasoning(std::string_view prompt, const ReasoningTags& tags = {});

class ReasoningStream {
 public:
  explicit ReasoningStream(bool starts_in_reasoning, ReasoningTags tags = {});

  // Newly classified text; either part may be empty.
  ReasoningSplit Push(std::string_view delta);
  // Flushes what was held back at the end of generation. Push after Finish
  // is not allowed.
  ReasoningSplit Finish();

 private:
  enum class State { kStart, kReasoning, kContentLead, kContent };
  void Process(ReasoningSplit* out);
  void ProcessStart(ReasoningSplit* out);
  void ProcessReasoning(ReasoningSplit* out);
  void EmitReasoning(std::string_view text, ReasoningSplit* out);

  ReasoningTags tags_;
  bool forced_;
  State state_ = State::kStart;
  bool reasoning_started_ = false;  // some reasoning text was emitted
  std::string pending_;
};

}  // namespace moesplit::chat
