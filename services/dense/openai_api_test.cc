// OpenAiApi's completions against a fake responder whose executor is this
// test's thread (every posted task runs when the test says so): the order
// of what a stream writes, and backpressure — while the responder reports
// more than kStreamHighWaterBytes queued, nothing is taken from the engine,
// which finishes the request anyway (the deltas wait in the handle); the
// wake-up then writes them all, in order.
#include "services/dense/openai_api.h"

#include <unistd.h>

#include <algorithm>
#include <condition_variable>
#include <cstdio>
#include <deque>
#include <regex>
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

// One request through the API, run to its end: the HTTP status and body.
std::pair<int, Json> Ask(Fixture& f, const std::string& body, OpenAiApi::Endpoint ep) {
  auto out = std::make_shared<FakeResponder>();
  int done = 0;
  f.api->StartCompletion(f.api->PrepareCompletion(body, ep), out, [&] { ++done; });
  while (done == 0) out->RunPosted(std::chrono::milliseconds(50));
  EXPECT_EQ(out->replies.size(), 1u) << body;
  if (out->replies.empty()) return {0, Json()};
  return {out->replies[0].status, Json::parse(out->replies[0].body)};
}

// A completion's text ("" and a failure when it is not a 200).
std::string Text(Fixture& f, const std::string& fields) {
  auto [status, j] = Ask(f, absl::StrCat(R"({"prompt":"Once upon a time","max_tokens":4,)",
                                         R"("ignore_eos":true,)", fields, "}"),
                         OpenAiApi::Endpoint::kCompletions);
  EXPECT_EQ(status, 200) << fields << ": " << j.dump();
  return status == 200 ? j["choices"][0]["text"].get<std::string>() : "";
}

// A token whose piece is a plain ASCII word that encodes back to itself.
int32_t PlainToken(const Tokenizer& tok, std::string* piece) {
  for (int32_t id = tok.n_vocab() - 1; id > 0; --id) {
    const std::string& p = tok.Piece(id);
    if (p.size() < 3 || !std::all_of(p.begin(), p.end(), [](char c) { return c >= 'a' && c <= 'z'; })) {
      continue;
    }
    auto ids = tok.Encode(p, false, false);
    if (ids.ok() && ids->size() == 1 && (*ids)[0] == id) {
      *piece = p;
      return id;
    }
  }
  return -1;
}

// logit_bias in its three forms (OpenAI's object, llama.cpp's [id, bias]
// and ["string", bias] pairs), false banning a token; bad entries are 400s.
TEST(OpenAiApiTest, LogitBiasInEveryFormTakesEffect) {
  Fixture f;
  const Tokenizer& tok = f.engine->tokenizer();
  std::string word;
  const int32_t id = PlainToken(tok, &word);
  ASSERT_GE(id, 0);
  const std::string greedy = Text(f, R"("temperature":0)");
  ASSERT_FALSE(greedy.empty());
  const std::string four = word + word + word + word;
  for (const std::string& bias :
       {absl::StrCat(R"({")", id, R"(":100})"), absl::StrCat("[[", id, ",100]]"),
        absl::StrCat(R"([[")", word, R"(",100]])"), absl::StrCat(R"({")", word, R"(":100})")}) {
    EXPECT_EQ(Text(f, absl::StrCat(R"("temperature":0,"logit_bias":)", bias)), four) << bias;
  }
  // DRY: from the third token on, the forced token would extend a repeat
  // (allowed length 1) and loses 1000 or more; samplers without dry turn it off.
  const std::string force = absl::StrCat(R"("temperature":0,"logit_bias":[[)", id, ",100]],");
  const std::string dry =
      Text(f, force + R"("dry_multiplier":1000,"dry_allowed_length":1,"dry_base":1.75)");
  EXPECT_EQ(dry.rfind(word + word, 0), 0u) << dry;
  EXPECT_NE(dry, four);
  EXPECT_EQ(Text(f, force + R"("dry_multiplier":1000,"dry_allowed_length":1,)"
                            R"("samplers":["penalties","top_k","temperature"])"),
            four);
  EXPECT_EQ(Text(f, force + R"("dry_multiplier":1000,"dry_allowed_length":1,"dry_penalty_last_n":0)"),
            four);
  // Banning the greedy answer's first token changes it, in both forms.
  auto first = tok.Encode(greedy, false, false);
  ASSERT_TRUE(first.ok() && !first->empty());
  const int32_t t0 = (*first)[0];
  for (const std::string& ban :
       {absl::StrCat(R"({")", t0, R"(":false})"), absl::StrCat("[[", t0, ",false]]")}) {
    const std::string text = Text(f, absl::StrCat(R"("temperature":0,"logit_bias":)", ban));
    EXPECT_NE(text.rfind(tok.Piece(t0), 0), 0u) << ban << ": " << text;
  }
  // On chat too.
  auto [status, chat] = Ask(
      f,
      absl::StrCat(R"({"messages":[{"role":"user","content":"Hi"}],"max_tokens":3,"temperature":0,)",
                   R"("ignore_eos":true,"logit_bias":{")", id, R"(":100}})"),
      OpenAiApi::Endpoint::kChat);
  ASSERT_EQ(status, 200) << chat.dump();
  EXPECT_EQ(chat["choices"][0]["message"]["content"], word + word + word);
  for (const std::string& bad :
       {std::string(R"("logit_bias":5)"), std::string(R"("logit_bias":{"7":"x"})"),
        std::string(R"("logit_bias":{"7":true})"), std::string(R"("logit_bias":[[7]])"),
        absl::StrCat(R"("logit_bias":[[)", tok.n_vocab(), ",1]]"),
        std::string(R"("logit_bias":{"-1":1})"), std::string(R"("logit_bias":{"":1})"),
        std::string(R"("logit_bias":[[{},1]])"), std::string(R"("logit_bias":[[1,1e300]])")}) {
    auto [s, j] = Ask(f, absl::StrCat(R"({"prompt":"x","max_tokens":1,)", bad, "}"),
                      OpenAiApi::Endpoint::kCompletions);
    EXPECT_EQ(s, 400) << bad;
    EXPECT_EQ(j["error"]["param"], "logit_bias") << bad << ": " << j.dump();
  }
}

// typical_p, top_n_sigma, XTC, min_p and samplers change what is drawn;
// n_probs reports alternatives; the samplers this server lacks are a 400
// unless switched off; cache_prompt and id_slot.
TEST(OpenAiApiTest, LlamaSamplingFieldsTakeEffectOrAreRefused) {
  Fixture f;
  const std::string greedy = Text(f, R"("temperature":0)");
  const std::string hot = R"("temperature":1.5,"seed":)";
  // A flat random model: seeded draws at T = 1.5 are not the greedy text.
  const std::string plain = Text(f, hot + "7");
  ASSERT_NE(plain, greedy);
  // Filters that leave only the argmax give the greedy text at any seed.
  for (const std::string& only_max :
       {std::string(R"("top_n_sigma":0.000001)"), std::string(R"("min_p":1)")}) {
    EXPECT_EQ(Text(f, hot + "7," + only_max), greedy) << only_max;
  }
  // typical_p 0 keeps one token (the most typical): every seed agrees.
  EXPECT_EQ(Text(f, hot + R"(1,"typical_p":0)"), Text(f, hot + R"(2,"typical_p":0)"));
  // XTC at threshold 0 removes all but the least probable token: greedy
  // then takes the argmin.
  EXPECT_NE(Text(f, R"("temperature":0,"xtc_probability":1,"xtc_threshold":0)"), greedy);
  // samplers leaving min_p out switch it off: the seeded plain draws again.
  EXPECT_EQ(Text(f, hot + R"(7,"min_p":1,"samplers":["top_k","temperature"])"), plain);
  EXPECT_EQ(Text(f, hot + R"(7,"min_p":1,"samplers":"kt")"), plain);
  EXPECT_EQ(Text(f, hot + R"(7,"min_p":1,"samplers":["penalties","top-k","min_p","temp"])"),
            greedy);
  // Disabled values of the samplers we lack are accepted.
  EXPECT_EQ(Text(f, R"("temperature":0,"mirostat":0,"dry_multiplier":0,"dry_base":1.75,)"
                    R"("dynatemp_range":0,"dry_sequence_breakers":["\n"],"id_slot":-1)"),
            greedy);
  EXPECT_EQ(Text(f, R"("temperature":0,"id_slot":1,"cache_prompt":true)"), greedy);
  // llama-server's names of the penalty fields and of max_tokens.
  EXPECT_EQ(Text(f, R"("temperature":0,"repeat_penalty":1e6,"repeat_last_n":-1)"),
            Text(f, R"("temperature":0,"repetition_penalty":1e6)"));
  EXPECT_EQ(Text(f, R"("temperature":0,"repeat_penalty":1e6,"repeat_last_n":0)"), greedy);
  EXPECT_EQ(Text(f, R"("temperature":0,"repeat_penalty":1.1,"repetition_penalty":1.1)"),
            Text(f, R"("temperature":0,"repetition_penalty":1.1)"));
  {
    auto [s, j] = Ask(f, R"({"prompt":"x","n_predict":2,"ignore_eos":true})",
                      OpenAiApi::Endpoint::kCompletions);
    ASSERT_EQ(s, 200) << j.dump();
    EXPECT_EQ(j["usage"]["completion_tokens"], 2);
  }
  for (const auto& [bad, param] : std::vector<std::pair<std::string, std::string>>{
           {R"("mirostat":2)", "mirostat"},
           {R"("dry_multiplier":"x")", "dry_multiplier"},
           {R"("dry_allowed_length":-1)", "dry_allowed_length"},
           {R"("dry_penalty_last_n":-2)", "dry_penalty_last_n"},
           {R"("dynatemp_range":0.5)", "dynatemp_range"},
           {R"("adaptive_target":0.5)", "adaptive_target"},
           {R"("lora":[{"id":0,"scale":1}])", "lora"},
           {R"("grammar_lazy":true)", "grammar_lazy"},
           {R"("n_probs":2,"post_sampling_probs":true)", "post_sampling_probs"},
           {R"("dry_sequence_breakers":[])", "dry_sequence_breakers"},
           {R"("typical_p":1.5)", "typical_p"},
           {R"("top_n_sigma":"x")", "top_n_sigma"},
           {R"("xtc_threshold":-1)", "xtc_threshold"},
           {R"("xtc_probability":2)", "xtc_probability"},
           {R"("samplers":["temperature","top_k"])", "samplers"},
           {R"("samplers":["top_k"])", "samplers"},
           {R"("samplers":["mirostat","temperature"])", "samplers"},
           {R"("samplers":"kqt")", "samplers"},
           {R"("cache_prompt":"no")", "cache_prompt"},
           {R"("id_slot":2)", "id_slot"},
           {R"("id_slot":-2)", "id_slot"},
           {R"("n_probs":21)", "n_probs"},
           {R"("n_probs":2,"logprobs":3)", "n_probs"},
           {R"("repeat_penalty":1.1,"repetition_penalty":1.2)", "repeat_penalty"},
           {R"("repeat_last_n":-2)", "repeat_last_n"},
           {R"("n_predict":3,"max_tokens":1)", "n_predict"}}) {
    auto [s, j] = Ask(f, absl::StrCat(R"({"prompt":"x","max_tokens":1,)", bad, "}"),
                      OpenAiApi::Endpoint::kCompletions);
    EXPECT_EQ(s, 400) << bad;
    EXPECT_EQ(j["error"]["param"], param) << bad << ": " << j.dump();
  }
  // n_probs: the top alternatives where each route reports logprobs.
  auto [s1, cmpl] = Ask(f, R"({"prompt":"x","max_tokens":2,"ignore_eos":true,"n_probs":3})",
                        OpenAiApi::Endpoint::kCompletions);
  ASSERT_EQ(s1, 200) << cmpl.dump();
  ASSERT_EQ(cmpl["choices"][0]["logprobs"]["top_logprobs"].size(), 2u) << cmpl.dump();
  EXPECT_EQ(cmpl["choices"][0]["logprobs"]["top_logprobs"][0].size(), 3u) << cmpl.dump();
  auto [s2, chat] = Ask(
      f, R"({"messages":[{"role":"user","content":"Hi"}],"max_tokens":2,"ignore_eos":true,"n_probs":2})",
      OpenAiApi::Endpoint::kChat);
  ASSERT_EQ(s2, 200) << chat.dump();
  ASSERT_EQ(chat["choices"][0]["logprobs"]["content"].size(), 2u) << chat.dump();
  EXPECT_EQ(chat["choices"][0]["logprobs"]["content"][0]["top_logprobs"].size(), 2u);
  auto [s3, e] = Ask(f, R"({"messages":[{"role":"user","content":"Hi"}],"top_logprobs":2})",
                     OpenAiApi::Endpoint::kChat);
  EXPECT_EQ(s3, 400);
  EXPECT_EQ(e["error"]["param"], "top_logprobs") << e.dump();
}

TEST(OpenAiApiTest, CachePromptFalseSkipsThePrefixCache) {
  Fixture f;
  std::string prompt;
  for (int i = 0; i < 12; ++i) absl::StrAppend(&prompt, "Line ", i, " of a long prompt. ");
  auto cached = [&](const std::string& extra) {
    auto [s, j] = Ask(f, absl::StrCat(R"({"prompt":")", prompt, R"(","max_tokens":1)", extra, "}"),
                      OpenAiApi::Endpoint::kCompletions);
    EXPECT_EQ(s, 200) << j.dump();
    return j["usage"]["prompt_tokens_details"]["cached_tokens"].get<int>();
  };
  EXPECT_EQ(cached(R"(,"cache_prompt":false)"), 0);
  EXPECT_EQ(cached(""), 0);  // the first request stored nothing
  EXPECT_GT(cached(""), 0);
  EXPECT_EQ(cached(R"(,"cache_prompt":false)"), 0);
}

// GBNF grammar on both routes: the output is a sentence (or, cut by
// max_tokens, a prefix) of the grammar; a bad grammar is a 400 with its
// position; grammar with response_format is a 400.
TEST(OpenAiApiTest, GrammarConstrainsTheOutput) {
  Fixture f;
  const std::regex yes_no("(yes|no)(, (yes|no)){0,3}\\.");
  for (const char* seed : {"1", "2", "3"}) {
    auto [s, j] = Ask(f,
                      absl::StrCat(R"({"prompt":"Answer:","max_tokens":40,"seed":)", seed,
                                   R"(,"grammar":"root ::= (\"yes\" | \"no\") (\", \" (\"yes\" | \"no\")){0,3} \".\""})"),
                      OpenAiApi::Endpoint::kCompletions);
    ASSERT_EQ(s, 200) << j.dump();
    const std::string text = j["choices"][0]["text"];
    EXPECT_TRUE(std::regex_match(text, yes_no)) << text;
    EXPECT_EQ(j["choices"][0]["finish_reason"], "stop") << text;
  }
  // A list: whatever max_tokens cuts is a prefix of the language.
  const std::regex list_prefix("(- [^\\n]+\\n)*(- ?[^\\n]*|-)?");
  auto [s, j] = Ask(f,
                    R"({"messages":[{"role":"user","content":"List"}],"max_tokens":24,"seed":5,)"
                    R"("grammar":"root ::= item+\nitem ::= \"- \" [a-z ]+ \"\\n\"\n"})",
                    OpenAiApi::Endpoint::kChat);
  ASSERT_EQ(s, 200) << j.dump();
  const std::string list = j["choices"][0]["message"]["content"];
  EXPECT_TRUE(std::regex_match(list, list_prefix)) << list;
  EXPECT_EQ(list.rfind("- ", 0), 0u) << list;
  for (const auto& [bad, message] : std::vector<std::pair<std::string, std::string>>{
           {R"("grammar":"root ::= \"a\"\nitem = \"b\"")", "expecting ::= at line 2, column 6"},
           {R"("grammar":"root ::= x")", "rule 'x' is used but never defined"},
           {R"("grammar":7)", "grammar must be a string"},
           {R"("grammar":"root ::= \"a\"","response_format":{"type":"json_object"})",
            "grammar and response_format"}}) {
    auto [st, e] = Ask(f, absl::StrCat(R"({"prompt":"x",)", bad, "}"),
                       OpenAiApi::Endpoint::kCompletions);
    EXPECT_EQ(st, 400) << bad;
    EXPECT_EQ(e["error"]["param"], "grammar") << bad;
    EXPECT_THAT(e["error"]["message"].get<std::string>(), ::testing::HasSubstr(message)) << bad;
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
