#include "common/chat/reasoning.h"

#include <random>
#include <string>

#include "gtest/gtest.h"

namespace moesplit::chat {
namespace {

struct SplitCase {
  const char* text;
  bool starts_in_reasoning;
  const char* reasoning;
  const char* content;
};

const SplitCase kCases[] = {
    {"Hello", false, "", "Hello"},
    {"  Hello", false, "", "  Hello"},
    {"<think>\nplan\n</think>\n\nAnswer", false, "plan", "Answer"},
    {"\n<think>a b</think>c", false, "a b", "c"},
    {"<think>\n\n</think>\n\nAnswer", false, "", "Answer"},
    {"<think>unfinished thought", false, "unfinished thought", ""},
    {"Answer <think>not reasoning</think>", false, "", "Answer <think>not reasoning</think>"},
    {"<thin", false, "", "<thin"},
    // The prompt opened the block (Qwen3.5 / DeepSeek-V3.1 with thinking on).
    {"plan\n</think>\n\nAnswer", true, "plan", "Answer"},
    {"\n</think>Answer", true, "", "Answer"},
    {"still thinking  ", true, "still thinking", ""},
    {"<think>dup</think>x", true, "dup", "x"},
    {"a</think>b</think>c", true, "a", "b</think>c"},
    {"", true, "", ""},
    {"", false, "", ""},
};

TEST(ReasoningTest, SplitFollowsTheRule) {
  for (const SplitCase& c : kCases) {
    ReasoningSplit s = SplitReasoning(c.text, c.starts_in_reasoning);
    EXPECT_EQ(s.reasoning_content, c.reasoning) << c.text << " / " << c.starts_in_reasoning;
    EXPECT_EQ(s.content, c.content) << c.text << " / " << c.starts_in_reasoning;
  }
}

TEST(ReasoningTest, PromptOpensReasoning) {
  EXPECT_TRUE(PromptOpensReasoning("<|im_start|>assistant\n<think>\n"));
  EXPECT_TRUE(PromptOpensReasoning("<｜Assistant｜><think>"));
  EXPECT_FALSE(PromptOpensReasoning("<|im_start|>assistant\n<think>\n\n</think>\n\n"));
  EXPECT_FALSE(PromptOpensReasoning("<|im_start|>assistant\n"));
  EXPECT_FALSE(PromptOpensReasoning("<think>x</think> then <think>y"));  // text after the tag
}

TEST(ReasoningTest, CustomTags) {
  ReasoningTags tags{"[R]", "[/R]"};
  ReasoningSplit s = SplitReasoning("[R] why [/R] what", false, tags);
  EXPECT_EQ(s.reasoning_content, "why");
  EXPECT_EQ(s.content, "what");
}

// Streaming equals the one-shot split for every way of cutting the text.
TEST(ReasoningTest, StreamMatchesSplitForRandomCuts) {
  std::mt19937 rng(7);
  const char* extra[] = {"  <think>  x y  </thi", " </think>  \n z", "<think>\n\n</think>\n\nAnswer",
                         "a</think", "<th", "<think>a</think></think>"};
  std::vector<std::pair<std::string, bool>> inputs;
  for (const SplitCase& c : kCases) inputs.emplace_back(c.text, c.starts_in_reasoning);
  for (const char* e : extra) {
    inputs.emplace_back(e, false);
    inputs.emplace_back(e, true);
  }
  for (const auto& [text, forced] : inputs) {
    const ReasoningSplit expected = SplitReasoning(text, forced);
    for (int trial = 0; trial < 50; ++trial) {
      ReasoningStream stream(forced);
      ReasoningSplit got;
      size_t pos = 0;
      while (pos < text.size()) {
        const size_t n = std::min(text.size() - pos, static_cast<size_t>(rng() % 4));
        ReasoningSplit d = stream.Push(std::string_view(text).substr(pos, n));
        got.reasoning_content += d.reasoning_content;
        got.content += d.content;
        pos += n;
      }
      ReasoningSplit d = stream.Finish();
      got.reasoning_content += d.reasoning_content;
      got.content += d.content;
      ASSERT_EQ(got.reasoning_content, expected.reasoning_content) << text << " forced=" << forced;
      ASSERT_EQ(got.content, expected.content) << text << " forced=" << forced;
    }
  }
}

TEST(ReasoningTest, StreamEmitsEarly) {
  ReasoningStream stream(true);
  EXPECT_EQ(stream.Push("Let me think").reasoning_content, "Let me think");
  ReasoningSplit d = stream.Push(" more </th");
  EXPECT_EQ(d.reasoning_content, " more");  // " </th" held back: may be the close tag
  d = stream.Push("ink>\n\nHi");
  EXPECT_EQ(d.reasoning_content, "");
  EXPECT_EQ(d.content, "Hi");
  EXPECT_EQ(stream.Push(" there").content, " there");
}

}  // namespace
}  // namespace moesplit::chat
