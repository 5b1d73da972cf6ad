#include "common/chat/harmony.h"

#include <random>
#include <string>

#include "gtest/gtest.h"

namespace moesplit::chat {
namespace {

struct HarmonyCase {
  const char* text;
  const char* reasoning;
  const char* content;
};

const HarmonyCase kCases[] = {
    // What gpt-oss writes after "<|start|>assistant".
    {"<|channel|>analysis<|message|>User asks 2+2.<|end|><|start|>assistant<|channel|>final"
     "<|message|>4",
     "User asks 2+2.", "4"},
    // Low reasoning effort: the final channel only.
    {"<|channel|>final<|message|>Hello there", "", "Hello there"},
    // Generation stopped while reasoning.
    {"<|channel|>analysis<|message|>thinking about", "thinking about", ""},
    // A header cut off: nothing of it is shown.
    {"<|channel|>analysis<|message|>a<|end|><|start|>assistant<|chan", "a", ""},
    // A tool call (a recipient): neither reasoning nor content.
    {"<|channel|>analysis<|message|>need weather<|end|><|start|>assistant<|channel|>commentary "
     "to=functions.get_weather <|constrain|>json<|message|>{\"city\":\"Paris\"}",
     "need weather", ""},
    {"<|start|>assistant to=functions.f<|channel|>commentary json<|message|>{}", "", ""},
    // Commentary without a recipient is shown.
    {"<|channel|>commentary<|message|>Working on it.<|end|><|start|>assistant<|channel|>final"
     "<|message|>Done.",
     "", "Working on it.Done."},
    // Not harmony at all: content unchanged (also text that only looks like a tag's start).
    {"Plain answer", "", "Plain answer"},
    {"<|chan", "", "<|chan"},
    {"<b>bold</b>", "", "<b>bold</b>"},
    // A body that ends in a partial tag at the end of generation keeps it.
    {"<|channel|>final<|message|>x <|en", "", "x <|en"},
    {"", "", ""},
};

TEST(HarmonyTest, SplitFollowsTheRule) {
  for (const HarmonyCase& c : kCases) {
    const ReasoningSplit s = SplitHarmony(c.text);
    EXPECT_EQ(s.reasoning_content, c.reasoning) << c.text;
    EXPECT_EQ(s.content, c.content) << c.text;
  }
}

// However the text is cut into deltas, the stream gives the split's parts.
TEST(HarmonyTest, StreamEqualsSplitForEveryCut) {
  std::mt19937 rng(5);
  for (const HarmonyCase& c : kCases) {
    const std::string text = c.text;
    for (int trial = 0; trial < 200; ++trial) {
      HarmonyStream stream;
      ReasoningSplit got;
      for (size_t i = 0; i < text.size();) {
        const size_t n = std::min<size_t>(text.size() - i, 1 + rng() % 7);
        const ReasoningSplit d = stream.Push(std::string_view(text).substr(i, n));
        got.reasoning_content += d.reasoning_content;
        got.content += d.content;
        i += n;
      }
      const ReasoningSplit d = stream.Finish();
      got.reasoning_content += d.reasoning_content;
      got.content += d.content;
      ASSERT_EQ(got.reasoning_content, c.reasoning) << text;
      ASSERT_EQ(got.content, c.content) << text;
    }
  }
}

// A stream shows reasoning as it arrives: only a possible partial tag waits.
TEST(HarmonyTest, StreamHoldsBackOnlyAPartialTag) {
  HarmonyStream stream;
  EXPECT_EQ(stream.Push("<|channel|>analysis<|mess").reasoning_content, "");
  EXPECT_EQ(stream.Push("age|>one two").reasoning_content, "one two");
  EXPECT_EQ(stream.Push(" three<|e").reasoning_content, " three");
  const ReasoningSplit d = stream.Push("nd|><|start|>assistant<|channel|>final<|message|>A");
  EXPECT_EQ(d.reasoning_content, "");
  EXPECT_EQ(d.content, "A");
}

// Gemma 4's thought channel (OutputFormat::kThoughtChannel), as llama.cpp's
// gemma4 parser reads it: the reasoning between "<|channel>thought" and
// "<channel|>", an empty one (thinking off, or a budget of 0), none at all;
// streamed in random pieces it splits the same.
TEST(HarmonyTest, ThoughtChannelSplitsWholeAndStreamed) {
  struct Case {
    std::string text, reasoning, content;
  };
  const std::vector<Case> cases = {
      {"<|channel>thought\nI'm\nthinking<channel|>Hello, world!\nWhat's up?", "I'm\nthinking",
       "Hello, world!\nWhat's up?"},
      {"<|channel>thought<channel|>Hello", "", "Hello"},
      {"<|channel>thought\n<channel|>Hello", "", "Hello"},
      {"Hello, world!", "", "Hello, world!"},
      {"<|channel>thought\ncut off", "cut off", ""},
      {"<think>not Gemma's</think>x", "", "<think>not Gemma's</think>x"},
  };
  std::mt19937 rng(7);
  for (const Case& c : cases) {
    const ReasoningSplit whole = SplitOutput(c.text, OutputFormat::kThoughtChannel, false);
    EXPECT_EQ(whole.reasoning_content, c.reasoning) << c.text;
    EXPECT_EQ(whole.content, c.content) << c.text;
    for (int round = 0; round < 20; ++round) {
      OutputStream stream(OutputFormat::kThoughtChannel, false);
      ReasoningSplit got;
      for (size_t i = 0; i < c.text.size();) {
        const size_t n = std::min<size_t>(c.text.size() - i, 1 + rng() % 5);
        const ReasoningSplit d = stream.Push(std::string_view(c.text).substr(i, n));
        got.reasoning_content += d.reasoning_content;
        got.content += d.content;
        i += n;
      }
      const ReasoningSplit d = stream.Finish();
      EXPECT_EQ(got.reasoning_content + d.reasoning_content, c.reasoning) << c.text;
      EXPECT_EQ(got.content + d.content, c.content) << c.text;
    }
  }
  EXPECT_TRUE(PromptOpensReasoning("<|turn>model\n<|channel>thought\n", OutputFormat::kThoughtChannel));
  EXPECT_FALSE(PromptOpensReasoning("<|turn>model\n<|channel>thought\n<channel|>", OutputFormat::kThoughtChannel));
  EXPECT_FALSE(PromptOpensReasoning("<think>\n", OutputFormat::kHarmony));
}

}  // namespace
}  // namespace moesplit::chat
