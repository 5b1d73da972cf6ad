// Anthropic's Messages API shapes: a request translated into the chat path's
// OpenAI body (every block kind, tools, tool_choice, thinking), refusals
// naming the field as Anthropic does, the answer's content and stop_reason,
// and a stream's exact event sequence.
#include "services/dense/anthropic_api.h"

#include <string>
#include <vector>

#include "absl/strings/str_split.h"
#include "gtest/gtest.h"

namespace moesplit::dense {
namespace {

using Json = nlohmann::ordered_json;

Json Chat(const std::string& body, bool count = false) {
  absl::StatusOr<Json> c = AnthropicToChat(Json::parse(body), count);
  EXPECT_TRUE(c.ok()) << c.status();
  return c.ok() ? *c : Json();
}

std::string Refusal(const std::string& body, bool count = false) {
  absl::StatusOr<Json> c = AnthropicToChat(Json::parse(body), count);
  EXPECT_FALSE(c.ok()) << body;
  EXPECT_EQ(c.status().code(), absl::StatusCode::kInvalidArgument);
  return std::string(c.status().message());
}

TEST(AnthropicApiTest, TranslatesEveryBlockKindIntoTheChatMessages) {
  const Json c = Chat(R"({
    "model": "m", "max_tokens": 64,
    "system": [{"type": "text", "text": "one"}, {"type": "text", "text": "two", "cache_control": {"type": "ephemeral"}}],
    "messages": [
      {"role": "user", "content": "Weather in Oslo?"},
      {"role": "assistant", "content": [
        {"type": "thinking", "thinking": "use the tool", "signature": "sig"},
        {"type": "redacted_thinking", "data": "xyz"},
        {"type": "text", "text": "Let me look."},
        {"type": "tool_use", "id": "toolu_1", "name": "get_weather", "input": {"city": "Oslo"}}]},
      {"role": "user", "content": [
        {"type": "tool_result", "tool_use_id": "toolu_1", "content": [{"type": "text", "text": "-3C"}]},
        {"type": "tool_result", "tool_use_id": "toolu_2", "content": "no such city", "is_error": true},
        {"type": "text", "text": "And Paris?"}]}],
    "stop_sequences": ["END"], "temperature": 0.5, "top_p": 0.9, "top_k": 5, "stream": true,
    "metadata": {"user_id": "u"}})");
  const Json want = Json::parse(R"([
    {"role": "system", "content": [{"type": "text", "text": "one"}, {"type": "text", "text": "two"}]},
    {"role": "user", "content": "Weather in Oslo?"},
    {"role": "assistant", "content": "Let me look.", "reasoning_content": "use the tool",
     "tool_calls": [{"id": "toolu_1", "type": "function",
                     "function": {"name": "get_weather", "arguments": "{\"city\":\"Oslo\"}"}}]},
    {"role": "tool", "tool_call_id": "toolu_1", "content": "-3C"},
    {"role": "tool", "tool_call_id": "toolu_2", "content": "Error: no such city"},
    {"role": "user", "content": [{"type": "text", "text": "And Paris?"}]}])");
  EXPECT_EQ(c["messages"], want) << c["messages"].dump(1);
  EXPECT_EQ(c["model"], "m");
  EXPECT_EQ(c["max_tokens"], 64);
  EXPECT_EQ(c["stop"], Json::parse(R"(["END"])"));
  EXPECT_EQ(c["temperature"], 0.5);
  EXPECT_EQ(c["top_p"], 0.9);
  EXPECT_EQ(c["top_k"], 5);
  EXPECT_EQ(c["stream"], true);
  EXPECT_FALSE(c.contains("metadata"));
}

TEST(AnthropicApiTest, ToolsAndToolChoiceBecomeTheOpenAiFields) {
  const std::string tools =
      R"("tools": [{"name": "get_weather", "description": "Weather", "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}}}])";
  const Json c = Chat(R"({"model": "m", "max_tokens": 8, "messages": [], )" + tools + "}");
  EXPECT_EQ(c["tools"], Json::parse(R"([{"type": "function", "function": {"name": "get_weather",
      "description": "Weather", "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}}])"));
  EXPECT_FALSE(c.contains("tool_choice"));
  struct Case {
    const char* choice;
    const char* want;
  };
  for (const Case& k : {Case{R"({"type": "auto"})", R"("auto")"}, Case{R"({"type": "any"})", R"("required")"},
                        Case{R"({"type": "none"})", R"("none")"},
                        Case{R"({"type": "tool", "name": "get_weather"})",
                             R"({"type": "function", "function": {"name": "get_weather"}})"}}) {
    const Json t = Chat(R"({"model": "m", "max_tokens": 8, "messages": [], )" + tools +
                        R"(, "tool_choice": )" + k.choice + "}");
    EXPECT_EQ(t["tool_choice"], Json::parse(k.want)) << k.choice;
    EXPECT_FALSE(t.contains("parallel_tool_calls"));
  }
  const Json one = Chat(R"({"model": "m", "max_tokens": 8, "messages": [], )" + tools +
                        R"(, "tool_choice": {"type": "any", "disable_parallel_tool_use": true}})");
  EXPECT_EQ(one["parallel_tool_calls"], false);
}

TEST(AnthropicApiTest, ThinkingSetsTheTemplatesEnableThinking) {
  const std::string base = R"({"model": "m", "max_tokens": 4096, "messages": [], "thinking": )";
  EXPECT_EQ(Chat(base + R"({"type": "disabled"}})")["chat_template_kwargs"]["enable_thinking"], false);
  EXPECT_EQ(Chat(base + R"({"type": "enabled", "budget_tokens": 2048}})")["chat_template_kwargs"]
                ["enable_thinking"],
            true);
  EXPECT_EQ(Chat(base + R"({"type": "adaptive"}})")["chat_template_kwargs"]["enable_thinking"], true);
  EXPECT_FALSE(Chat(R"({"model": "m", "max_tokens": 8, "messages": []})").contains("chat_template_kwargs"));
  EXPECT_EQ(Refusal(base + R"({"type": "enabled", "budget_tokens": 4096}})"),
            "max_tokens: max_tokens must be greater than thinking.budget_tokens (4096)");
  EXPECT_EQ(Refusal(base + R"({"type": "enabled", "budget_tokens": 100}})"),
            "thinking.budget_tokens: Input should be greater than or equal to 1024");
}

TEST(AnthropicApiTest, RefusesWhatItDoesNotDoNamingTheField) {
  const std::string m = R"("model": "m", "max_tokens": 8)";
  EXPECT_EQ(Refusal(R"({"model": "m", "messages": []})"), "max_tokens: Field required");
  EXPECT_EQ(Refusal(R"({"max_tokens": 8, "messages": []})"), "model: Field required");
  EXPECT_EQ(Refusal(R"({"model": "m", "max_tokens": 0, "messages": []})"),
            "max_tokens: Input should be greater than or equal to 1");
  EXPECT_EQ(Refusal("{" + m + "}"), "messages: Field required");
  EXPECT_EQ(Refusal("{" + m + R"(, "messages": [], "frequency_penalty": 1})"),
            "frequency_penalty: Extra inputs are not permitted");
  EXPECT_EQ(Refusal("{" + m + R"(, "messages": [{"role": "user", "content": "x", "name": "a"}]})"),
            "messages.0.name: Extra inputs are not permitted");
  EXPECT_EQ(Refusal("{" + m + R"(, "messages": [{"role": "system", "content": "x"}]})"),
            "messages.0.role: Input should be 'user' or 'assistant', got 'system'");
  EXPECT_EQ(Refusal("{" + m + R"(, "messages": [{"role": "user", "content": [{"type": "text", "text": "a"},
      {"type": "image", "source": {"type": "url", "url": "http://x"}}]}]})"),
            "messages.0.content.1.type: 'image' blocks are not supported (the model reads text only)");
  EXPECT_EQ(Refusal("{" + m + R"(, "messages": [], "tools": [{"type": "web_search_20250305", "name": "web_search"}]})"),
            "tools.0.type: 'web_search_20250305' is a server tool, which this server does not run; "
            "only custom tools (name, description, input_schema)");
  EXPECT_EQ(Refusal("{" + m + R"(, "messages": [], "tools": [{"name": "f"}]})"),
            "tools.0.input_schema: Field required");
  EXPECT_EQ(Refusal("{" + m + R"(, "messages": [], "tool_choice": {"type": "required"}})"),
            "tool_choice.type: Input should be 'auto', 'any', 'tool' or 'none', got 'required'");
  EXPECT_EQ(Refusal("{" + m + R"(, "messages": [], "temperature": 1.5})"),
            "temperature: Input should be between 0 and 1");
  EXPECT_EQ(Refusal("{" + m + R"(, "messages": [], "stop_sequences": ["a", 1]})"),
            "stop_sequences.1: Input should be a valid string");
  EXPECT_EQ(Refusal("{" + m + R"(, "messages": [{"role": "assistant", "content": [{"type": "tool_use", "id": "a", "name": "f", "input": "x"}]}]})"),
            "messages.0.content.0.input: Input should be an object");
  // count_tokens takes no generation fields.
  EXPECT_EQ(Refusal(R"({"model": "m", "max_tokens": 8, "messages": []})", true),
            "max_tokens: Extra inputs are not permitted");
  const Json counted = Chat(R"({"model": "m", "system": "s", "messages": [{"role": "user", "content": "x"}]})", true);
  EXPECT_EQ(counted["messages"].size(), 2u);
  EXPECT_FALSE(counted.contains("max_tokens"));
}

TEST(AnthropicApiTest, StopReasonUsageAndErrorTypes) {
  GenerateOutcome o;
  o.finish_reason = "stop";
  o.prompt_tokens = 100;
  o.cached_tokens = 64;
  o.completion_tokens = 7;
  EXPECT_EQ(AnthropicStopOf(o, false).reason, "end_turn");
  EXPECT_TRUE(AnthropicStopOf(o, false).sequence.is_null());
  EXPECT_EQ(AnthropicStopOf(o, true).reason, "tool_use");
  o.stop_string = "END";
  EXPECT_EQ(AnthropicStopOf(o, false).reason, "stop_sequence");
  EXPECT_EQ(AnthropicStopOf(o, false).sequence, "END");
  o.finish_reason = "length";
  EXPECT_EQ(AnthropicStopOf(o, true).reason, "max_tokens");
  EXPECT_EQ(AnthropicUsage(o), Json::parse(R"({"input_tokens": 36, "cache_creation_input_tokens": 0,
      "cache_read_input_tokens": 64, "output_tokens": 7})"));
  EXPECT_STREQ(AnthropicErrorType(400), "invalid_request_error");
  EXPECT_STREQ(AnthropicErrorType(401), "authentication_error");
  EXPECT_STREQ(AnthropicErrorType(404), "not_found_error");
  EXPECT_STREQ(AnthropicErrorType(413), "request_too_large");
  EXPECT_STREQ(AnthropicErrorType(429), "rate_limit_error");
  EXPECT_STREQ(AnthropicErrorType(503), "overloaded_error");
  EXPECT_STREQ(AnthropicErrorType(500), "api_error");
  const HttpReply r = AnthropicErrorReply(404, "no such model");
  EXPECT_EQ(r.status, 404);
  EXPECT_EQ(Json::parse(r.body), Json::parse(R"({"type": "error", "error": {"type": "not_found_error",
      "message": "no such model"}})"));
}

TEST(AnthropicApiTest, TheWholeAnswersContentBlocks) {
  ChatDelta a;
  a.reasoning_content = "hmm";
  a.content = "\n\n";  // whitespace only: no text block
  a.tool_calls = {{"call_1", "f", R"({"x":1})"}};
  EXPECT_EQ(AnthropicContent(a), Json::parse(R"([{"type": "thinking", "thinking": "hmm", "signature": ""},
      {"type": "tool_use", "id": "call_1", "name": "f", "input": {"x": 1}}])"));
  a = ChatDelta();
  a.content = "Hi";
  const Json m = AnthropicMessage("msg_1", "mod", a, {"end_turn", nullptr}, Json::object());
  EXPECT_EQ(m, Json::parse(R"({"id": "msg_1", "type": "message", "role": "assistant", "model": "mod",
      "content": [{"type": "text", "text": "Hi"}], "stop_reason": "end_turn", "stop_sequence": null,
      "usage": {}})"));
}

// What Claude Code sends beside the basics: context_management (checked,
// not applied), tool hints, strict, and output_config's JSON schema.
TEST(AnthropicApiTest, ClaudeCodesExtraFieldsAreAcceptedOrTakeEffect) {
  const Json c = Chat(R"({"model": "m", "max_tokens": 8, "messages": [],
    "context_management": {"edits": [{"type": "clear_thinking_20251015", "keep": "all"}]},
    "tools": [{"name": "f", "input_schema": {"type": "object"}, "strict": true,
               "eager_input_streaming": true, "defer_loading": false}],
    "output_config": {"format": {"type": "json_schema", "schema": {"type": "object"}}}})");
  EXPECT_EQ(c["tools"][0]["function"]["strict"], true);
  EXPECT_EQ(c["response_format"], Json::parse(R"({"type": "json_schema",
      "json_schema": {"name": "output", "schema": {"type": "object"}}})"));
  EXPECT_FALSE(c.contains("context_management"));
  EXPECT_EQ(Refusal(R"({"model": "m", "max_tokens": 8, "messages": [], "output_config": {"effort": "high"}})"),
            "output_config.effort: effort is not supported by this server (use thinking to turn "
            "reasoning on or off)");
  EXPECT_EQ(Refusal(R"({"model": "m", "max_tokens": 8, "messages": [], "context_management": {"edits": [3]}})"),
            "context_management.edits.0: Input should be an object");
  EXPECT_EQ(Refusal(R"({"model": "m", "max_tokens": 8, "messages": [], "tools": [{"name": "f",
      "input_schema": {"type": "object"}, "defer_loading": "yes"}]})"),
            "tools.0.defer_loading: Input should be a valid boolean");
  // count_tokens takes them too (output_config's format does not change the prompt).
  EXPECT_FALSE(Chat(R"({"model": "m", "messages": [], "output_config": {"format": {"type": "json_schema",
      "schema": {"type": "object"}}}, "context_management": {}})", true).contains("response_format"));
}

// (event name, data) of an SSE text, checking each event's framing.
std::vector<Json> Events(const std::string& sse) {
  std::vector<Json> out;
  for (absl::string_view e : absl::StrSplit(sse, "\n\n", absl::SkipEmpty())) {
    std::vector<std::string> lines = absl::StrSplit(e, '\n');
    EXPECT_EQ(lines.size(), 2u) << e;
    EXPECT_EQ(lines[0].rfind("event: ", 0), 0u);
    EXPECT_EQ(lines[1].rfind("data: ", 0), 0u);
    Json d = Json::parse(lines[1].substr(6));
    EXPECT_EQ(lines[0].substr(7), d["type"].get<std::string>());
    out.push_back(std::move(d));
  }
  return out;
}

TEST(AnthropicApiTest, AStreamsEventsAreAnthropicsSequence) {
  AnthropicStream s("msg_1", "mod");
  std::string sse = s.Start(Json{{"input_tokens", 10}});
  ChatDelta p;
  p.reasoning_content = "think";
  sse += s.Push(p);
  p = ChatDelta();
  p.reasoning_content = "ing";
  p.content = "\n\n";  // held: no block yet
  sse += s.Push(p);
  p = ChatDelta();
  p.content = "Hi";
  sse += s.Push(p);
  p = ChatDelta();
  p.content = " there";
  p.tool_calls = {{"call_1", "f", R"({"x": 1})"}};
  sse += s.Push(p);
  GenerateOutcome o;
  o.finish_reason = "stop";
  o.completion_tokens = 5;
  sse += s.Finish(ChatDelta(), AnthropicStopOf(o, true), AnthropicUsage(o));
  const std::vector<Json> e = Events(sse);
  std::vector<std::string> kinds;
  for (const Json& x : e) {
    std::string k = x["type"];
    if (x.contains("delta") && x["delta"].contains("type")) k += "/" + x["delta"]["type"].get<std::string>();
    if (x.contains("content_block")) k += "/" + x["content_block"]["type"].get<std::string>();
    if (x.contains("index")) k += "#" + std::to_string(x["index"].get<int>());
    kinds.push_back(k);
  }
  EXPECT_EQ(kinds, (std::vector<std::string>{
                       "message_start", "ping",
                       "content_block_start/thinking#0", "content_block_delta/thinking_delta#0",
                       "content_block_delta/thinking_delta#0", "content_block_delta/signature_delta#0",
                       "content_block_stop#0",
                       "content_block_start/text#1", "content_block_delta/text_delta#1",
                       "content_block_delta/text_delta#1", "content_block_stop#1",
                       "content_block_start/tool_use#2", "content_block_delta/input_json_delta#2",
                       "content_block_stop#2", "message_delta", "message_stop"}));
  EXPECT_EQ(e[0]["message"], Json::parse(R"({"id": "msg_1", "type": "message", "role": "assistant",
      "model": "mod", "content": [], "stop_reason": null, "stop_sequence": null,
      "usage": {"input_tokens": 10, "output_tokens": 0}})"));
  EXPECT_EQ(e[8]["delta"]["text"], "\n\nHi");  // the held whitespace goes with the text
  EXPECT_EQ(e[11]["content_block"], Json::parse(R"({"type": "tool_use", "id": "call_1", "name": "f", "input": {}})"));
  EXPECT_EQ(e[12]["delta"]["partial_json"], R"({"x":1})");
  EXPECT_EQ(e[14]["delta"], Json::parse(R"({"stop_reason": "tool_use", "stop_sequence": null})"));
  EXPECT_EQ(e[14]["usage"]["output_tokens"], 5);
  EXPECT_EQ(Events(AnthropicStream::Error(503, "busy"))[0],
            Json::parse(R"({"type": "error", "error": {"type": "overloaded_error", "message": "busy"}})"));
}

}  // namespace
}  // namespace moesplit::dense
