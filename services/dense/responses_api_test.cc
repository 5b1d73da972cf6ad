// OpenAI's Responses API shapes: a request translated into the chat path's
// OpenAI body (every input item kind, tools, tool_choice, text.format,
// reasoning, previous_response_id), refusals naming the field as OpenAI's
// `param`, the answer's output items and usage, a stream's exact event
// sequence, and the store's bounds and expiry.
#include "services/dense/responses_api.h"

#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "services/dense/openai_api.h"

namespace moesplit::dense {
namespace {

using Json = nlohmann::ordered_json;

ResponsesRequest Req(const std::string& body, ResponseStore* store = nullptr) {
  absl::StatusOr<ResponsesRequest> r = ResponsesToChat(Json::parse(body), store);
  EXPECT_TRUE(r.ok()) << r.status();
  return r.ok() ? *r : ResponsesRequest();
}

// The refusal's `param` and message.
std::pair<std::string, std::string> Refusal(const std::string& body, ResponseStore* store = nullptr,
                                            absl::StatusCode code = absl::StatusCode::kInvalidArgument) {
  absl::StatusOr<ResponsesRequest> r = ResponsesToChat(Json::parse(body), store);
  EXPECT_FALSE(r.ok()) << body;
  if (r.ok()) return {};
  EXPECT_EQ(r.status().code(), code) << r.status();
  auto p = r.status().GetPayload(kParamPayload);
  return {p ? std::string(*p) : "", std::string(r.status().message())};
}

TEST(ResponsesApiTest, TranslatesEveryInputItemKindIntoTheChatMessages) {
  const ResponsesRequest r = Req(R"({
    "model": "m", "instructions": "Be brief.",
    "input": [
      {"role": "developer", "content": "dev"},
      {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "Weather"},
                                                      {"type": "input_text", "text": "in Oslo?"}]},
      {"type": "reasoning", "id": "rs_1", "summary": [{"type": "summary_text", "text": "short"}],
       "content": [{"type": "reasoning_text", "text": "use the tool"}], "encrypted_content": null},
      {"type": "message", "role": "assistant", "id": "msg_1", "status": "completed",
       "content": [{"type": "output_text", "text": "Let me look.", "annotations": []}]},
      {"type": "function_call", "id": "fc_1", "call_id": "call_1", "name": "get_weather",
       "arguments": "{\"city\":\"Oslo\"}", "status": "completed"},
      {"type": "function_call", "call_id": "call_2", "name": "get_time", "arguments": "{}"},
      {"type": "function_call_output", "call_id": "call_1", "output": "-3C"},
      {"type": "function_call_output", "call_id": "call_2", "output": [{"type": "input_text", "text": "noon"}]},
      {"type": "reasoning", "summary": [{"type": "summary_text", "text": "only a summary"}]},
      {"type": "function_call", "call_id": "call_3", "name": "get_time", "arguments": "{}"},
      {"type": "function_call_output", "call_id": "call_3", "output": "1pm"},
      {"role": "user", "content": "And Paris?"}],
    "max_output_tokens": 64, "temperature": 0.5, "top_p": 0.9, "stream": true, "store": false,
    "parallel_tool_calls": false, "include": ["reasoning.encrypted_content"],
    "prompt_cache_key": "k", "metadata": {"a": "b"}})");
  const Json want = Json::parse(R"([
    {"role": "system", "content": "Be brief."},
    {"role": "developer", "content": "dev"},
    {"role": "user", "content": "Weather\nin Oslo?"},
    {"role": "assistant", "content": "Let me look.", "reasoning_content": "use the tool",
     "tool_calls": [{"id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": "{\"city\":\"Oslo\"}"}},
                    {"id": "call_2", "type": "function", "function": {"name": "get_time", "arguments": "{}"}}]},
    {"role": "tool", "tool_call_id": "call_1", "content": "-3C"},
    {"role": "tool", "tool_call_id": "call_2", "content": "noon"},
    {"role": "assistant", "content": null, "reasoning_content": "only a summary",
     "tool_calls": [{"id": "call_3", "type": "function", "function": {"name": "get_time", "arguments": "{}"}}]},
    {"role": "tool", "tool_call_id": "call_3", "content": "1pm"},
    {"role": "user", "content": "And Paris?"}])");
  EXPECT_EQ(r.chat["messages"], want) << r.chat["messages"].dump(1);
  // The history leaves the instructions out (they are not carried over).
  EXPECT_EQ(r.history.size(), want.size() - 1);
  EXPECT_EQ(r.chat["max_tokens"], 64);
  EXPECT_EQ(r.chat["temperature"], 0.5);
  EXPECT_EQ(r.chat["top_p"], 0.9);
  EXPECT_EQ(r.chat["stream"], true);
  EXPECT_EQ(r.chat["parallel_tool_calls"], false);
  EXPECT_FALSE(r.store);
  EXPECT_EQ(r.echo["instructions"], "Be brief.");
  EXPECT_EQ(r.echo["store"], false);
  EXPECT_EQ(r.echo["metadata"], Json::parse(R"({"a": "b"})"));
  EXPECT_EQ(Req(R"({"input": "Hi"})").chat["messages"],
            Json::parse(R"([{"role": "user", "content": "Hi"}])"));
}

TEST(ResponsesApiTest, ToolsToolChoiceTextFormatAndReasoning) {
  const ResponsesRequest r = Req(R"({
    "input": "x",
    "tools": [{"type": "function", "name": "f", "description": "d",
               "parameters": {"type": "object", "properties": {}}, "strict": true},
              {"type": "web_search"}],
    "tool_choice": {"type": "function", "name": "f"},
    "text": {"format": {"type": "json_schema", "name": "out", "strict": true,
                        "schema": {"type": "object", "properties": {"a": {"type": "integer"}}}}},
    "reasoning": {"effort": "none", "summary": "auto"}})");
  EXPECT_EQ(r.chat["tools"], Json::parse(R"([{"type": "function", "function": {"name": "f",
      "description": "d", "parameters": {"type": "object", "properties": {}}, "strict": true}}])"));
  EXPECT_EQ(r.chat["tool_choice"], Json::parse(R"({"type": "function", "function": {"name": "f"}})"));
  EXPECT_EQ(r.chat["response_format"]["type"], "json_schema");
  EXPECT_EQ(r.chat["response_format"]["json_schema"]["name"], "out");
  EXPECT_EQ(r.chat["response_format"]["json_schema"]["schema"]["properties"]["a"]["type"], "integer");
  EXPECT_EQ(r.chat["chat_template_kwargs"], Json::parse(R"({"enable_thinking": false})"));
  EXPECT_TRUE(r.summary);
  EXPECT_EQ(r.echo["reasoning"], Json::parse(R"({"effort": "none", "summary": "auto"})"));
  EXPECT_EQ(r.echo["tools"].size(), 2u);  // echoed as sent
  EXPECT_EQ(Req(R"({"input": "x", "text": {"format": {"type": "json_object"}}})").chat["response_format"],
            Json::parse(R"({"type": "json_object"})"));
  EXPECT_FALSE(Req(R"({"input": "x", "text": {"format": {"type": "text"}}})").chat.contains("response_format"));
  EXPECT_EQ(Req(R"({"input": "x", "reasoning": {"effort": "high"}})").chat["chat_template_kwargs"],
            Json::parse(R"({"enable_thinking": true})"));
  EXPECT_EQ(Req(R"({"input": "x", "tool_choice": "required", "tools": [{"type": "function", "name": "f"}]})")
                .chat["tool_choice"], "required");
  // Only web_search tools: no tools at all.
  EXPECT_FALSE(Req(R"({"input": "x", "tools": [{"type": "web_search_preview"}]})").chat.contains("tools"));
}

TEST(ResponsesApiTest, BadInputIsRefusedNamingTheField) {
  struct Case {
    const char* body;
    const char* param;
    const char* message_part;
  } cases[] = {
      {R"({"model": "m"})", "input", "Missing required parameter"},
      {R"({"input": 3})", "input", "expected a string or an array"},
      {R"({"input": "x", "frobnicate": 1})", "frobnicate", "Unknown parameter: 'frobnicate'"},
      {R"({"input": [{"role": "tool", "content": "x"}]})", "input[0].role", "'tool'"},
      {R"({"input": [{"role": "user", "content": [{"type": "input_image", "image_url": "u"}]}]})",
       "input[0].content[0].type", "'input_image'"},
      {R"({"input": [{"type": "computer_call_output", "call_id": "x"}]})", "input[0].type",
       "'computer_call_output'"},
      {R"({"input": [{"type": "function_call", "call_id": "c", "name": "f"}]})",
       "input[0].arguments", "Missing required parameter"},
      {R"({"input": [{"type": "function_call_output", "call_id": "c"}]})", "input[0].output",
       "Missing required parameter"},
      {R"({"input": "x", "tools": [{"type": "file_search"}]})", "tools[0].type", "'file_search'"},
      {R"({"input": "x", "tools": [{"type": "image_generation"}]})", "tools[0].type", "'image_generation'"},
      {R"({"input": "x", "tools": [{"type": "local_shell"}]})", "tools[0].type", "'local_shell'"},
      {R"({"input": "x", "tools": [{"type": "custom", "name": "apply_patch"}]})", "tools[0].type", "'custom'"},
      {R"({"input": "x", "tools": [{"type": "namespace", "name": "n"}]})", "tools[0].type", "'namespace'"},
      {R"({"input": "x", "tools": [{"type": "function", "name": "f", "parameters": 1}]})",
       "tools[0].parameters", "expected an object"},
      {R"({"input": "x", "tool_choice": "any"})", "tool_choice", "'any'"},
      {R"({"input": "x", "tool_choice": {"type": "allowed_tools"}})", "tool_choice.type", "'allowed_tools'"},
      {R"({"input": "x", "text": {"format": {"type": "yaml"}}})", "text.format.type", "'yaml'"},
      {R"({"input": "x", "text": {"format": {"type": "json_schema", "name": "n"}}})",
       "text.format.schema", "Missing required parameter"},
      {R"({"input": "x", "text": {"verbosity": "high"}})", "text.verbosity", "verbosity"},
      {R"({"input": "x", "reasoning": {"effort": "max"}})", "reasoning.effort", "'max'"},
      {R"({"input": "x", "reasoning": {"summary": "long"}})", "reasoning.summary", "'long'"},
      {R"({"input": "x", "max_output_tokens": 0})", "max_output_tokens", ">= 1"},
      {R"({"input": "x", "temperature": "hot"})", "temperature", "expected a number"},
      {R"({"input": "x", "store": "yes"})", "store", "expected a boolean"},
      {R"({"input": "x", "truncation": "auto"})", "truncation", "not supported"},
      {R"({"input": "x", "include": ["file_search_call.results"]})", "include[0]",
       "'file_search_call.results'"},
      {R"({"input": "x", "background": true})", "background", "Unknown parameter"},
  };
  for (const Case& c : cases) {
    auto [param, message] = Refusal(c.body);
    EXPECT_EQ(param, c.param) << c.body << ": " << message;
    EXPECT_NE(message.find(c.message_part), std::string::npos) << c.body << ": " << message;
  }
}

TEST(ResponsesApiTest, PreviousResponseIdPrependsTheStoredConversation) {
  ResponseStore store({});
  const Json earlier = Json::parse(R"([{"role": "user", "content": "Hi"},
                                       {"role": "assistant", "content": "Hello"}])");
  store.Put("resp_1", {Json::object(), earlier});
  const ResponsesRequest r =
      Req(R"({"instructions": "new", "previous_response_id": "resp_1", "input": "Again"})", &store);
  EXPECT_EQ(r.chat["messages"], Json::parse(R"([{"role": "system", "content": "new"},
      {"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello"},
      {"role": "user", "content": "Again"}])"));
  EXPECT_EQ(r.history.size(), 3u);
  EXPECT_EQ(r.echo["previous_response_id"], "resp_1");
  auto [param, message] = Refusal(R"({"previous_response_id": "resp_2", "input": "x"})", &store,
                                  absl::StatusCode::kNotFound);
  EXPECT_EQ(param, "previous_response_id");
  EXPECT_NE(message.find("'resp_2' not found"), std::string::npos);
}

TEST(ResponsesApiTest, ItemReferencesReadTheStoredResponsesItems) {
  ResponseStore store({});
  ChatDelta a;
  a.reasoning_content = "think";
  a.content = "Looking.";
  a.tool_calls.push_back({"call_1", "f", "{}"});
  store.Put("resp_5-1", {Json{{"output", ResponsesOutput("resp_5-1", a, false)}}, Json::array()});
  const ResponsesRequest r = Req(R"({"input": [{"role": "user", "content": "Hi"},
      {"type": "item_reference", "id": "rs_5-1_0"}, {"type": "item_reference", "id": "msg_5-1_1"},
      {"type": "item_reference", "id": "fc_5-1_2"},
      {"type": "function_call_output", "call_id": "call_1", "output": "ok"}]})", &store);
  EXPECT_EQ(r.chat["messages"], Json::parse(R"([{"role": "user", "content": "Hi"},
      {"role": "assistant", "content": "Looking.", "reasoning_content": "think",
       "tool_calls": [{"id": "call_1", "type": "function", "function": {"name": "f", "arguments": "{}"}}]},
      {"role": "tool", "tool_call_id": "call_1", "content": "ok"}])")) << r.chat["messages"].dump(1);
  for (const char* id : {"msg_5-1_0", "msg_5-1_9", "msg_6-1_1", "msg_x", "nothing"}) {
    auto [param, message] = Refusal(
        absl::StrCat(R"({"input": [{"type": "item_reference", "id": ")", id, R"("}]})"), &store,
        absl::StatusCode::kNotFound);
    EXPECT_EQ(param, "input[0].id") << id;
    EXPECT_NE(message.find("not found"), std::string::npos) << message;
  }
}

TEST(ResponsesApiTest, StoreIsBoundedAndExpires) {
  absl::Time now = absl::FromUnixSeconds(1000);
  ResponseStore store({.max_responses = 2, .ttl = absl::Seconds(60)}, [&] { return now; });
  store.Put("a", {Json(1), Json::array()});
  now += absl::Seconds(10);
  store.Put("b", {Json(2), Json::array()});
  store.Put("c", {Json(3), Json::array()});  // the oldest, a, goes
  EXPECT_FALSE(store.Get("a").has_value());
  EXPECT_EQ(store.Get("b")->response, Json(2));
  EXPECT_EQ(store.size(), 2u);
  now += absl::Seconds(55);  // a would be 65 s old; b and c are 55 s old
  EXPECT_TRUE(store.Get("c").has_value());
  now += absl::Seconds(5);  // 60 s: expired
  EXPECT_FALSE(store.Get("b").has_value());
  EXPECT_FALSE(store.Get("c").has_value());
  EXPECT_EQ(store.size(), 0u);
  store.Put("d", {Json(4), Json::array()});
  EXPECT_TRUE(store.Delete("d"));
  EXPECT_FALSE(store.Delete("d"));
  EXPECT_FALSE(store.Get("d").has_value());
  ResponseStore none({.max_responses = 0});
  none.Put("x", {Json(1), Json::array()});
  EXPECT_EQ(none.size(), 0u);
}

TEST(ResponsesApiTest, OutputItemsAndUsage) {
  ChatDelta a;
  a.reasoning_content = "hmm";
  a.content = "\n\nDone.";
  a.tool_calls.push_back({"call_9", "f", "{\"x\":1}"});
  const Json out = ResponsesOutput("resp_7", a, /*summary=*/true);
  EXPECT_EQ(out, Json::parse(R"([
    {"id": "rs_7_0", "type": "reasoning", "summary": [{"type": "summary_text", "text": "hmm"}],
     "content": [{"type": "reasoning_text", "text": "hmm"}]},
    {"id": "msg_7_1", "type": "message", "status": "completed", "role": "assistant",
     "content": [{"type": "output_text", "text": "\n\nDone.", "annotations": [], "logprobs": []}]},
    {"id": "fc_7_2", "type": "function_call", "status": "completed", "arguments": "{\"x\":1}",
     "call_id": "call_9", "name": "f"}])")) << out.dump(1);
  ChatDelta only_space;
  only_space.content = "\n\n";
  EXPECT_TRUE(ResponsesOutput("resp_1", only_space, false).empty());
  GenerateOutcome o;
  o.prompt_tokens = 10;
  o.cached_tokens = 4;
  o.completion_tokens = 6;
  EXPECT_EQ(ResponsesUsage(o, 2), Json::parse(R"({"input_tokens": 10,
      "input_tokens_details": {"cached_tokens": 4}, "output_tokens": 6,
      "output_tokens_details": {"reasoning_tokens": 2}, "total_tokens": 16})"));
  const Json r = ResponseObject("resp_1", 5, Json{{"model", "m"}}, "completed", Json::array(),
                                nullptr, /*length=*/true);
  EXPECT_EQ(r["status"], "incomplete");
  EXPECT_EQ(r["incomplete_details"], Json::parse(R"({"reason": "max_output_tokens"})"));
  EXPECT_EQ(r["model"], "m");
  EXPECT_EQ(r["object"], "response");
}

// The events' types and data, in order.
std::vector<Json> Events(const std::string& sse) {
  std::vector<Json> out;
  size_t at = 0;
  while ((at = sse.find("event: ", at)) != std::string::npos) {
    const size_t eol = sse.find('\n', at);
    const std::string type = sse.substr(at + 7, eol - at - 7);
    const size_t data = sse.find("data: ", eol);
    const size_t end = sse.find("\n\n", data);
    Json d = Json::parse(sse.substr(data + 6, end - data - 6));
    EXPECT_EQ(d["type"], type);
    out.push_back(std::move(d));
    at = end;
  }
  return out;
}

TEST(ResponsesApiTest, StreamEventSequence) {
  ResponsesStream s("resp_3", 7, Json{{"model", "m"}}, /*summary=*/false);
  std::string sse = s.Start();
  ChatDelta p;
  p.reasoning_content = "thi";
  sse += s.Push(p);
  p.reasoning_content = "nk";
  sse += s.Push(p);
  p = ChatDelta();
  p.content = "\n\n";  // held: whitespace opens no message
  sse += s.Push(p);
  p.content = "Hi";
  sse += s.Push(p);
  p.content = "!";
  sse += s.Push(p);
  ChatDelta rest;
  rest.tool_calls.push_back({"call_1", "f", "{}"});
  Json response;
  GenerateOutcome o;
  o.prompt_tokens = 3;
  o.completion_tokens = 5;
  sse += s.Finish(rest, ResponsesUsage(o, 2), false, &response);
  const std::vector<Json> ev = Events(sse);
  std::vector<std::string> types;
  for (size_t i = 0; i < ev.size(); ++i) {
    types.push_back(ev[i]["type"]);
    EXPECT_EQ(ev[i]["sequence_number"], i);
  }
  const std::vector<std::string> want = {
      "response.created", "response.in_progress",
      "response.output_item.added", "response.reasoning_text.delta", "response.reasoning_text.delta",
      "response.reasoning_text.done", "response.output_item.done",
      "response.output_item.added", "response.content_part.added", "response.output_text.delta",
      "response.output_text.delta", "response.output_text.done", "response.content_part.done",
      "response.output_item.done",
      "response.output_item.added", "response.function_call_arguments.delta",
      "response.function_call_arguments.done", "response.output_item.done",
      "response.completed"};
  EXPECT_EQ(types, want);
  EXPECT_EQ(ev[0]["response"]["status"], "in_progress");
  EXPECT_EQ(ev[9]["delta"], "\n\nHi");
  EXPECT_EQ(ev[11]["text"], "\n\nHi!");
  EXPECT_EQ(ev[9]["item_id"], "msg_3_1");
  EXPECT_EQ(ev[16]["arguments"], "{}");
  EXPECT_EQ(ev[16]["name"], "f");
  // The final response holds the items as streamed, and equals the whole answer's.
  EXPECT_EQ(response, ev.back()["response"]);
  EXPECT_EQ(response["status"], "completed");
  EXPECT_EQ(response["usage"]["output_tokens_details"]["reasoning_tokens"], 2);
  EXPECT_EQ(response["output"], ResponsesOutput("resp_3", s.answer(), false));
  EXPECT_EQ(s.answer().content, "\n\nHi!");
  EXPECT_EQ(s.answer().tool_calls.size(), 1u);
}

TEST(ResponsesApiTest, StreamSummaryEventsIncompleteAndError) {
  ResponsesStream s("resp_4", 7, Json::object(), /*summary=*/true);
  std::string sse = s.Start();
  ChatDelta p;
  p.reasoning_content = "r";
  sse += s.Push(p);
  Json response;
  sse += s.Finish(ChatDelta(), nullptr, /*length=*/true, &response);
  std::vector<std::string> types;
  for (const Json& e : Events(sse)) types.push_back(e["type"]);
  const std::vector<std::string> want = {
      "response.created", "response.in_progress", "response.output_item.added",
      "response.reasoning_summary_part.added", "response.reasoning_text.delta",
      "response.reasoning_summary_text.delta", "response.reasoning_summary_text.done",
      "response.reasoning_summary_part.done", "response.reasoning_text.done",
      "response.output_item.done", "response.incomplete"};
  EXPECT_EQ(types, want);
  EXPECT_EQ(response["incomplete_details"]["reason"], "max_output_tokens");
  const std::vector<Json> err = Events(s.Error("server_error", "boom"));
  ASSERT_EQ(err.size(), 1u);
  EXPECT_EQ(err[0]["message"], "boom");
  EXPECT_EQ(err[0]["code"], "server_error");
}

}  // namespace
}  // namespace moesplit::dense
