// The chat APIs' tool calling: request checks (each error names its field),
// the model's output split into reasoning, content and calls per family
// (whole and streamed), and the OpenAI JSON shapes of calls.
#include "services/dense/chat_tools.h"

#include <string>
#include <vector>

#include "common/sampling/token_constraint.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace moesplit::dense {
namespace {

using Json = nlohmann::ordered_json;
using ::testing::StartsWith;

const Json kTools = Json::parse(R"([
  {"type": "function", "function": {"name": "get_weather", "description": "Weather",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}},
  {"type": "function", "function": {"name": "search_docs"}}])");

ToolRequest Request(const Json& choice = Json(), const Json& parallel = Json()) {
  absl::StatusOr<ToolRequest> r = ParseToolRequest(kTools, choice, parallel);
  EXPECT_TRUE(r.ok()) << r.status();
  return r.ok() ? *r : ToolRequest{};
}

TEST(ParseToolRequestTest, AcceptsTheOpenAiForms) {
  EXPECT_EQ(Request().choice, ToolChoice::kAuto);
  EXPECT_TRUE(Request().offered());
  EXPECT_EQ(Request("none").choice, ToolChoice::kNone);
  EXPECT_FALSE(Request("none").offered());
  EXPECT_EQ(Request("required").choice, ToolChoice::kRequired);
  ToolRequest named = Request(Json::parse(R"({"type":"function","function":{"name":"search_docs"}})"));
  EXPECT_EQ(named.choice, ToolChoice::kNamed);
  EXPECT_EQ(named.named, "search_docs");
  EXPECT_FALSE(Request(Json(), false).parallel);
  absl::StatusOr<ToolRequest> none = ParseToolRequest(Json(), Json(), Json());
  ASSERT_TRUE(none.ok());
  EXPECT_FALSE(none->offered());
  EXPECT_TRUE(ParseToolRequest(Json(), "auto", Json()).ok());
}

TEST(ParseToolRequestTest, BadInputNamesTheField) {
  struct Bad {
    Json tools, choice, parallel;
    std::string starts;
  };
  const std::vector<Bad> cases = {
      {Json::object(), Json(), Json(), "tools must be an array"},
      {Json::parse(R"([1])"), Json(), Json(), "tools[0] must be an object"},
      {Json::parse(R"([{"type":"code","function":{"name":"f"}}])"), Json(), Json(), "tools[0].type"},
      {Json::parse(R"([{"type":"function"}])"), Json(), Json(), "tools[0].function must"},
      {Json::parse(R"([{"type":"function","function":{"name":"a b"}}])"), Json(), Json(),
       "tools[0].function.name"},
      {Json::parse(R"([{"type":"function","function":{"name":"f"}},
                       {"type":"function","function":{"name":"f"}}])"),
       Json(), Json(), "tools[1].function.name 'f' is given twice"},
      {Json::parse(R"([{"type":"function","function":{"name":"f","parameters":[]}}])"), Json(),
       Json(), "tools[0].function.parameters"},
      {Json::parse(R"([{"type":"function","function":{"name":"f","description":3}}])"), Json(),
       Json(), "tools[0].function.description"},
      {kTools, "sometimes", Json(), "tool_choice must be"},
      {kTools, 3, Json(), "tool_choice must be"},
      {kTools, Json::parse(R"({"type":"function","function":{"name":"nope"}})"), Json(),
       "tool_choice names the function 'nope'"},
      {kTools, Json::parse(R"({"type":"function"})"), Json(), "tool_choice must be"},
      {Json(), "required", Json(), "tool_choice \"required\" or a function needs tools"},
      {kTools, Json(), "yes", "parallel_tool_calls must be true or false"},
  };
  for (const Bad& b : cases) {
    absl::StatusOr<ToolRequest> r = ParseToolRequest(b.tools, b.choice, b.parallel);
    ASSERT_FALSE(r.ok()) << b.starts;
    EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument) << b.starts;
    EXPECT_THAT(std::string(r.status().message()), StartsWith(b.starts));
  }
}

struct OutputCase {
  const char* label;
  chat::OutputFormat format;
  bool starts_in_reasoning;
  chat::ToolCallFamily family;
  std::string output;
  std::string reasoning, content;
  std::vector<std::string> names;
};

std::vector<OutputCase> OutputCases() {
  using F = chat::ToolCallFamily;
  using O = chat::OutputFormat;
  return {
      {"qwen3: think, then a call", O::kThink, false, F::kHermes,
       "<think>\nNeed the weather.\n</think>\n\n<tool_call>\n{\"name\": \"get_weather\", "
       "\"arguments\": {\"city\": \"Oslo\"}}\n</tool_call>",
       "Need the weather.", "", {"get_weather"}},
      {"qwen3.5: prompt opened the think block", O::kThink, true, F::kQwen3Coder,
       "Two calls.\n</think>\n\n<tool_call>\n<function=get_weather>\n<parameter=city>\nOslo\n"
       "</parameter>\n</function>\n</tool_call>\n<tool_call>\n<function=search_docs>\n"
       "</function>\n</tool_call>",
       "Two calls.", "", {"get_weather", "search_docs"}},
      {"deepseek-v3.1: text then a call", O::kThink, false, F::kDeepSeekV31,
       "Checking.<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>search_docs<｜tool▁sep｜>{\"q\": 1}"
       "<｜tool▁call▁end｜><｜tool▁calls▁end｜>",
       "", "Checking.", {"search_docs"}},
      {"gpt-oss: analysis, then a call", O::kHarmony, false, F::kHarmony,
       "<|channel|>analysis<|message|>Weather needed.<|end|><|start|>assistant<|channel|>"
       "commentary to=functions.get_weather <|constrain|>json<|message|>{\"city\":\"Oslo\"}",
       "Weather needed.", "", {"get_weather"}},
      {"glm-4.6: think opened by the model, then a call", O::kThink, false, F::kGlm45,
       "\n<think>Need the weather.</think>\n<tool_call>get_weather\n<arg_key>city</arg_key>\n"
       "<arg_value>Oslo</arg_value>\n</tool_call>",
       "Need the weather.", "", {"get_weather"}},
      {"glm-4.7-flash: prompt opened the think block, two calls", O::kThink, true, F::kGlm47,
       "Two calls.</think>Sure.<tool_call>get_weather<arg_key>city</arg_key><arg_value>Oslo"
       "</arg_value></tool_call><tool_call>search_docs</tool_call>",
       "Two calls.", "Sure.", {"get_weather", "search_docs"}},
      {"minimax-m2: interleaved thinking, then calls in one block", O::kThink, true, F::kMiniMaxM2,
       "Two calls.\n</think>\n\nChecking.\n<minimax:tool_call>\n<invoke name=\"get_weather\">\n"
       "<parameter name=\"city\">Oslo</parameter>\n</invoke>\n<invoke name=\"search_docs\">\n"
       "</invoke>\n</minimax:tool_call>",
       "Two calls.", "Checking.\n", {"get_weather", "search_docs"}},
      {"gemma4: thought channel, then two calls", O::kThoughtChannel, false, F::kGemma4,
       "<|channel>thought\nTwo calls.<channel|>Checking.<|tool_call>call:get_weather{city:<|\"|>Oslo<|\"|>}"
       "<tool_call|><|tool_call>call:search_docs{}<tool_call|>",
       "Two calls.", "Checking.", {"get_weather", "search_docs"}},
      {"gemma4: thinking off (empty channel in the prompt), an answer", O::kThoughtChannel, false, F::kGemma4,
       "It is sunny.", "", "It is sunny.", {}},
      {"nemotron-3-nano: prompt opened the think block, a call", O::kThink, true, F::kQwen3Coder,
       "Need the weather.\n</think>\n\n<tool_call>\n<function=get_weather>\n<parameter=city>\nOslo\n"
       "</parameter>\n</function>\n</tool_call>\n",
       "Need the weather.", "", {"get_weather"}},
      {"malformed call is content", O::kThink, false, F::kHermes,
       "<tool_call>{\"name\": \"get_weather\", \"arguments\": {]}</tool_call>", "",
       "<tool_call>{\"name\": \"get_weather\", \"arguments\": {]}</tool_call>", {}},
  };
}

TEST(ChatOutputTest, SplitsReasoningContentAndCalls) {
  for (const OutputCase& c : OutputCases()) {
    ChatDelta whole =
        SplitChatOutput(c.output, c.format, c.starts_in_reasoning, c.family, Request());
    EXPECT_EQ(whole.reasoning_content, c.reasoning) << c.label;
    EXPECT_EQ(whole.content, c.content) << c.label;
    ASSERT_EQ(whole.tool_calls.size(), c.names.size()) << c.label;
    for (size_t i = 0; i < c.names.size(); ++i) EXPECT_EQ(whole.tool_calls[i].name, c.names[i]);
    // Streamed in pieces of 3 bytes: the same answer.
    ChatOutputStream s(c.format, c.starts_in_reasoning, c.family, Request());
    ChatDelta sum;
    for (size_t i = 0; i <= c.output.size(); i += 3) {
      ChatDelta d = s.Push(std::string_view(c.output).substr(i, 3));
      sum.reasoning_content += d.reasoning_content;
      sum.content += d.content;
      for (auto& t : d.tool_calls) sum.tool_calls.push_back(t);
    }
    ChatDelta d = s.Finish();
    sum.reasoning_content += d.reasoning_content;
    sum.content += d.content;
    for (auto& t : d.tool_calls) sum.tool_calls.push_back(t);
    EXPECT_EQ(sum.reasoning_content, c.reasoning) << c.label;
    EXPECT_EQ(sum.content, c.content) << c.label;
    EXPECT_EQ(sum.tool_calls.size(), c.names.size()) << c.label;
  }
}

TEST(ChatOutputTest, ToolChoiceNoneAndNoToolsParseNothing) {
  const std::vector<OutputCase> cases = OutputCases();
  const OutputCase& c = cases[0];
  for (const ToolRequest& r : {Request("none"), ToolRequest{}}) {
    ChatDelta d = SplitChatOutput(c.output, c.format, false, c.family, r);
    EXPECT_TRUE(d.tool_calls.empty());
    EXPECT_THAT(d.content, StartsWith("<tool_call>"));
  }
  // A family the template does not have: plain content.
  ChatDelta d = SplitChatOutput(c.output, c.format, false, chat::ToolCallFamily::kNone, Request());
  EXPECT_TRUE(d.tool_calls.empty());
}

TEST(ChatOutputTest, ParallelFalseAndNamedChoice) {
  const std::vector<OutputCase> cases = OutputCases();
  for (const OutputCase& two : cases) {
    if (two.names.size() < 2) continue;
    ChatDelta d = SplitChatOutput(two.output, two.format, two.starts_in_reasoning, two.family,
                                  Request(Json(), false));
    ASSERT_EQ(d.tool_calls.size(), 1u) << two.label;
    EXPECT_EQ(d.tool_calls[0].name, "get_weather") << two.label;
    EXPECT_EQ(d.content, two.content) << two.label;
  }
  ChatDelta d;
  const Json named = Json::parse(R"({"type":"function","function":{"name":"search_docs"}})");
  d = SplitChatOutput(cases[0].output, chat::OutputFormat::kThink, false,
                      chat::ToolCallFamily::kHermes, Request(named));
  EXPECT_TRUE(d.tool_calls.empty());  // a call of another function is text
}

TEST(ChatOutputTest, OpenAiShapes) {
  const std::vector<chat::ToolCall> calls = {{"call_a", "get_weather", R"({"city":"Oslo"})"},
                                             {"call_b", "search_docs", "{}"}};
  EXPECT_EQ(ToolCallsJson(calls).dump(),
            R"([{"id":"call_a","type":"function","function":{"name":"get_weather","arguments":"{\"city\":\"Oslo\"}"}},)"
            R"({"id":"call_b","type":"function","function":{"name":"search_docs","arguments":"{}"}}])");
  std::vector<Json> deltas = ToolCallDeltasJson(calls, 2);
  ASSERT_EQ(deltas.size(), 4u);
  EXPECT_EQ(deltas[0].dump(),
            R"([{"index":2,"id":"call_a","type":"function","function":{"name":"get_weather","arguments":""}}])");
  EXPECT_EQ(deltas[1].dump(), R"([{"index":2,"function":{"arguments":"{\"city\":\"Oslo\"}"}}])");
  EXPECT_EQ(deltas[3][0]["index"], 3);
  EXPECT_EQ(ToolFinishReason("stop", true), "tool_calls");
  EXPECT_EQ(ToolFinishReason("stop", false), "stop");
  EXPECT_EQ(ToolFinishReason("length", true), "length");
}

// What an OpenAI client rebuilds from a stream's deltas (the openai npm
// client's ChatCompletionStream: content appended, tool_calls merged by
// index, arguments appended).
Json Reassemble(const std::vector<Json>& deltas) {
  Json msg = {{"role", "assistant"}, {"content", ""}};
  for (const Json& d : deltas) {
    if (d.contains("content")) msg["content"] = msg["content"].get<std::string>() + d["content"].get<std::string>();
    if (d.contains("reasoning_content")) {
      msg["reasoning_content"] =
          msg.value("reasoning_content", std::string()) + d["reasoning_content"].get<std::string>();
    }
    for (const Json& t : d.value("tool_calls", Json::array())) {
      const size_t i = t["index"].get<size_t>();
      Json& calls = msg["tool_calls"];
      EXPECT_LE(i, calls.is_null() ? 0 : calls.size()) << "indices go up by one";
      if (calls.is_null() || i == calls.size()) {
        EXPECT_TRUE(t.contains("id") && t["function"].contains("name")) << t.dump();
        calls.push_back({{"id", t["id"]}, {"type", t["type"]},
                         {"function", {{"name", t["function"]["name"]}, {"arguments", ""}}}});
      }
      calls[i]["function"]["arguments"] = calls[i]["function"]["arguments"].get<std::string>() +
                                          t["function"]["arguments"].get<std::string>();
    }
  }
  return msg;
}

// The HTTP stream's deltas (as /v1/chat/completions sends them, one Push per
// token) rebuild the whole answer's message; ids differ per answer.
TEST(ChatOutputTest, StreamedDeltasRebuildTheWholeMessage) {
  for (const OutputCase& c : OutputCases()) {
    Json whole = ChatMessageJson(
        SplitChatOutput(c.output, c.format, c.starts_in_reasoning, c.family, Request()));
    ChatOutputStream s(c.format, c.starts_in_reasoning, c.family, Request());
    std::vector<Json> deltas;
    int calls = 0;
    for (size_t i = 0; i < c.output.size(); i += 4) {
      for (Json& d : ChatDeltasJson(s.Push(std::string_view(c.output).substr(i, 4)), false, &calls)) {
        deltas.push_back(std::move(d));
      }
    }
    for (Json& d : ChatDeltasJson(s.Finish(), true, &calls)) deltas.push_back(std::move(d));
    EXPECT_EQ(calls, static_cast<int>(c.names.size())) << c.label;
    Json rebuilt = Reassemble(deltas);
    if (whole["content"].is_null()) rebuilt["content"] = nullptr;  // the client keeps ""
    for (Json* m : {&whole, &rebuilt}) {
      for (Json& t : m->value("tool_calls", Json::array())) {
        EXPECT_THAT(t["id"].get<std::string>(), StartsWith("call_")) << c.label;
      }
      if (m->contains("tool_calls")) {
        for (Json& t : (*m)["tool_calls"]) t["id"] = "call_x";
      }
    }
    EXPECT_EQ(rebuilt.dump(), whole.dump()) << c.label;
  }
}

TEST(ChatOutputTest, MessageShapes) {
  ChatDelta only_calls;
  only_calls.tool_calls = {{"call_a", "get_weather", "{}"}};
  EXPECT_EQ(ChatMessageJson(only_calls).dump(),
            R"({"role":"assistant","content":null,"tool_calls":[{"id":"call_a","type":"function",)"
            R"("function":{"name":"get_weather","arguments":"{}"}}]})");
  ChatDelta text;
  text.content = "hi";
  text.reasoning_content = "hm";
  EXPECT_EQ(ChatMessageJson(text).dump(),
            R"({"role":"assistant","content":"hi","reasoning_content":"hm"})");
  int calls = 0;
  EXPECT_EQ(ChatDeltasJson(ChatDelta{}, false, &calls).size(), 1u);  // {"content": ""}
  EXPECT_TRUE(ChatDeltasJson(ChatDelta{}, true, &calls).empty());
  EXPECT_EQ(ChatDeltasJson(only_calls, true, &calls).size(), 2u);
  EXPECT_EQ(calls, 1);
}


// Whether the constraint's grammar takes `text` whole (bytes as tokens).
bool ConstraintAccepts(const std::shared_ptr<const grammar::Grammar>& g, const std::string& text) {
  std::vector<std::string> pieces;
  for (int b = 0; b < 256; ++b) pieces.push_back(std::string(1, static_cast<char>(b)));
  pieces.push_back("<eog>");
  auto vocab = VocabIndex::Create(pieces, std::vector<bool>(257, true), {256});
  EXPECT_TRUE(vocab.ok());
  TokenConstraint c(g, *vocab);
  return c.AcceptBytes(text).ok() && c.complete();
}

// tool_choice required / named on a Hermes template: the grammar writes one
// <tool_call> whose name is a tool's (the named one) and whose arguments
// match its parameters, and what it writes parses back as that call.
TEST(ToolChoiceConstraintTest, HermesCallsAreForcedAndParseBack) {
  const std::string weather =
      "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>";
  // search_docs has no parameters: an empty argument list (OpenAI's rule).
  const std::string search =
      "<tool_call>\n{\"name\": \"search_docs\", \"arguments\": {}}\n</tool_call>";
  auto named = ToolChoiceConstraint(
      Request(Json::parse(R"({"type":"function","function":{"name":"get_weather"}})")),
      chat::ToolCallFamily::kHermes);
  ASSERT_TRUE(named.ok()) << named.status();
  ASSERT_NE(*named, nullptr);
  EXPECT_TRUE(ConstraintAccepts(*named, weather));
  EXPECT_FALSE(ConstraintAccepts(*named, search));
  EXPECT_FALSE(ConstraintAccepts(
      *named, "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": 7}}\n</tool_call>"));
  EXPECT_FALSE(ConstraintAccepts(*named, "Sure, the weather."));
  auto required = ToolChoiceConstraint(Request("required"), chat::ToolCallFamily::kHermes);
  ASSERT_TRUE(required.ok()) << required.status();
  ASSERT_NE(*required, nullptr);
  EXPECT_TRUE(ConstraintAccepts(*required, weather));
  EXPECT_TRUE(ConstraintAccepts(*required, search));
  EXPECT_FALSE(ConstraintAccepts(
      *required, "<tool_call>\n{\"name\": \"search_docs\", \"arguments\": {\"q\": 1}}\n</tool_call>"));
  EXPECT_FALSE(ConstraintAccepts(
      *required, "<tool_call>\n{\"name\": \"other\", \"arguments\": {}}\n</tool_call>"));
  const ChatDelta back = SplitChatOutput(weather, chat::OutputFormat::kThink, false,
                                         chat::ToolCallFamily::kHermes, Request("required"));
  ASSERT_EQ(back.tool_calls.size(), 1u) << back.content;
  EXPECT_EQ(back.tool_calls[0].name, "get_weather");
  EXPECT_EQ(Json::parse(back.tool_calls[0].arguments), Json::parse(R"({"city": "Paris"})"));
  // Nothing is forced for auto / none, nor without a tool-call family.
  for (const ToolRequest& r : {Request(), Request("none")}) {
    auto g = ToolChoiceConstraint(r, chat::ToolCallFamily::kHermes);
    ASSERT_TRUE(g.ok());
    EXPECT_EQ(*g, nullptr);
  }
  // A template of no known family cannot force a call: refused, not text.
  for (const ToolRequest& r :
       {Request("required"), Request(Json::parse(R"({"type":"function","function":{"name":"get_weather"}})"))}) {
    auto none = ToolChoiceConstraint(r, chat::ToolCallFamily::kNone);
    EXPECT_EQ(none.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(std::string(none.status().message()), StartsWith("tool_choice \"required\" or a named function"));
  }
  auto none_auto = ToolChoiceConstraint(Request(), chat::ToolCallFamily::kNone);
  ASSERT_TRUE(none_auto.ok());
  EXPECT_EQ(*none_auto, nullptr);
  // The frame's tags may also be the special tokens (TokenBytes).
  const std::string as_tokens = grammar::TokenBytes("<tool_call>") +
                                "\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n" +
                                grammar::TokenBytes("</tool_call>");
  EXPECT_TRUE(ConstraintAccepts(*named, as_tokens));
}

// DeepSeek-V3.1 and gpt-oss (harmony), whose frames are special tokens: the
// grammar writes them as the tokens or as their text, DeepSeek's right
// after the think block its generation prompt opened, gpt-oss's after an
// optional analysis message; what it takes parses back as the call.
TEST(ToolChoiceConstraintTest, DeepSeekAndHarmonyCallsAreForcedAndParseBack) {
  using grammar::TokenBytes;
  const ToolRequest named =
      Request(Json::parse(R"({"type":"function","function":{"name":"get_weather"}})"));
  const std::string args = R"({"city": "Oslo"})";

  auto ds = ToolChoiceConstraint(named, chat::ToolCallFamily::kDeepSeekV31, /*reasoning_open=*/true);
  ASSERT_TRUE(ds.ok()) << ds.status();
  ASSERT_NE(*ds, nullptr);
  const std::string ds_text = "</think><｜tool▁calls▁begin｜><｜tool▁call▁begin｜>get_weather<｜tool▁sep｜>" +
                              args + "<｜tool▁call▁end｜><｜tool▁calls▁end｜>";
  EXPECT_TRUE(ConstraintAccepts(*ds, ds_text));
  EXPECT_TRUE(ConstraintAccepts(*ds, TokenBytes("</think>") + TokenBytes("<｜tool▁calls▁begin｜>") +
                                         TokenBytes("<｜tool▁call▁begin｜>") + "get_weather" +
                                         TokenBytes("<｜tool▁sep｜>") + args +
                                         TokenBytes("<｜tool▁call▁end｜>") + TokenBytes("<｜tool▁calls▁end｜>")));
  EXPECT_FALSE(ConstraintAccepts(*ds, ds_text.substr(std::string("</think>").size())));
  EXPECT_FALSE(ConstraintAccepts(*ds, "</think>The weather is fine."));
  EXPECT_FALSE(ConstraintAccepts(*ds, "</think><｜tool▁calls▁begin｜><｜tool▁call▁begin｜>get_weather<｜tool▁sep｜>"
                                      "{\"city\": 3}<｜tool▁call▁end｜><｜tool▁calls▁end｜>"));
  const ChatDelta ds_back = SplitChatOutput(ds_text, chat::OutputFormat::kThink, true,
                                            chat::ToolCallFamily::kDeepSeekV31, named);
  ASSERT_EQ(ds_back.tool_calls.size(), 1u) << ds_back.content;
  EXPECT_EQ(ds_back.tool_calls[0].name, "get_weather");
  EXPECT_EQ(Json::parse(ds_back.tool_calls[0].arguments), Json::parse(args));
  EXPECT_EQ(ds_back.content, "");
  EXPECT_EQ(ds_back.reasoning_content, "");

  // Knowing the vocabulary: the tags it holds only as tokens, the others
  // only as text.
  auto known = ToolChoiceConstraint(named, chat::ToolCallFamily::kDeepSeekV31, true,
                                    [](std::string_view t) { return t != "</think>"; });
  ASSERT_TRUE(known.ok()) << known.status();
  EXPECT_TRUE(ConstraintAccepts(*known, "</think>" + TokenBytes("<｜tool▁calls▁begin｜>") +
                                            TokenBytes("<｜tool▁call▁begin｜>") + "get_weather" +
                                            TokenBytes("<｜tool▁sep｜>") + args +
                                            TokenBytes("<｜tool▁call▁end｜>") + TokenBytes("<｜tool▁calls▁end｜>")));
  EXPECT_FALSE(ConstraintAccepts(*known, ds_text));

  auto h = ToolChoiceConstraint(Request("required"), chat::ToolCallFamily::kHarmony);
  ASSERT_TRUE(h.ok()) << h.status();
  ASSERT_NE(*h, nullptr);
  const std::string call = "<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>" + args;
  const std::string reasoned = "<|channel|>analysis<|message|>Need the weather.<|end|><|start|>assistant" + call;
  EXPECT_TRUE(ConstraintAccepts(*h, call));
  EXPECT_TRUE(ConstraintAccepts(*h, reasoned));
  EXPECT_TRUE(ConstraintAccepts(*h, TokenBytes("<|channel|>") + "analysis" + TokenBytes("<|message|>") +
                                        "Need the weather." + TokenBytes("<|end|>") + TokenBytes("<|start|>") +
                                        "assistant" + TokenBytes("<|channel|>") +
                                        "commentary to=functions.search_docs " + TokenBytes("<|constrain|>") +
                                        "json" + TokenBytes("<|message|>") + "{}"));
  EXPECT_FALSE(ConstraintAccepts(*h, "<|channel|>final<|message|>Fine."));
  EXPECT_FALSE(ConstraintAccepts(*h, "<|channel|>analysis<|message|>a<|end|><|start|>assistant"
                                     "<|channel|>final<|message|>Fine."));
  EXPECT_FALSE(ConstraintAccepts(*h, "<|channel|>commentary to=functions.other <|constrain|>json<|message|>{}"));
  // <|call|> ends generation, so the call's frame stops at the arguments.
  EXPECT_FALSE(ConstraintAccepts(*h, call + "<|call|>"));
  const ChatDelta h_back = SplitChatOutput(reasoned, chat::OutputFormat::kHarmony, false,
                                           chat::ToolCallFamily::kHarmony, Request("required"));
  ASSERT_EQ(h_back.tool_calls.size(), 1u) << h_back.content;
  EXPECT_EQ(h_back.tool_calls[0].name, "get_weather");
  EXPECT_EQ(Json::parse(h_back.tool_calls[0].arguments), Json::parse(args));
  EXPECT_EQ(h_back.reasoning_content, "Need the weather.");
  EXPECT_EQ(h_back.content, "");
}

// The same on a Qwen3-Coder (Qwen3.5) template: XML parameters, raw text for
// strings, JSON for the rest, required ones always; what the grammar takes
// parses back as the call with those arguments.
TEST(ToolChoiceConstraintTest, Qwen3CoderCallsAreForcedAndParseBack) {
  const Json tools = Json::parse(R"([
    {"type": "function", "function": {"name": "book", "parameters": {"type": "object",
      "properties": {"city": {"type": "string", "description": "where"},
                     "nights": {"type": "integer"},
                     "tags": {"type": "array", "items": {"type": "string"}},
                     "room": {"type": "string", "enum": ["single", "double"]}},
      "required": ["city", "nights"]}}},
    {"type": "function", "function": {"name": "search_docs"}}])");
  auto request = [&](const Json& choice) {
    absl::StatusOr<ToolRequest> r = ParseToolRequest(tools, choice, Json());
    EXPECT_TRUE(r.ok()) << r.status();
    return *r;
  };
  const std::string full =
      "<tool_call>\n<function=book>\n<parameter=city>\nSão Paulo <b>centre</b>\n</parameter>\n"
      "<parameter=nights>\n3\n</parameter>\n<parameter=tags>\n[\"quiet\", \"view\"]\n</parameter>\n"
      "<parameter=room>\ndouble\n</parameter>\n</function>\n</tool_call>";
  const std::string minimal =
      "<tool_call>\n<function=book>\n<parameter=city>\nOslo\n</parameter>\n<parameter=nights>\n1\n"
      "</parameter>\n</function>\n</tool_call>";
  const std::string search = "<tool_call>\n<function=search_docs>\n</function>\n</tool_call>";
  auto named = ToolChoiceConstraint(request(Json::parse(R"({"type":"function","function":{"name":"book"}})")),
                                    chat::ToolCallFamily::kQwen3Coder);
  ASSERT_TRUE(named.ok()) << named.status();
  ASSERT_NE(*named, nullptr);
  EXPECT_TRUE(ConstraintAccepts(*named, full));
  EXPECT_TRUE(ConstraintAccepts(*named, minimal));
  EXPECT_FALSE(ConstraintAccepts(*named, search));
  // A required parameter missing, a non-integer, an enum miss, the closing
  // tag inside a raw string, properties out of order, plain text.
  for (const std::string& bad : std::vector<std::string>{
           "<tool_call>\n<function=book>\n<parameter=city>\nOslo\n</parameter>\n</function>\n</tool_call>",
           "<tool_call>\n<function=book>\n<parameter=city>\nOslo\n</parameter>\n<parameter=nights>\n"
           "two\n</parameter>\n</function>\n</tool_call>",
           "<tool_call>\n<function=book>\n<parameter=city>\nOslo\n</parameter>\n<parameter=nights>\n1\n"
           "</parameter>\n<parameter=room>\nsuite\n</parameter>\n</function>\n</tool_call>",
           "<tool_call>\n<function=book>\n<parameter=city>\nOs</parameter>lo\n</parameter>\n"
           "<parameter=nights>\n1\n</parameter>\n</function>\n</tool_call>",
           "<tool_call>\n<function=book>\n<parameter=nights>\n1\n</parameter>\n<parameter=city>\nOslo\n"
           "</parameter>\n</function>\n</tool_call>",
           "Sure."}) {
    EXPECT_FALSE(ConstraintAccepts(*named, bad)) << bad;
  }
  auto required = ToolChoiceConstraint(request("required"), chat::ToolCallFamily::kQwen3Coder);
  ASSERT_TRUE(required.ok()) << required.status();
  EXPECT_TRUE(ConstraintAccepts(*required, full));
  EXPECT_TRUE(ConstraintAccepts(*required, search));
  EXPECT_FALSE(ConstraintAccepts(*required, "<tool_call>\n<function=other>\n</function>\n</tool_call>"));

  const ChatDelta back = SplitChatOutput(full, chat::OutputFormat::kThink, false,
                                         chat::ToolCallFamily::kQwen3Coder, request("required"));
  ASSERT_EQ(back.tool_calls.size(), 1u) << back.content;
  EXPECT_EQ(back.tool_calls[0].name, "book");
  EXPECT_EQ(Json::parse(back.tool_calls[0].arguments),
            Json::parse(R"({"city": "São Paulo <b>centre</b>", "nights": 3, "tags": ["quiet", "view"],
                            "room": "double"})"));

  // What the grammar cannot enforce on raw text is refused, naming it.
  const Json bad_tools = Json::parse(R"([{"type": "function", "function": {"name": "f",
    "parameters": {"type": "object", "properties": {"s": {"type": "string", "maxLength": 4}}}}}])");
  absl::StatusOr<ToolRequest> r = ParseToolRequest(bad_tools, "required", Json());
  ASSERT_TRUE(r.ok());
  auto refused = ToolChoiceConstraint(*r, chat::ToolCallFamily::kQwen3Coder);
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(refused.status().message()), ::testing::HasSubstr("#/properties/s: maxLength"));
}

// GLM-4.5/4.6, GLM-4.7 and MiniMax-M2, whose arguments are tags as
// Qwen3-Coder's: the grammar writes the family's frame with one tag pair per
// parameter (raw text for strings, JSON for the rest, the required ones
// always), after the think block a generation prompt opened; what it takes
// parses back as the call.
TEST(ToolChoiceConstraintTest, GlmAndMiniMaxCallsAreForcedAndParseBack) {
  using F = chat::ToolCallFamily;
  const Json tools = Json::parse(R"([
    {"type": "function", "function": {"name": "book", "parameters": {"type": "object",
      "properties": {"city": {"type": "string"}, "nights": {"type": "integer"},
                     "room": {"type": "string", "enum": ["single", "double"]}},
      "required": ["city", "nights"]}}},
    {"type": "function", "function": {"name": "search_docs"}}])");
  auto request = [&](const Json& choice) {
    absl::StatusOr<ToolRequest> r = ParseToolRequest(tools, choice, Json());
    EXPECT_TRUE(r.ok()) << r.status();
    return *r;
  };
  struct FamilyCase {
    F family;
    std::string before;  // after a generation prompt that opened <think>
    std::string full, minimal, search, out_of_order, bad_enum;
  };
  const std::vector<FamilyCase> cases = {
      {F::kGlm45, "</think>\n\n",
       "<tool_call>book\n<arg_key>city</arg_key>\n<arg_value>São Paulo <b>x</b></arg_value>\n"
       "<arg_key>nights</arg_key>\n<arg_value>3</arg_value>\n<arg_key>room</arg_key>\n"
       "<arg_value>double</arg_value>\n</tool_call>",
       "<tool_call>book\n<arg_key>city</arg_key>\n<arg_value>Oslo</arg_value>\n<arg_key>nights"
       "</arg_key>\n<arg_value>1</arg_value>\n</tool_call>",
       "<tool_call>search_docs\n</tool_call>",
       "<tool_call>book\n<arg_key>nights</arg_key>\n<arg_value>1</arg_value>\n<arg_key>city"
       "</arg_key>\n<arg_value>Oslo</arg_value>\n</tool_call>",
       "<tool_call>book\n<arg_key>city</arg_key>\n<arg_value>Oslo</arg_value>\n<arg_key>nights"
       "</arg_key>\n<arg_value>1</arg_value>\n<arg_key>room</arg_key>\n<arg_value>suite</arg_value>\n"
       "</tool_call>"},
      {F::kGlm47, "</think>",
       "<tool_call>book<arg_key>city</arg_key><arg_value>São Paulo <b>x</b></arg_value>"
       "<arg_key>nights</arg_key><arg_value>3</arg_value><arg_key>room</arg_key>"
       "<arg_value>double</arg_value></tool_call>",
       "<tool_call>book<arg_key>city</arg_key><arg_value>Oslo</arg_value><arg_key>nights"
       "</arg_key><arg_value>1</arg_value></tool_call>",
       "<tool_call>search_docs</tool_call>",
       "<tool_call>book<arg_key>nights</arg_key><arg_value>1</arg_value><arg_key>city"
       "</arg_key><arg_value>Oslo</arg_value></tool_call>",
       "<tool_call>book<arg_key>city</arg_key><arg_value>Oslo</arg_value><arg_key>nights"
       "</arg_key><arg_value>1</arg_value><arg_key>room</arg_key><arg_value>suite</arg_value>"
       "</tool_call>"},
      {F::kMiniMaxM2, "</think>\n\n",
       "<minimax:tool_call>\n<invoke name=\"book\">\n<parameter name=\"city\">São Paulo <b>x</b>"
       "</parameter>\n<parameter name=\"nights\">3</parameter>\n<parameter name=\"room\">double"
       "</parameter>\n</invoke>\n</minimax:tool_call>",
       "<minimax:tool_call>\n<invoke name=\"book\">\n<parameter name=\"city\">Oslo</parameter>\n"
       "<parameter name=\"nights\">1</parameter>\n</invoke>\n</minimax:tool_call>",
       "<minimax:tool_call>\n<invoke name=\"search_docs\">\n</invoke>\n</minimax:tool_call>",
       "<minimax:tool_call>\n<invoke name=\"book\">\n<parameter name=\"nights\">1</parameter>\n"
       "<parameter name=\"city\">Oslo</parameter>\n</invoke>\n</minimax:tool_call>",
       "<minimax:tool_call>\n<invoke name=\"book\">\n<parameter name=\"city\">Oslo</parameter>\n"
       "<parameter name=\"nights\">1</parameter>\n<parameter name=\"room\">suite</parameter>\n"
       "</invoke>\n</minimax:tool_call>"},
  };
  const Json named_choice = Json::parse(R"({"type":"function","function":{"name":"book"}})");
  for (const FamilyCase& c : cases) {
    SCOPED_TRACE(chat::ToolCallFamilyName(c.family));
    auto named = ToolChoiceConstraint(request(named_choice), c.family);
    ASSERT_TRUE(named.ok()) << named.status();
    ASSERT_NE(*named, nullptr);
    EXPECT_TRUE(ConstraintAccepts(*named, c.full));
    EXPECT_TRUE(ConstraintAccepts(*named, c.minimal));
    EXPECT_FALSE(ConstraintAccepts(*named, c.search));
    EXPECT_FALSE(ConstraintAccepts(*named, c.out_of_order));
    EXPECT_FALSE(ConstraintAccepts(*named, c.bad_enum));
    EXPECT_FALSE(ConstraintAccepts(*named, "Sure."));
    auto required = ToolChoiceConstraint(request("required"), c.family);
    ASSERT_TRUE(required.ok()) << required.status();
    EXPECT_TRUE(ConstraintAccepts(*required, c.full));
    EXPECT_TRUE(ConstraintAccepts(*required, c.search));
    // After an opened think block: closed first, as the family's template does.
    auto opened = ToolChoiceConstraint(request("required"), c.family, /*reasoning_open=*/true);
    ASSERT_TRUE(opened.ok()) << opened.status();
    EXPECT_TRUE(ConstraintAccepts(*opened, c.before + c.minimal));
    EXPECT_FALSE(ConstraintAccepts(*opened, c.minimal));
    // The frames' tags as the vocabulary's special tokens.
    std::string as_tokens = c.minimal;
    for (std::string_view tag : chat::FrameTags(c.family)) {
      for (size_t at = 0; (at = as_tokens.find(tag, at)) != std::string::npos;) {
        const std::string bytes = grammar::TokenBytes(tag);
        as_tokens.replace(at, tag.size(), bytes);
        at += bytes.size();
      }
    }
    EXPECT_NE(as_tokens, c.minimal);
    EXPECT_TRUE(ConstraintAccepts(*named, as_tokens));

    const ChatDelta back = SplitChatOutput(c.before + c.full, chat::OutputFormat::kThink, true,
                                           c.family, request("required"));
    ASSERT_EQ(back.tool_calls.size(), 1u) << back.content;
    EXPECT_EQ(back.tool_calls[0].name, "book");
    EXPECT_EQ(Json::parse(back.tool_calls[0].arguments),
              Json::parse(R"({"city": "São Paulo <b>x</b>", "nights": 3, "room": "double"})"));
    EXPECT_EQ(back.content, "");
    EXPECT_EQ(back.reasoning_content, "");
  }
  // A property name that would break its tag is refused, naming it.
  const Json quoted = Json::parse(R"([{"type": "function", "function": {"name": "f",
    "parameters": {"type": "object", "properties": {"a\"b": {"type": "integer"}}}}}])");
  absl::StatusOr<ToolRequest> r = ParseToolRequest(quoted, "required", Json());
  ASSERT_TRUE(r.ok());
  auto refused = ToolChoiceConstraint(*r, F::kMiniMaxM2);
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(refused.status().message()),
              ::testing::HasSubstr("the property name 'a\"b' cannot be written as a <parameter name=\"...\"> tag"));
  EXPECT_TRUE(ToolChoiceConstraint(*r, F::kGlm45).ok());
}

// Llama 3.x: the call is the bare JSON object {"name": N, "parameters": A},
// one per answer (its template renders one call per message).
TEST(ToolChoiceConstraintTest, Llama3CallsAreForcedAndParseBack) {
  const std::string weather = "{\"name\": \"get_weather\", \"parameters\": {\"city\": \"Paris\"}}";
  const std::string search = "{\"name\": \"search_docs\", \"parameters\": {}}";
  auto required = ToolChoiceConstraint(Request("required"), chat::ToolCallFamily::kLlama3Json);
  ASSERT_TRUE(required.ok()) << required.status();
  ASSERT_NE(*required, nullptr);
  EXPECT_TRUE(ConstraintAccepts(*required, weather));
  EXPECT_TRUE(ConstraintAccepts(*required, search));
  EXPECT_FALSE(ConstraintAccepts(*required, weather + "\n" + search));
  EXPECT_FALSE(ConstraintAccepts(*required, "{\"name\": \"get_weather\", \"parameters\": {\"city\": 1}}"));
  EXPECT_FALSE(ConstraintAccepts(*required, "The weather is fine."));
  const ChatDelta back = SplitChatOutput(weather, chat::OutputFormat::kThink, false,
                                         chat::ToolCallFamily::kLlama3Json, Request("required"));
  ASSERT_EQ(back.tool_calls.size(), 1u) << back.content;
  EXPECT_EQ(back.tool_calls[0].name, "get_weather");
  EXPECT_EQ(Json::parse(back.tool_calls[0].arguments), Json::parse(R"({"city": "Paris"})"));
  EXPECT_EQ(back.content, "");
}

// tool_choice "required" with parallel_tool_calls (the default): the
// families that write one block per call may write several, and all of them
// come back; with parallel_tool_calls false exactly one.
TEST(ToolChoiceConstraintTest, RequiredWithParallelCallsAllowsSeveral) {
  struct Family {
    chat::ToolCallFamily family;
    std::string weather, search, separator;
  };
  const std::vector<Family> families = {
      {chat::ToolCallFamily::kHermes,
       "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>",
       "<tool_call>\n{\"name\": \"search_docs\", \"arguments\": {}}\n</tool_call>", "\n"},
      {chat::ToolCallFamily::kQwen3Coder,
       "<tool_call>\n<function=get_weather>\n<parameter=city>\nParis\n</parameter>\n</function>\n</tool_call>",
       "<tool_call>\n<function=search_docs>\n</function>\n</tool_call>", "\n"},
      {chat::ToolCallFamily::kGlm47,
       "<tool_call>get_weather<arg_key>city</arg_key><arg_value>Paris</arg_value></tool_call>",
       "<tool_call>search_docs</tool_call>", ""},
      {chat::ToolCallFamily::kGemma4, "<|tool_call>call:get_weather{city:<|\"|>Paris<|\"|>}<tool_call|>",
       "<|tool_call>call:search_docs{}<tool_call|>", ""},
  };
  for (const Family& f : families) {
    SCOPED_TRACE(chat::ToolCallFamilyName(f.family));
    const std::string two = f.weather + f.separator + f.search;
    auto parallel = ToolChoiceConstraint(Request("required"), f.family);
    ASSERT_TRUE(parallel.ok()) << parallel.status();
    EXPECT_TRUE(ConstraintAccepts(*parallel, f.weather));
    EXPECT_TRUE(ConstraintAccepts(*parallel, two));
    EXPECT_TRUE(ConstraintAccepts(*parallel, two + f.separator + f.weather));
    EXPECT_FALSE(ConstraintAccepts(*parallel, f.weather + "Done."));
    const chat::OutputFormat format =
        f.family == chat::ToolCallFamily::kGemma4 ? chat::OutputFormat::kThoughtChannel : chat::OutputFormat::kThink;
    const ChatDelta back = SplitChatOutput(two, format, false, f.family, Request("required"));
    ASSERT_EQ(back.tool_calls.size(), 2u) << back.content;
    EXPECT_EQ(back.tool_calls[0].name, "get_weather");
    EXPECT_EQ(back.tool_calls[1].name, "search_docs");
    EXPECT_EQ(back.content, "");
    auto single = ToolChoiceConstraint(Request("required", false), f.family);
    ASSERT_TRUE(single.ok()) << single.status();
    EXPECT_TRUE(ConstraintAccepts(*single, f.weather));
    EXPECT_FALSE(ConstraintAccepts(*single, two));
  }
}

// Gemma 4: the grammar writes "<|tool_call>call:N" + a dictionary in Gemma's
// syntax + "<tool_call|>" (after the thought channel's "<channel|>" when the
// prompt left it open); what it takes parses back as the call.
TEST(ToolChoiceConstraintTest, Gemma4CallsAreForcedAndParseBack) {
  const std::string weather = "<|tool_call>call:get_weather{city:<|\"|>Paris<|\"|>}<tool_call|>";
  const std::string search = "<|tool_call>call:search_docs{}<tool_call|>";
  auto named = ToolChoiceConstraint(Request(Json::parse(R"({"type":"function","function":{"name":"get_weather"}})")),
                                    chat::ToolCallFamily::kGemma4);
  ASSERT_TRUE(named.ok()) << named.status();
  ASSERT_NE(*named, nullptr);
  EXPECT_TRUE(ConstraintAccepts(*named, weather));
  EXPECT_TRUE(ConstraintAccepts(*named, "<|tool_call>call:get_weather{}<tool_call|>"));  // city is optional
  EXPECT_FALSE(ConstraintAccepts(*named, "<|tool_call>call:get_weather{city:3}<tool_call|>"));
  EXPECT_FALSE(ConstraintAccepts(*named, "<|tool_call>call:get_weather{town:<|\"|>Paris<|\"|>}<tool_call|>"));
  EXPECT_FALSE(ConstraintAccepts(*named, search));
  EXPECT_FALSE(ConstraintAccepts(*named, "<|tool_call>call:get_weather{\"city\":\"Paris\"}<tool_call|>"));
  EXPECT_FALSE(ConstraintAccepts(*named, "<|tool_call>call:get_weather{city:<|\"|>Paris<|\"|>,}<tool_call|>"));
  EXPECT_FALSE(ConstraintAccepts(*named, "Sure."));
  auto required = ToolChoiceConstraint(Request("required"), chat::ToolCallFamily::kGemma4);
  ASSERT_TRUE(required.ok()) << required.status();
  EXPECT_TRUE(ConstraintAccepts(*required, weather));
  EXPECT_TRUE(ConstraintAccepts(*required, search));
  EXPECT_FALSE(ConstraintAccepts(*required, "<|tool_call>call:other{}<tool_call|>"));
  auto opened = ToolChoiceConstraint(Request("required"), chat::ToolCallFamily::kGemma4, /*reasoning_open=*/true);
  ASSERT_TRUE(opened.ok()) << opened.status();
  EXPECT_TRUE(ConstraintAccepts(*opened, "<channel|>" + weather));
  EXPECT_FALSE(ConstraintAccepts(*opened, weather));
  // The frame's tags as the vocabulary's special tokens.
  const std::string as_tokens = grammar::TokenBytes("<|tool_call>") + "call:get_weather{city:" +
                                grammar::TokenBytes("<|\"|>") + "Paris" + grammar::TokenBytes("<|\"|>") + "}" +
                                grammar::TokenBytes("<tool_call|>");
  EXPECT_TRUE(ConstraintAccepts(*named, as_tokens));
  const ChatDelta back = SplitChatOutput(weather, chat::OutputFormat::kThoughtChannel, false,
                                         chat::ToolCallFamily::kGemma4, Request("required"));
  ASSERT_EQ(back.tool_calls.size(), 1u) << back.content;
  EXPECT_EQ(back.tool_calls[0].name, "get_weather");
  EXPECT_EQ(Json::parse(back.tool_calls[0].arguments), Json::parse(R"({"city": "Paris"})"));
  EXPECT_EQ(back.content, "");
}

// Gemma 4's arguments follow the schema where it says simply: properties in
// order (the required ones always, commas only between those written),
// types, enums, a bounded string, an array's items and bounds, nested
// objects, nullable; a map where additionalProperties allows it; any value
// under a keyword it does not follow (anyOf). What it takes parses back.
TEST(ToolChoiceConstraintTest, Gemma4ArgumentsFollowTheSchema) {
  const Json tools = Json::parse(R"([{"type": "function", "function": {"name": "book", "parameters": {
    "type": "object", "required": ["city", "nights"], "properties": {
      "city": {"type": "string", "maxLength": 12},
      "nights": {"type": "integer"},
      "room": {"type": "string", "enum": ["single", "double"]},
      "tags": {"type": "array", "items": {"type": "string"}, "maxItems": 2},
      "opts": {"type": "object", "properties": {"late": {"type": "boolean"}, "note": {"type": ["string", "null"]},
                                                "price": {"type": "number"}}},
      "extra": {"type": "object", "additionalProperties": true},
      "either": {"anyOf": [{"type": "integer"}, {"type": "string"}]}}}}}])");
  absl::StatusOr<ToolRequest> r = ParseToolRequest(tools, "required", Json());
  ASSERT_TRUE(r.ok()) << r.status();
  auto g = ToolChoiceConstraint(*r, chat::ToolCallFamily::kGemma4);
  ASSERT_TRUE(g.ok()) << g.status();
  const std::string q = "<|\"|>";
  auto call = [&](const std::string& args) { return "<|tool_call>call:book" + args + "<tool_call|>"; };
  const std::string full = call("{city:" + q + "Paris" + q + ",nights:3,room:" + q + "double" + q + ",tags:[" + q +
                                "a" + q + "," + q + "b" + q + "],opts:{late:true,note:null,price:-1.5e3}," +
                                "extra:{any:[1,{x:" + q + "y" + q + "}]},either:" + q + "z" + q + "}");
  for (const std::string& ok : {call("{city:" + q + "Paris" + q + ",nights:3}"), full,
                                call("{city:" + q + q + ",nights:-2,opts:{},either:7}"),
                                call("{city:" + q + "Oslo" + q + ",nights:1,tags:[],opts:{note:" + q + "x" + q + "}}")}) {
    EXPECT_TRUE(ConstraintAccepts(*g, ok)) << ok;
    const ChatDelta back =
        SplitChatOutput(ok, chat::OutputFormat::kThoughtChannel, false, chat::ToolCallFamily::kGemma4, *r);
    EXPECT_EQ(back.tool_calls.size(), 1u) << ok;
  }
  for (const std::string& bad :
       {call("{nights:3,city:" + q + "Paris" + q + "}"), call("{city:" + q + "Paris" + q + "}"),
        call("{city:" + q + "Paris" + q + ",nights:3.5}"),
        call("{city:" + q + "Paris" + q + ",nights:3,room:" + q + "suite" + q + "}"),
        call("{city:" + q + "Paris" + q + ",nights:3,tags:[" + q + "a" + q + "," + q + "b" + q + "," + q + "c" + q + "]}"),
        call("{city:" + q + "Paris in spring" + q + ",nights:3}"), call("{city:" + q + "a<b" + q + ",nights:3}"),
        call("{city:" + q + "Paris" + q + ",nights:3,other:1}"), call("{,city:" + q + "Paris" + q + ",nights:3}"),
        call("{city:" + q + "Paris" + q + ",nights:3,opts:{late:1}}")}) {
    EXPECT_FALSE(ConstraintAccepts(*g, bad)) << bad;
  }
  const ChatDelta back =
      SplitChatOutput(full, chat::OutputFormat::kThoughtChannel, false, chat::ToolCallFamily::kGemma4, *r);
  ASSERT_EQ(back.tool_calls.size(), 1u);
  EXPECT_EQ(Json::parse(back.tool_calls[0].arguments),
            Json::parse(R"({"city": "Paris", "nights": 3, "room": "double", "tags": ["a", "b"],
                            "opts": {"late": true, "note": null, "price": -1500.0},
                            "extra": {"any": [1, {"x": "y"}]}, "either": "z"})"));
  // A property name that cannot be a bare key is refused, naming it.
  const Json colon = Json::parse(R"([{"type": "function", "function": {"name": "f",
    "parameters": {"type": "object", "properties": {"a:b": {"type": "integer"}}}}}])");
  absl::StatusOr<ToolRequest> rc = ParseToolRequest(colon, "required", Json());
  ASSERT_TRUE(rc.ok());
  auto refused = ToolChoiceConstraint(*rc, chat::ToolCallFamily::kGemma4);
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(refused.status().message()),
              ::testing::HasSubstr("'a:b' cannot be written as a bare Gemma key"));
}

}  // namespace
}  // namespace moesplit::dense
