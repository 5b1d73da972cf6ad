// Tool-call families and parsers on realistic model outputs: single and
// parallel calls, reasoning before the call, malformed output (plain
// content), streams cut at every byte, and the family detection on the real
// templates of ../shared/fixtures/templates.
#include "common/chat/tool_calls.h"

#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "common/chat/chat_template.h"
#include "common/chat/reasoning.h"
#include "common/chat/testing/template_fixtures.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace moesplit::chat {
namespace {

using Json = nlohmann::ordered_json;
namespace fs = std::filesystem;

const Json& Tools() {
  static const Json* const kTools = new Json(Json::parse(R"([
    {"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object",
      "properties": {"city": {"type": "string"}, "days": {"type": "integer"},
                     "zip": {"type": "string"}}}}},
    {"type": "function", "function": {"name": "search_docs", "parameters": {"type": "object",
      "properties": {"query": {"type": "string"}, "filters": {"type": "object"}}}}}])"));
  return *kTools;
}

ToolCallConfig Config(ToolCallFamily f) {
  ToolCallConfig c;
  c.family = f;
  c.tools = Tools();
  return c;
}

struct Case {
  const char* label;
  ToolCallFamily family;
  std::string output;
  std::string content;                                      // expected
  std::vector<std::pair<std::string, std::string>> calls;  // name, arguments
};

std::vector<Case> Cases() {
  const std::string ds_b = "<｜tool▁calls▁begin｜>", ds_e = "<｜tool▁calls▁end｜>";
  const std::string dc_b = "<｜tool▁call▁begin｜>", dc_e = "<｜tool▁call▁end｜>",
                    sep = "<｜tool▁sep｜>";
  return {
      {"hermes single", ToolCallFamily::kHermes,
       "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Oslo\"}}\n</tool_call>",
       "", {{"get_weather", R"({"city":"Oslo"})"}}},
      {"hermes text then parallel", ToolCallFamily::kHermes,
       "Let me check.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": "
       "\"Oslo\", \"days\": 2}}\n</tool_call>\n<tool_call>\n{\"name\": \"search_docs\", "
       "\"arguments\": {\"query\": \"snow\"}}\n</tool_call>\n",
       "Let me check.\n",
       {{"get_weather", R"({"city":"Oslo","days":2})"}, {"search_docs", R"({"query":"snow"})"}}},
      {"hermes arguments as a string", ToolCallFamily::kHermes,
       "<tool_call>{\"name\": \"search_docs\", \"arguments\": \"{\\\"query\\\": \\\"x\\\"}\"}</tool_call>",
       "", {{"search_docs", R"({"query":"x"})"}}},
      {"hermes cut off after the body", ToolCallFamily::kHermes,
       "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Oslo\"}}\n", "",
       {{"get_weather", R"({"city":"Oslo"})"}}},
      {"hermes malformed json", ToolCallFamily::kHermes,
       "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": }\n</tool_call> ok",
       "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": }\n</tool_call> ok", {}},
      {"hermes unknown function", ToolCallFamily::kHermes,
       "<tool_call>{\"name\": \"rm_rf\", \"arguments\": {}}</tool_call>",
       "<tool_call>{\"name\": \"rm_rf\", \"arguments\": {}}</tool_call>", {}},
      {"hermes truncated json", ToolCallFamily::kHermes, "<tool_call>\n{\"name\": \"get_wea",
       "<tool_call>\n{\"name\": \"get_wea", {}},
      {"hermes no call", ToolCallFamily::kHermes, "The answer is <b>42</b> <tool",
       "The answer is <b>42</b> <tool", {}},
      {"qwen3-coder single", ToolCallFamily::kQwen3Coder,
       "<tool_call>\n<function=get_weather>\n<parameter=city>\nOslo\n</parameter>\n"
       "<parameter=days>\n3\n</parameter>\n<parameter=zip>\n0150\n</parameter>\n</function>\n"
       "</tool_call>",
       "", {{"get_weather", R"({"city":"Oslo","days":3,"zip":"0150"})"}}},
      {"qwen3-coder parallel, object parameter", ToolCallFamily::kQwen3Coder,
       "Checking both.\n\n<tool_call>\n<function=get_weather>\n<parameter=city>\nNew York\n"
       "</parameter>\n</function>\n</tool_call>\n<tool_call>\n<function=search_docs>\n"
       "<parameter=query>\n\"quoted\"\n</parameter>\n<parameter=filters>\n{\"team\": \"infra\"}\n"
       "</parameter>\n</function>\n</tool_call>",
       "Checking both.\n\n",
       {{"get_weather", R"({"city":"New York"})"},
        {"search_docs", R"({"query":"\"quoted\"","filters":{"team":"infra"}})"}}},
      {"qwen3-coder malformed", ToolCallFamily::kQwen3Coder,
       "<tool_call>\n<function=get_weather>\n<parameter=city>\nOslo\n</function>\n</tool_call>",
       "<tool_call>\n<function=get_weather>\n<parameter=city>\nOslo\n</function>\n</tool_call>", {}},
      {"deepseek single", ToolCallFamily::kDeepSeekV31,
       ds_b + dc_b + "get_weather" + sep + "{\"city\": \"Oslo\"}" + dc_e + ds_e, "",
       {{"get_weather", R"({"city":"Oslo"})"}}},
      {"deepseek text then parallel", ToolCallFamily::kDeepSeekV31,
       "Sure." + ds_b + dc_b + "get_weather" + sep + "{\"city\": \"Oslo\"}" + dc_e + dc_b +
           "search_docs" + sep + "{\"query\": \"q\"}" + dc_e + ds_e,
       "Sure.", {{"get_weather", R"({"city":"Oslo"})"}, {"search_docs", R"({"query":"q"})"}}},
      {"deepseek malformed", ToolCallFamily::kDeepSeekV31,
       ds_b + dc_b + "get_weather" + "{\"city\": \"Oslo\"}" + dc_e + ds_e,
       ds_b + dc_b + "get_weather" + "{\"city\": \"Oslo\"}" + dc_e + ds_e, {}},
      // GLM-4.5 / 4.6: values as written, JSON unless the schema says string.
      {"glm-4.5 single", ToolCallFamily::kGlm45,
       "<tool_call>get_weather\n<arg_key>city</arg_key>\n<arg_value>Oslo</arg_value>\n"
       "<arg_key>days</arg_key>\n<arg_value>3</arg_value>\n<arg_key>zip</arg_key>\n"
       "<arg_value>0150</arg_value>\n</tool_call>",
       "", {{"get_weather", R"({"city":"Oslo","days":3,"zip":"0150"})"}}},
      {"glm-4.5 text then parallel, object parameter", ToolCallFamily::kGlm45,
       "Checking both.\n<tool_call>get_weather\n<arg_key>city</arg_key>\n<arg_value>New York\n"
       "</arg_value>\n</tool_call>\n<tool_call>search_docs\n<arg_key>query</arg_key>\n"
       "<arg_value>\"quoted\"</arg_value>\n<arg_key>filters</arg_key>\n<arg_value>{\"team\": "
       "\"infra\"}</arg_value>\n</tool_call>",
       "Checking both.\n",
       {{"get_weather", R"({"city":"New York\n"})"},
        {"search_docs", R"({"query":"\"quoted\"","filters":{"team":"infra"}})"}}},
      {"glm-4.5 no arguments, cut off", ToolCallFamily::kGlm45, "<tool_call>search_docs\n", "",
       {{"search_docs", "{}"}}},
      {"glm-4.5 malformed", ToolCallFamily::kGlm45,
       "<tool_call>get_weather\n<arg_key>city</arg_key>\n<arg_value>Oslo\n</tool_call> ok",
       "<tool_call>get_weather\n<arg_key>city</arg_key>\n<arg_value>Oslo\n</tool_call> ok", {}},
      {"glm-4.5 unknown function", ToolCallFamily::kGlm45, "<tool_call>rm_rf</tool_call>",
       "<tool_call>rm_rf</tool_call>", {}},
      // GLM-4.7: the same without newlines.
      {"glm-4.7 parallel", ToolCallFamily::kGlm47,
       "<tool_call>get_weather<arg_key>city</arg_key><arg_value>Oslo</arg_value><arg_key>days"
       "</arg_key><arg_value>2</arg_value></tool_call><tool_call>search_docs<arg_key>query</arg_key>"
       "<arg_value>a < b</arg_value></tool_call>",
       "", {{"get_weather", R"({"city":"Oslo","days":2})"}, {"search_docs", R"({"query":"a < b"})"}}},
      {"glm-4.7 no call", ToolCallFamily::kGlm47, "The tag <tool_call is not closed",
       "The tag <tool_call is not closed", {}},
      // MiniMax-M2: every call in one block.
      {"minimax single", ToolCallFamily::kMiniMaxM2,
       "<minimax:tool_call>\n<invoke name=\"get_weather\">\n<parameter name=\"city\">Oslo"
       "</parameter>\n<parameter name=\"days\">3</parameter>\n</invoke>\n</minimax:tool_call>",
       "", {{"get_weather", R"({"city":"Oslo","days":3})"}}},
      {"minimax text then parallel", ToolCallFamily::kMiniMaxM2,
       "Both.\n<minimax:tool_call>\n<invoke name=\"get_weather\">\n<parameter name=\"zip\">0150"
       "</parameter>\n</invoke>\n<invoke name=\"search_docs\">\n<parameter name=\"query\">"
       "line 1\nline 2</parameter>\n<parameter name=\"filters\">{\"team\": \"a\"}</parameter>\n"
       "</invoke>\n</minimax:tool_call>",
       "Both.\n",
       {{"get_weather", R"({"zip":"0150"})"},
        {"search_docs", R"({"query":"line 1\nline 2","filters":{"team":"a"}})"}}},
      {"minimax no parameters, cut off", ToolCallFamily::kMiniMaxM2,
       "<minimax:tool_call>\n<invoke name=\"search_docs\">\n</invoke>\n", "",
       {{"search_docs", "{}"}}},
      {"minimax malformed", ToolCallFamily::kMiniMaxM2,
       "<minimax:tool_call>\n<invoke name=\"get_weather\">\n<parameter name=\"city\">Oslo\n"
       "</invoke>\n</minimax:tool_call>",
       "<minimax:tool_call>\n<invoke name=\"get_weather\">\n<parameter name=\"city\">Oslo\n"
       "</invoke>\n</minimax:tool_call>",
       {}},
      // Gemma 4: one call per block, Gemma's dictionary syntax.
      {"gemma4 single", ToolCallFamily::kGemma4,
       "<|tool_call>call:get_weather{city:<|\"|>Oslo<|\"|>,days:3}<tool_call|>", "",
       {{"get_weather", R"({"city":"Oslo","days":3})"}}},
      {"gemma4 text then parallel", ToolCallFamily::kGemma4,
       "Both.\n<|tool_call>call:get_weather{zip:<|\"|>0150<|\"|>}<tool_call|><|tool_call>call:search_docs"
       "{query:<|\"|>a, b: {c}<|\"|>,filters:{team:<|\"|>infra<|\"|>,tags:[<|\"|>x<|\"|>, 2,true,null],"
       "depth:-1.5e3, none:{}}}<tool_call|>",
       "Both.\n",
       {{"get_weather", R"({"zip":"0150"})"},
        {"search_docs",
         R"({"query":"a, b: {c}","filters":{"team":"infra","tags":["x",2,true,null],"depth":-1500.0,"none":{}}})"}}},
      {"gemma4 no arguments, cut off", ToolCallFamily::kGemma4, "<|tool_call>call:search_docs{}", "",
       {{"search_docs", "{}"}}},
      {"gemma4 malformed", ToolCallFamily::kGemma4,
       "<|tool_call>call:get_weather{city:<|\"|>Oslo}<tool_call|> ok",
       "<|tool_call>call:get_weather{city:<|\"|>Oslo}<tool_call|> ok", {}},
      {"gemma4 unknown function", ToolCallFamily::kGemma4, "<|tool_call>call:rm_rf{}<tool_call|>",
       "<|tool_call>call:rm_rf{}<tool_call|>", {}},
      // Llama 3.x: the answer is the call, bare JSON.
      {"llama3 single", ToolCallFamily::kLlama3Json,
       "{\"name\": \"get_weather\", \"parameters\": {\"city\": \"Oslo\", \"days\": 2}}", "",
       {{"get_weather", R"({"city":"Oslo","days":2})"}}},
      {"llama3 python tag, arguments, two calls", ToolCallFamily::kLlama3Json,
       "<|python_tag|>{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Oslo\"}}; "
       "{\"type\": \"function\", \"name\": \"search_docs\", \"parameters\": {\"query\": \"a}b{\\\"\", "
       "\"filters\": {\"team\": \"x\"}}}\n",
       "",
       {{"get_weather", R"({"city":"Oslo"})"}, {"search_docs", R"({"query":"a}b{\"","filters":{"team":"x"}})"}}},
      {"llama3 call then text", ToolCallFamily::kLlama3Json,
       "{\"name\": \"search_docs\", \"parameters\": {}} Done.", " Done.", {{"search_docs", "{}"}}},
      {"llama3 text first is content", ToolCallFamily::kLlama3Json,
       "Sure: {\"name\": \"get_weather\", \"parameters\": {}}",
       "Sure: {\"name\": \"get_weather\", \"parameters\": {}}", {}},
      {"llama3 JSON that is no call", ToolCallFamily::kLlama3Json, "\n{\"answer\": 42}", "\n{\"answer\": 42}", {}},
      {"llama3 cut off", ToolCallFamily::kLlama3Json, "{\"name\": \"get_weather\", \"parameters\": {\"city\": \"Os",
       "{\"name\": \"get_weather\", \"parameters\": {\"city\": \"Os", {}},
  };
}

void ExpectCalls(const std::vector<ToolCall>& got,
                 const std::vector<std::pair<std::string, std::string>>& want,
                 const std::string& label) {
  ASSERT_EQ(got.size(), want.size()) << label;
  for (size_t i = 0; i < want.size(); ++i) {
    EXPECT_EQ(got[i].name, want[i].first) << label << " call " << i;
    EXPECT_EQ(got[i].arguments, want[i].second) << label << " call " << i;
    EXPECT_EQ(got[i].id.rfind("call_", 0), 0u) << label;
    EXPECT_EQ(got[i].id.size(), 29u) << label;
  }
}

TEST(ToolCallsTest, WholeOutputs) {
  for (const Case& c : Cases()) {
    ToolCallOutput out = ParseToolCalls(c.output, Config(c.family));
    EXPECT_EQ(out.content, c.content) << c.label;
    ExpectCalls(out.calls, c.calls, c.label);
  }
}

// Every cut of the output into two pieces, and byte by byte, gives the
// whole parse; content never shows a partial opening tag.
TEST(ToolCallsTest, StreamsMatchTheWholeParseWhereverCut) {
  for (const Case& c : Cases()) {
    for (size_t cut = 0; cut <= c.output.size(); ++cut) {
      ToolCallStream s(Config(c.family));
      ToolCallOutput a = s.Push(c.output.substr(0, cut));
      ToolCallOutput b = s.Push(c.output.substr(cut));
      ToolCallOutput z = s.Finish();
      EXPECT_EQ(a.content + b.content + z.content, c.content) << c.label << " cut " << cut;
      std::vector<ToolCall> calls = a.calls;
      calls.insert(calls.end(), b.calls.begin(), b.calls.end());
      calls.insert(calls.end(), z.calls.begin(), z.calls.end());
      ExpectCalls(calls, c.calls, c.label);
    }
    ToolCallStream s(Config(c.family));
    std::string content;
    size_t calls = 0;
    for (char ch : c.output) {
      ToolCallOutput o = s.Push(std::string_view(&ch, 1));
      content += o.content;
      calls += o.calls.size();
      if (!c.calls.empty()) {
        EXPECT_EQ(content.find("<tool_call"), std::string::npos) << c.label;
        EXPECT_EQ(content.find("<｜tool"), std::string::npos) << c.label;
        EXPECT_EQ(content.find("<minimax"), std::string::npos) << c.label;
        EXPECT_EQ(content.find("<|tool"), std::string::npos) << c.label;
      }
    }
    ToolCallOutput z = s.Finish();
    EXPECT_EQ(content + z.content, c.content) << c.label;
    EXPECT_EQ(calls + z.calls.size(), c.calls.size()) << c.label;
  }
}

// Mutated outputs (bytes replaced by tag characters, cut, repeated) never
// throw or crash, and streaming them byte by byte still gives the whole parse.
TEST(ToolCallsTest, MutatedOutputsParseTheSameWholeAndStreamed) {
  std::mt19937 rng(41);
  const std::string alphabet = "<>/\"=\n _{}[]:,|0aztool_callarg_keyvalueinvokeparameterminimax";
  int calls = 0;
  for (const Case& c : Cases()) {
    for (int i = 0; i < 60; ++i) {
      std::string text = c.output;
      for (int e = 0, n = 1 + static_cast<int>(rng() % 3); e < n && !text.empty(); ++e) {
        const size_t pos = rng() % text.size();
        switch (rng() % 3) {
          case 0: text[pos] = alphabet[rng() % alphabet.size()]; break;
          case 1: text.erase(pos, 1 + rng() % 6); break;
          default: text.insert(pos, text.substr(rng() % text.size(), 1 + rng() % 12)); break;
        }
      }
      const ToolCallOutput whole = ParseToolCalls(text, Config(c.family));
      ToolCallStream s(Config(c.family));
      std::string content;
      std::vector<ToolCall> got;
      for (char ch : text) {
        ToolCallOutput o = s.Push(std::string_view(&ch, 1));
        content += o.content;
        got.insert(got.end(), o.calls.begin(), o.calls.end());
      }
      ToolCallOutput z = s.Finish();
      content += z.content;
      got.insert(got.end(), z.calls.begin(), z.calls.end());
      EXPECT_EQ(content, whole.content) << c.label << ": " << text;
      ASSERT_EQ(got.size(), whole.calls.size()) << c.label << ": " << text;
      for (size_t k = 0; k < got.size(); ++k) {
        EXPECT_EQ(got[k].name, whole.calls[k].name);
        EXPECT_EQ(got[k].arguments, whole.calls[k].arguments);
        EXPECT_TRUE(Json::accept(got[k].arguments)) << got[k].arguments;
      }
      calls += static_cast<int>(got.size());
    }
  }
  EXPECT_GT(calls, 0);
}

TEST(ToolCallsTest, CallsStreamWhenTheirBlockCloses) {
  ToolCallStream s(Config(ToolCallFamily::kHermes));
  EXPECT_EQ(s.Push("Hi <tool_c").content, "Hi ");
  ToolCallOutput o = s.Push("all>{\"name\": \"get_weather\", \"arguments\": {}}</tool_call>");
  ASSERT_EQ(o.calls.size(), 1u);
  EXPECT_EQ(o.calls[0].arguments, "{}");
  EXPECT_EQ(s.Push("\n\n").content, "");  // maybe trailing: held
  EXPECT_EQ(s.Push(" Done").content, "\n\n Done");
}

TEST(ToolCallsTest, ParallelFalseKeepsTheFirstCall) {
  ToolCallConfig c = Config(ToolCallFamily::kHermes);
  c.parallel = false;
  ToolCallOutput out = ParseToolCalls(Cases()[1].output, c);
  ExpectCalls(out.calls, {{"get_weather", R"({"city":"Oslo","days":2})"}}, "parallel false");
  EXPECT_EQ(out.content, "Let me check.\n");
}

TEST(ToolCallsTest, ParallelFalseKeepsTheFirstCallOfEachFamily) {
  for (const Case& c : Cases()) {
    if (c.calls.size() < 2) continue;
    ToolCallConfig config = Config(c.family);
    config.parallel = false;
    ToolCallOutput out = ParseToolCalls(c.output, config);
    ExpectCalls(out.calls, {c.calls[0]}, c.label);
    EXPECT_EQ(out.content, c.content) << c.label;
  }
}

TEST(ToolCallsTest, OnlyNameRefusesOtherFunctions) {
  ToolCallConfig c = Config(ToolCallFamily::kHermes);
  c.only_name = "search_docs";
  const std::string text = Cases()[0].output;
  ToolCallOutput out = ParseToolCalls(text, c);
  EXPECT_TRUE(out.calls.empty());
  EXPECT_EQ(out.content, text);
}

TEST(ToolCallsTest, ReasoningBeforeTheCall) {
  const std::string output =
      "<think>\nThe user wants the weather.\n</think>\n\n<tool_call>\n{\"name\": \"get_weather\", "
      "\"arguments\": {\"city\": \"Oslo\"}}\n</tool_call>";
  ReasoningSplit split = SplitReasoning(output);
  EXPECT_EQ(split.reasoning_content, "The user wants the weather.");
  ToolCallOutput out = ParseToolCalls(split.content, Config(ToolCallFamily::kHermes));
  EXPECT_EQ(out.content, "");
  ExpectCalls(out.calls, {{"get_weather", R"({"city":"Oslo"})"}}, "think");
}

TEST(ToolCallsTest, HarmonyCallsOnTheCommentaryChannel) {
  // What gpt-oss writes after "<|start|>assistant" (generation stops at
  // <|call|>, which may or may not be in the text).
  const std::string output =
      "<|channel|>analysis<|message|>Need weather.<|end|><|start|>assistant<|channel|>commentary "
      "to=functions.get_weather <|constrain|>json<|message|>{\"city\": \"Oslo\"}<|call|>";
  ReasoningSplit split = SplitHarmony(output);
  EXPECT_EQ(split.reasoning_content, "Need weather.");
  EXPECT_EQ(split.content, "");
  ToolCallOutput out = ToolCallsFromHarmony(HarmonyCalls(output), Config(ToolCallFamily::kHarmony));
  ExpectCalls(out.calls, {{"get_weather", R"({"city":"Oslo"})"}}, "harmony");
  // The recipient before the channel, as the template renders past calls.
  const std::string other =
      " to=functions.search_docs<|channel|>commentary json<|message|>{\"query\": \"a\"}";
  out = ToolCallsFromHarmony(HarmonyCalls(other), Config(ToolCallFamily::kHarmony));
  ExpectCalls(out.calls, {{"search_docs", R"({"query":"a"})"}}, "harmony recipient first");
  // Malformed arguments: the body comes back as content.
  const std::string bad = "<|channel|>commentary to=functions.get_weather<|message|>{oops";
  out = ToolCallsFromHarmony(HarmonyCalls(bad), Config(ToolCallFamily::kHarmony));
  EXPECT_TRUE(out.calls.empty());
  EXPECT_EQ(out.content, "{oops");
}

TEST(ToolCallsTest, FramesOpenAndCloseWhatTheParserReads) {
  for (ToolCallFamily f : {ToolCallFamily::kHermes, ToolCallFamily::kDeepSeekV31, ToolCallFamily::kLlama3Json}) {
    const ToolCallFrameText frame = ToolCallFrameFor(f, "get_weather");
    ToolCallOutput out =
        ParseToolCalls(frame.prefix + "{\"city\": \"Rome\"}" + frame.suffix, Config(f));
    EXPECT_EQ(out.content, "") << ToolCallFamilyName(f);
    ExpectCalls(out.calls, {{"get_weather", R"({"city":"Rome"})"}}, ToolCallFamilyName(f));
  }
  const ToolCallFrameText q = ToolCallFrameFor(ToolCallFamily::kQwen3Coder, "get_weather");
  ToolCallOutput out =
      ParseToolCalls(q.prefix + "<parameter=city>\nRome\n</parameter>\n" + q.suffix,
                     Config(ToolCallFamily::kQwen3Coder));
  ExpectCalls(out.calls, {{"get_weather", R"({"city":"Rome"})"}}, "qwen3-coder frame");
  // The families whose arguments are tags: the frame around ArgumentTagsFor's
  // arguments, a string and a number.
  for (ToolCallFamily f : {ToolCallFamily::kQwen3Coder, ToolCallFamily::kGlm45, ToolCallFamily::kGlm47,
                           ToolCallFamily::kMiniMaxM2}) {
    const ToolCallFrameText frame = ToolCallFrameFor(f, "get_weather");
    const ArgumentTags* tags = ArgumentTagsFor(f);
    ASSERT_NE(tags, nullptr) << ToolCallFamilyName(f);
    const std::string text = frame.prefix + tags->key_prefix + "city" + tags->key_suffix + "Rome" +
                             tags->value_suffix + tags->key_prefix + "days" + tags->key_suffix + "4" +
                             tags->value_suffix + frame.suffix;
    EXPECT_NE(tags->value_suffix.find(tags->value_end), std::string::npos);
    out = ParseToolCalls(text, Config(f));
    EXPECT_EQ(out.content, "") << ToolCallFamilyName(f);
    ExpectCalls(out.calls, {{"get_weather", R"({"city":"Rome","days":4})"}}, ToolCallFamilyName(f));
  }
  const ToolCallFrameText g = ToolCallFrameFor(ToolCallFamily::kGemma4, "get_weather");
  EXPECT_EQ(g.prefix, "<|tool_call>call:get_weather");
  out = ParseToolCalls(g.prefix + "{city:<|\"|>Rome<|\"|>,days:4}" + g.suffix, Config(ToolCallFamily::kGemma4));
  EXPECT_EQ(out.content, "");
  ExpectCalls(out.calls, {{"get_weather", R"({"city":"Rome","days":4})"}}, "gemma4 frame");
  EXPECT_EQ(ArgumentTagsFor(ToolCallFamily::kGemma4), nullptr);
  EXPECT_EQ(ArgumentTagsFor(ToolCallFamily::kHermes), nullptr);
  EXPECT_EQ(ToolCallFrameFor(ToolCallFamily::kGlm45, "f").prefix, "<tool_call>f\n");
  EXPECT_EQ(ToolCallFrameFor(ToolCallFamily::kGlm47, "f").prefix, "<tool_call>f");
  EXPECT_EQ(ToolCallFrameFor(ToolCallFamily::kMiniMaxM2, "f").prefix,
            "<minimax:tool_call>\n<invoke name=\"f\">\n");
  const ToolCallFrameText h = ToolCallFrameFor(ToolCallFamily::kHarmony, "get_weather");
  out = ToolCallsFromHarmony(HarmonyCalls("<|start|>assistant" + h.prefix + "{}" + h.suffix),
                             Config(ToolCallFamily::kHarmony));
  ExpectCalls(out.calls, {{"get_weather", "{}"}}, "harmony frame");
  EXPECT_TRUE(ToolCallFrameFor(ToolCallFamily::kNone, "x").prefix.empty());
}

// The template named `name`: the oracle's, or one this repository keeps.
std::string ReadTemplate(const std::string& name) {
  for (const fixtures::TemplateFixture& f : fixtures::TemplateFixtures()) {
    if (f.name == name) return fixtures::ReadTextFile(f.template_path);
  }
  ADD_FAILURE() << "no template " << name << " under " << fixtures::FixtureTemplatesDir() << " or "
                << fixtures::RepoRenderingsDir();
  return "";
}

TEST(ToolCallsTest, FamilyOfEachFixtureTemplate) {
  const std::vector<std::pair<std::string, ToolCallFamily>> want = {
      {"Qwen-Qwen2.5-7B-Instruct", ToolCallFamily::kHermes},
      {"Qwen-Qwen3-0.6B", ToolCallFamily::kHermes},
      {"Qwen3.5-4B", ToolCallFamily::kQwen3Coder},
      {"deepseek-ai-DeepSeek-V3.1", ToolCallFamily::kDeepSeekV31},
      {"openai-gpt-oss-120b", ToolCallFamily::kHarmony},
      {"GLM-4.6", ToolCallFamily::kGlm45},
      {"GLM-4.7-Flash", ToolCallFamily::kGlm47},
      {"MiniMax-M2", ToolCallFamily::kMiniMaxM2},
      {"Qwen3-Coder", ToolCallFamily::kQwen3Coder},
      {"google-gemma-4-31B-it", ToolCallFamily::kGemma4},
      // Nemotron 3 Nano writes Qwen3-Coder's calls (llama.cpp reads them so).
      {"NVIDIA-Nemotron-3-Nano-30B-A3B-BF16", ToolCallFamily::kQwen3Coder},
      {"meta-llama-Llama-3.1-8B-Instruct", ToolCallFamily::kLlama3Json},
      {"meta-llama-Llama-3.3-70B-Instruct", ToolCallFamily::kLlama3Json},
  };
  for (const auto& [name, family] : want) {
    const std::string source = ReadTemplate(name);
    ASSERT_FALSE(source.empty()) << name;
    EXPECT_EQ(DetectToolCallFamily(source), family) << name;
  }
  EXPECT_EQ(DetectToolCallFamily(ChatMLFallbackTemplate()), ToolCallFamily::kNone);
}

// A past call rendered by the real template parses back to the same call
// (the model sees its own format in the prompt).
TEST(ToolCallsTest, RenderedPastCallsParseBack) {
  for (const char* name : {"Qwen-Qwen3-0.6B", "Qwen3.5-4B", "deepseek-ai-DeepSeek-V3.1", "GLM-4.6",
                           "GLM-4.7-Flash", "MiniMax-M2", "Qwen3-Coder", "google-gemma-4-31B-it",
                           "NVIDIA-Nemotron-3-Nano-30B-A3B-BF16", "meta-llama-Llama-3.1-8B-Instruct"}) {
    std::stringstream ss;
    ss << ReadTemplate(name);
    absl::StatusOr<ChatTemplate> t = ChatTemplate::Parse(ss.str());
    ASSERT_TRUE(t.ok()) << t.status();
    const Json messages = Json::parse(R"([{"role": "user", "content": "hi"},
      {"role": "assistant", "content": "", "tool_calls": [{"type": "function", "function":
        {"name": "search_docs", "arguments": "{\"query\": \"snow\", \"filters\": {\"team\": \"a\"}}"}}]}])");
    ChatTemplateOptions o;
    o.tools = Tools();
    o.add_generation_prompt = false;
    absl::StatusOr<std::string> prompt = t->Render(messages, o);
    ASSERT_TRUE(prompt.ok()) << prompt.status();
    const ToolCallFamily f = DetectToolCallFamily(ss.str());
    const size_t at = f == ToolCallFamily::kDeepSeekV31 ? prompt->find("<｜tool▁calls▁begin｜>")
                      : f == ToolCallFamily::kMiniMaxM2 ? prompt->rfind("<minimax:tool_call>")
                      : f == ToolCallFamily::kGemma4    ? prompt->rfind("<|tool_call>")
                      : f == ToolCallFamily::kLlama3Json ? prompt->rfind("{\"name\": ")
                                                        : prompt->rfind("<tool_call>");
    ASSERT_NE(at, std::string::npos) << name << ": " << *prompt;
    ToolCallOutput out = ParseToolCalls(std::string_view(*prompt).substr(at), Config(f));
    ASSERT_EQ(out.calls.size(), 1u) << name << ": " << prompt->substr(at);
    EXPECT_EQ(out.calls[0].name, "search_docs");
    // Key order aside (Gemma's template sorts the keys).
    EXPECT_EQ(nlohmann::json::parse(out.calls[0].arguments),
              nlohmann::json::parse(R"({"query": "snow", "filters": {"team": "a"}})"))
        << name;
  }
}

// Whether the output starts inside a <think> block follows the generation
// prompt, as llama.cpp decides it (the prompt ends with the open tag):
// GLM-4.7-Flash and MiniMax-M2 open it, GLM-4.6 lets the model open it
// (and closes an empty one with thinking off), Qwen3-Coder does not think.
// Nemotron 3 Nano opens it with thinking on and closes an empty one with it
// off; Gemma 4's thought channel is the model's to open (with thinking off
// the prompt holds an empty one).
TEST(ToolCallsTest, GenerationPromptsOpenReasoningPerTemplate) {
  struct Want {
    const char* name;
    bool thinking_on, thinking_off;
    OutputFormat format = OutputFormat::kThink;
  };
  const Json messages = Json::parse(R"([{"role": "user", "content": "hi"}])");
  for (const Want& w : {Want{"GLM-4.6", false, false}, Want{"GLM-4.7-Flash", true, false},
                        Want{"MiniMax-M2", true, true}, Want{"Qwen3-Coder", false, false},
                        Want{"NVIDIA-Nemotron-3-Nano-30B-A3B-BF16", true, false},
                        Want{"google-gemma-4-31B-it", false, false, OutputFormat::kThoughtChannel}}) {
    absl::StatusOr<ChatTemplate> t = ChatTemplate::Parse(ReadTemplate(w.name));
    ASSERT_TRUE(t.ok()) << t.status();
    ChatTemplateOptions o;
    o.add_generation_prompt = true;
    for (bool thinking : {true, false}) {
      o.enable_thinking = thinking;
      absl::StatusOr<std::string> prompt = t->Render(messages, o);
      ASSERT_TRUE(prompt.ok()) << prompt.status();
      EXPECT_EQ(PromptOpensReasoning(*prompt, w.format), thinking ? w.thinking_on : w.thinking_off)
          << w.name << " thinking " << thinking << ": " << *prompt;
    }
  }
}

// A whole answer of each new family, reasoning first: GLM-4.6 opens the
// block itself, GLM-4.7-Flash and MiniMax-M2 continue the one their prompt
// opened; the calls follow.
TEST(ToolCallsTest, ReasoningThenCallsOfTheNewFamilies) {
  struct Answer {
    ToolCallFamily family;
    bool starts_in_reasoning;
    std::string output;
    OutputFormat format = OutputFormat::kThink;
  };
  const std::vector<Answer> answers = {
      {ToolCallFamily::kGlm45, false,
       "\n<think>The user wants the weather.</think>\n<tool_call>get_weather\n<arg_key>city</arg_key>\n"
       "<arg_value>Oslo</arg_value>\n</tool_call>"},
      {ToolCallFamily::kGlm47, true,
       "The user wants the weather.</think><tool_call>get_weather<arg_key>city</arg_key>"
       "<arg_value>Oslo</arg_value></tool_call>"},
      {ToolCallFamily::kMiniMaxM2, true,
       "The user wants the weather.\n</think>\n\n<minimax:tool_call>\n<invoke name=\"get_weather\">\n"
       "<parameter name=\"city\">Oslo</parameter>\n</invoke>\n</minimax:tool_call>"},
      // Nemotron 3 Nano (Qwen3-Coder's calls after the <think> its prompt opened).
      {ToolCallFamily::kQwen3Coder, true,
       "The user wants the weather.\n</think>\n\n<tool_call>\n<function=get_weather>\n<parameter=city>\n"
       "Oslo\n</parameter>\n</function>\n</tool_call>\n"},
      // Gemma 4: its thought channel, then the call.
      {ToolCallFamily::kGemma4, false,
       "<|channel>thought\nThe user wants the weather.<channel|><|tool_call>call:get_weather"
       "{city:<|\"|>Oslo<|\"|>}<tool_call|>",
       OutputFormat::kThoughtChannel},
  };
  for (const Answer& a : answers) {
    ReasoningSplit split = SplitOutput(a.output, a.format, a.starts_in_reasoning);
    EXPECT_EQ(split.reasoning_content, "The user wants the weather.") << ToolCallFamilyName(a.family);
    ToolCallOutput out = ParseToolCalls(split.content, Config(a.family));
    EXPECT_EQ(out.content, "") << ToolCallFamilyName(a.family);
    ExpectCalls(out.calls, {{"get_weather", R"({"city":"Oslo"})"}}, ToolCallFamilyName(a.family));
  }
}

}  // namespace
}  // namespace moesplit::chat
