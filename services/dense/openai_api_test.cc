// OpenAiApi's completions against a fake responder whose executor is this
// test's thread (every posted task runs when the test says so): the order
// of what a stream writes, and backpressure — while the responder reports
// more than kStreamHighWaterBytes queued, nothing is taken from the engine,
// which finishes the request anyway (the deltas wait in the handle); the
// wake-up then writes them all, in order.
#include "services/dense/openai_api.h"

#include <unistd.h>

#include <condition_variable>
#include <cstdio>
#include <deque>
#include <mutex>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "common/chat/chat_template.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "services/cli/test_model.h"
#include "services/dense/chat_prompt.h"
#include "services/dense/volatile_system.h"

namespace moesplit::dense {
namespace {

using Json = nlohmann::ordered_json;

class FakeResponder : public HttpResponder {
 public:
  void Reply(HttpReply reply) override { replies.push_back(std::move(reply)); }
  void StartStream(HttpReply head) override { heads.push_back(std::move(head)); }
  void WriteChunk(std::string data) override { chunks.push_back(std::move(data)); }
  void EndStream() override { ended = true; }
  bool ClientGone() const override { return gone; }
  size_t QueuedBytes() const override { return queued; }
  void SetWake(std::function<void()> w) override { wake = std::move(w); }
  void Post(std::function<void()> f) override {
    std::lock_guard<std::mutex> l(mu);
    tasks.push_back(std::move(f));
    cv.notify_all();
  }
  // Runs the posted tasks (this thread is the executor); false when none came
  // within the wait.
  bool RunPosted(std::chrono::milliseconds wait) {
    std::deque<std::function<void()>> run;
    {
      std::unique_lock<std::mutex> l(mu);
      cv.wait_for(l, wait, [&] { return !tasks.empty(); });
      run.swap(tasks);
    }
    for (auto& f : run) f();
    return !run.empty();
  }

  std::vector<HttpReply> replies, heads;
  std::vector<std::string> chunks;
  bool ended = false, gone = false;
  size_t queued = 0;
  std::function<void()> wake;
  std::mutex mu;
  std::condition_variable cv;
  std::deque<std::function<void()>> tasks;  // guarded by mu
};

struct Fixture {
  explicit Fixture(const VolatileSystemFilter* volatile_system = nullptr) {
    path = absl::StrCat(::testing::TempDir(), "/openai_api_test_", getpid(), ".gguf");
    cli::TestModelSpec spec;
    spec.n_layer = 2;
    spec.threads = 2;
    EXPECT_TRUE(cli::WriteTestModel(spec, path).ok());
    EngineOptions o;
    o.model_path = path;
    o.threads = 2;
    o.n_ctx = 256;
    o.max_sequences = 2;
    auto e = DenseEngine::Create(o);
    EXPECT_TRUE(e.ok()) << e.status();
    engine = std::move(*e);
    auto c = ChatPrompt::ForModel(engine->model().file(), engine->tokenizer(),
                                  chat::ChatMLFallbackTemplate());
    EXPECT_TRUE(c.ok()) << c.status();
    chat.emplace(std::move(*c));
    ServedModel served;
    served.engine = engine.get();
    served.chat = &*chat;
    served.name = "test";
    served.volatile_system = volatile_system;
    api = std::make_unique<OpenAiApi>(served);
  }
  ~Fixture() {
    api.reset();
    engine.reset();
    std::remove(path.c_str());
  }
  std::string path;
  std::unique_ptr<DenseEngine> engine;
  std::optional<ChatPrompt> chat;
  std::unique_ptr<OpenAiApi> api;
};

// The `data:` payloads of SSE chunks.
std::vector<std::string> Events(const std::vector<std::string>& chunks) {
  std::vector<std::string> out;
  for (const std::string& c : chunks) {
    EXPECT_EQ(c.rfind("data: ", 0), 0u) << c;
    EXPECT_EQ(c.substr(c.size() - 2), "\n\n");
    out.push_back(c.substr(6, c.size() - 8));
  }
  return out;
}

TEST(OpenAiApiTest, ABlockedStreamTakesNothingUntilWokenThenWritesEveryTokenInOrder) {
  Fixture f;
  constexpr int kTokens = 24;
  auto out = std::make_shared<FakeResponder>();
  out->queued = 2 * kStreamHighWaterBytes;  // the client reads nothing
  int done = 0;
  auto prepared = f.api->PrepareCompletion(
      absl::StrCat(R"({"prompt":"Once upon","max_tokens":)", kTokens,
                   R"(,"temperature":0,"ignore_eos":true,"stream":true})"),
      /*chat=*/false);
  f.api->StartCompletion(prepared, out, [&] { ++done; });
  ASSERT_EQ(out->heads.size(), 1u);
  EXPECT_EQ(out->heads[0].content_type, "text/event-stream");
  // The engine runs the request to its end without the client: its
  // wake-ups come (run here), nothing is written.
  while (f.engine->running() + f.engine->queued() > 0) out->RunPosted(std::chrono::milliseconds(50));
  while (out->RunPosted(std::chrono::milliseconds(0))) {
  }
  EXPECT_TRUE(out->chunks.empty());
  EXPECT_EQ(done, 0);
  ASSERT_TRUE(out->wake);
  // The queue drained: one wake-up writes everything, in order.
  out->queued = 0;
  out->wake();
  const std::vector<std::string> events = Events(out->chunks);
  ASSERT_EQ(events.size(), kTokens + 2u);  // tokens, the last chunk, [DONE]
  for (int i = 0; i < kTokens; ++i) {
    const Json j = Json::parse(events[i]);
    EXPECT_EQ(j["choices"][0]["index"], 0);
    EXPECT_TRUE(j["choices"][0]["finish_reason"].is_null()) << i;
  }
  const Json last = Json::parse(events[kTokens]);
  EXPECT_EQ(last["choices"][0]["finish_reason"], "length");
  EXPECT_TRUE(last.contains("timings"));
  EXPECT_EQ(events.back(), "[DONE]");
  EXPECT_TRUE(out->ended);
  EXPECT_EQ(done, 1);
  EXPECT_FALSE(out->wake);  // released at the end
}

TEST(OpenAiApiTest, AClientGoneCancelsTheRequestAndWritesNothingMore) {
  Fixture f;
  auto out = std::make_shared<FakeResponder>();
  int done = 0;
  auto prepared = f.api->PrepareCompletion(
      R"({"prompt":"Once upon","max_tokens":0,"temperature":0,"stream":true})", false);
  f.api->StartCompletion(prepared, out, [&] { ++done; });
  while (out->chunks.empty()) out->RunPosted(std::chrono::milliseconds(50));
  out->gone = true;
  const size_t written = out->chunks.size();
  out->wake();  // as the connection does when the client goes away
  // The engine ends the request ("cancelled") and frees its sequence.
  while (done == 0) out->RunPosted(std::chrono::milliseconds(50));
  EXPECT_EQ(out->chunks.size(), written);
  EXPECT_FALSE(out->ended);
  EXPECT_EQ(f.engine->running(), 0);
  EXPECT_EQ(f.engine->metrics().kv_used_bytes.Value(), 0);
}

TEST(OpenAiApiTest, ABadRequestIsRepliedAtOnceWithTheErrorShape) {
  Fixture f;
  auto out = std::make_shared<FakeResponder>();
  int done = 0;
  f.api->StartCompletion(f.api->PrepareCompletion(R"({"prompt":"x","top_k":-1})", false), out,
                         [&] { ++done; });
  ASSERT_EQ(out->replies.size(), 1u);
  EXPECT_EQ(out->replies[0].status, 400);
  EXPECT_EQ(Json::parse(out->replies[0].body)["error"]["param"], "top_k");
  EXPECT_EQ(done, 1);
}

// chat_template_kwargs is an object of template variables and
// reasoning_effort one of OpenAI's levels; anything else is a 400 naming it.
TEST(OpenAiApiTest, TemplateKwargsAndReasoningEffortAreCheckedNotIgnored) {
  Fixture f;
  const std::string ask = R"("messages":[{"role":"user","content":"Hi"}],"max_tokens":2)";
  for (const auto& [extra, param] : std::vector<std::pair<std::string, std::string>>{
           {R"("chat_template_kwargs":[1])", "chat_template_kwargs"},
           {R"("chat_template_kwargs":{"enable_thinking":"yes"})", "enable_thinking"},
           {R"("reasoning_effort":"extreme")", "reasoning_effort"},
           {R"("reasoning_effort":2)", "reasoning_effort"}}) {
    auto out = std::make_shared<FakeResponder>();
    f.api->StartCompletion(f.api->PrepareCompletion("{" + ask + "," + extra + "}", true), out,
                           [] {});
    ASSERT_EQ(out->replies.size(), 1u) << extra;
    EXPECT_EQ(out->replies[0].status, 400) << extra;
    EXPECT_THAT(Json::parse(out->replies[0].body)["error"]["param"].dump(),
                ::testing::HasSubstr(param))
        << extra << ": " << out->replies[0].body;
  }
  for (const std::string extra : {R"("chat_template_kwargs":{"enable_thinking":false,"x":[1]})",
                                  R"("reasoning_effort":"high")"}) {
    auto out = std::make_shared<FakeResponder>();
    int done = 0;
    f.api->StartCompletion(f.api->PrepareCompletion("{" + ask + "," + extra + "}", true), out,
                           [&] { ++done; });
    while (done == 0) out->RunPosted(std::chrono::milliseconds(50));
    ASSERT_FALSE(out->replies.empty()) << extra;
    EXPECT_EQ(out->replies[0].status, 200) << extra << ": " << out->replies[0].body;
  }
}


// Anthropic's /v1/messages through the same completion: a stream's events
// from message_start to message_stop (max_tokens reached), the whole
// answer's shape, a stop sequence ending it (stop_reason stop_sequence,
// naming it), count_tokens' count of the same prompt, and a bad request
// in Anthropic's error shape.
TEST(OpenAiApiTest, AnthropicMessagesStreamAnswerCountAndError) {
  Fixture f;
  const std::string ask =
      R"("model":"test","system":"Be brief.","messages":[{"role":"user","content":"Once upon"}])";
  auto run = [&](const std::string& body, OpenAiApi::Endpoint ep) {
    auto out = std::make_shared<FakeResponder>();
    int done = 0;
    f.api->StartCompletion(f.api->PrepareCompletion(body, ep), out, [&] { ++done; });
    while (done == 0) out->RunPosted(std::chrono::milliseconds(50));
    return out;
  };
  auto stream = run("{" + ask + R"(,"max_tokens":6,"temperature":0,"stream":true})",
                    OpenAiApi::Endpoint::kMessages);
  ASSERT_EQ(stream->heads.size(), 1u);
  EXPECT_EQ(stream->heads[0].content_type, "text/event-stream");
  EXPECT_TRUE(stream->ended);
  std::string sse;
  for (const std::string& c : stream->chunks) sse += c;
  std::vector<std::string> types;
  Json last_delta;
  std::string text;
  for (absl::string_view e : absl::StrSplit(sse, "\n\n", absl::SkipEmpty())) {
    const size_t data = e.find("\ndata: ");
    ASSERT_NE(data, absl::string_view::npos) << e;
    Json d = Json::parse(e.substr(data + 7));
    EXPECT_EQ(e.substr(0, data), "event: " + d["type"].get<std::string>());
    types.push_back(d["type"]);
    if (d["type"] == "message_delta") last_delta = d;
    if (d["type"] == "content_block_delta") text += d["delta"]["text"].get<std::string>();
  }
  ASSERT_GE(types.size(), 4u);
  EXPECT_EQ(types[0], "message_start");
  EXPECT_EQ(types[1], "ping");
  EXPECT_EQ(types[types.size() - 2], "message_delta");
  EXPECT_EQ(types.back(), "message_stop");
  EXPECT_EQ(last_delta["delta"]["stop_reason"], "max_tokens");
  EXPECT_EQ(last_delta["usage"]["output_tokens"], 6);

  auto whole = run("{" + ask + R"(,"max_tokens":6,"temperature":0})", OpenAiApi::Endpoint::kMessages);
  ASSERT_EQ(whole->replies.size(), 1u);
  const Json m = Json::parse(whole->replies[0].body);
  EXPECT_EQ(m["type"], "message");
  EXPECT_EQ(m["id"].get<std::string>().rfind("msg_", 0), 0u);
  EXPECT_EQ(m["stop_reason"], "max_tokens");
  if (!text.empty()) {
    EXPECT_EQ(m["content"][0]["text"], text);  // same greedy answer
  }
  const int prompt = m["usage"]["input_tokens"].get<int>() + m["usage"]["cache_read_input_tokens"].get<int>();

  // A stop sequence taken from that answer ends the next one there, named.
  const std::string said = m["content"][0]["text"].get<std::string>();
  ASSERT_GE(said.size(), 4u) << said;
  const std::string stop = said.substr(2, 2);
  auto stopped = run("{" + ask + R"(,"max_tokens":6,"temperature":0,"stop_sequences":[)" +
                         Json(stop).dump() + "]}",
                     OpenAiApi::Endpoint::kMessages);
  const Json s = Json::parse(stopped->replies.at(0).body);
  EXPECT_EQ(s["stop_reason"], "stop_sequence") << s.dump();
  EXPECT_EQ(s["stop_sequence"], stop);
  EXPECT_EQ(s["content"].empty() ? "" : s["content"][0]["text"].get<std::string>(),
            said.substr(0, said.find(stop)));

  auto count = run("{" + ask + "}", OpenAiApi::Endpoint::kCountTokens);
  ASSERT_EQ(count->replies.size(), 1u);
  EXPECT_EQ(Json::parse(count->replies[0].body)["input_tokens"], prompt);

  auto bad = run("{" + ask + R"(,"max_tokens":6,"logprobs":true})", OpenAiApi::Endpoint::kMessages);
  ASSERT_EQ(bad->replies.size(), 1u);
  EXPECT_EQ(bad->replies[0].status, 400);
  EXPECT_EQ(Json::parse(bad->replies[0].body),
            Json::parse(R"({"type":"error","error":{"type":"invalid_request_error",
                "message":"logprobs: Extra inputs are not permitted"}})"));
}

// OpenAI's /v1/responses through the same completion: the whole response
// (stored; GET answers it, DELETE removes it), the same answer streamed
// (events from response.created to response.incomplete, sequence numbers
// in order, the deltas adding up to the stored text), previous_response_id
// rendering the stored turn before the new input (a longer prompt; the
// prefix cache's share is shown by responses_http_test), store: false, and a bad request in OpenAI's
// error shape naming the field.
TEST(OpenAiApiTest, ResponsesWholeStreamedStoredAndRefused) {
  Fixture f;
  auto run = [&](const std::string& body) {
    auto out = std::make_shared<FakeResponder>();
    int done = 0;
    f.api->StartCompletion(f.api->PrepareCompletion(body, OpenAiApi::Endpoint::kResponses), out,
                           [&] { ++done; });
    while (done == 0) out->RunPosted(std::chrono::milliseconds(50));
    return out;
  };
  const std::string ask = R"("instructions":"Be brief.","input":"Once upon","temperature":0,"max_output_tokens":6)";
  auto whole = run("{" + ask + "}");
  ASSERT_EQ(whole->replies.size(), 1u);
  ASSERT_EQ(whole->replies[0].status, 200) << whole->replies[0].body;
  const Json r = Json::parse(whole->replies[0].body);
  const std::string id = r["id"];
  EXPECT_EQ(id.rfind("resp_", 0), 0u);
  EXPECT_EQ(r["object"], "response");
  EXPECT_EQ(r["status"], "incomplete");
  EXPECT_EQ(r["model"], "test");
  EXPECT_EQ(r["usage"]["output_tokens"], 6);
  EXPECT_EQ(r["usage"]["total_tokens"],
            r["usage"]["input_tokens"].get<int>() + r["usage"]["output_tokens"].get<int>());
  std::string said;
  for (const Json& item : r["output"]) {
    if (item["type"] == "message") said = item["content"][0]["text"];
  }
  EXPECT_EQ(Json::parse(f.api->GetResponse(id).body), r);

  auto stream = run("{" + ask + R"(,"stream":true,"store":false})");
  ASSERT_EQ(stream->heads.size(), 1u);
  EXPECT_EQ(stream->heads[0].content_type, "text/event-stream");
  std::string sse;
  for (const std::string& c : stream->chunks) sse += c;
  std::vector<std::string> types;
  std::string text;
  Json last;
  for (absl::string_view e : absl::StrSplit(sse, "\n\n", absl::SkipEmpty())) {
    const size_t data = e.find("\ndata: ");
    ASSERT_NE(data, absl::string_view::npos) << e;
    Json d = Json::parse(e.substr(data + 7));
    EXPECT_EQ(e.substr(0, data), "event: " + d["type"].get<std::string>());
    EXPECT_EQ(d["sequence_number"], types.size());
    types.push_back(d["type"]);
    if (d["type"] == "response.output_text.delta") text += d["delta"].get<std::string>();
    last = d;
  }
  ASSERT_GE(types.size(), 3u);
  EXPECT_EQ(types[0], "response.created");
  EXPECT_EQ(types[1], "response.in_progress");
  EXPECT_EQ(types.back(), "response.incomplete");
  EXPECT_EQ(text, said);  // the same greedy answer
  Json streamed_output = last["response"]["output"], whole_output = r["output"];
  for (Json* o : {&streamed_output, &whole_output}) {
    for (Json& item : *o) item["id"] = "";
  }
  EXPECT_EQ(streamed_output, whole_output);
  EXPECT_EQ(last["response"]["usage"]["output_tokens"], 6);
  // store: false: not stored.
  EXPECT_EQ(f.api->GetResponse(last["response"]["id"]).status, 404);

  auto next = run(R"({"previous_response_id":")" + id + R"(","input":"And then?","max_output_tokens":2})");
  const Json n = Json::parse(next->replies.at(0).body);
  ASSERT_EQ(next->replies[0].status, 200) << n.dump();
  EXPECT_GT(n["usage"]["input_tokens"].get<int>(), r["usage"]["input_tokens"].get<int>() + 3);
  EXPECT_EQ(n["previous_response_id"], id);

  const Json deleted = Json::parse(f.api->DeleteResponse(id).body);
  EXPECT_EQ(deleted, Json::parse(R"({"id":")" + id + R"(","object":"response.deleted","deleted":true})"));
  const HttpReply gone = f.api->GetResponse(id);
  EXPECT_EQ(gone.status, 404);
  EXPECT_EQ(Json::parse(gone.body)["error"]["code"], "response_not_found");
  auto after = run(R"({"previous_response_id":")" + id + R"(","input":"x"})");
  EXPECT_EQ(after->replies.at(0).status, 404);
  EXPECT_EQ(Json::parse(after->replies[0].body)["error"]["param"], "previous_response_id");

  auto bad = run(R"({"input":"x","tools":[{"type":"code_interpreter"}]})");
  ASSERT_EQ(bad->replies.size(), 1u);
  EXPECT_EQ(bad->replies[0].status, 400);
  const Json e = Json::parse(bad->replies[0].body)["error"];
  EXPECT_EQ(e["type"], "invalid_request_error");
  EXPECT_EQ(e["param"], "tools[0].type");
  EXPECT_NE(e["message"].get<std::string>().find("'code_interpreter'"), std::string::npos);
}

// Claude Code's system prompt starts with a billing line whose cch changes
// on every request. With the default volatile pattern the line is left out
// of the prompt, so the second request (another cch) reuses the first's
// prompt from the prefix cache (cache_read_input_tokens: all its whole
// 64-token blocks); without the filter the prompt differs from its first
// tokens and nothing is reused.
TEST(OpenAiApiTest, TheBillingHeadersChangingStampDoesNotDefeatThePrefixCache) {
  auto filter = VolatileSystemFilter::Create(kDefaultVolatileSystemPattern);
  ASSERT_TRUE(filter.ok()) << filter.status();
  std::string rules;
  for (int i = 0; i < 8; ++i) absl::StrAppend(&rules, "Rule ", i, ": answer briefly. ");
  auto request = [&](const std::string& cch) {
    return absl::StrCat(
        R"({"model":"test","max_tokens":1,"system":[{"type":"text","text":"x-anthropic-billing-header: cc_version=2.1.101.e51; cc_entrypoint=cli; cch=)",
        cch, R"(;"},{"type":"text","text":")", rules,
        R"("}],"messages":[{"role":"user","content":"Hello"}]})");
  };
  auto cached = [&](Fixture& f, const std::string& cch, int* prompt) {
    auto out = std::make_shared<FakeResponder>();
    int done = 0;
    f.api->StartCompletion(f.api->PrepareCompletion(request(cch), OpenAiApi::Endpoint::kMessages),
                           out, [&] { ++done; });
    while (done == 0) out->RunPosted(std::chrono::milliseconds(50));
    EXPECT_EQ(out->replies.size(), 1u);
    EXPECT_EQ(out->replies.at(0).status, 200) << out->replies.at(0).body;
    const Json usage = Json::parse(out->replies.at(0).body)["usage"];
    *prompt = usage["input_tokens"].get<int>() + usage["cache_read_input_tokens"].get<int>();
    return usage["cache_read_input_tokens"].get<int>();
  };
  int first = 0, second = 0;
  {
    Fixture f(filter->get());
    EXPECT_EQ(cached(f, "a5145", &first), 0);
    const int reused = cached(f, "0aaa9", &second);
    EXPECT_EQ(second, first);  // the stamp is not in the prompt
    ASSERT_GE(first, 128);
    EXPECT_EQ(reused, first / 64 * 64 - (first % 64 == 0 ? 64 : 0)) << first;
  }
  {
    Fixture f;  // no filter: the stamp is near the prompt's start
    int without = 0;
    EXPECT_EQ(cached(f, "a5145", &without), 0);
    EXPECT_GT(without, first);
    EXPECT_EQ(cached(f, "0aaa9", &without), 0);
  }
}

}  // namespace
}  // namespace moesplit::dense
