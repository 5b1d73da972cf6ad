// The public API of the dense service as a real process on loopback (gRPC
// and OpenAI-style HTTP), on a small generated model with in-process
// experts: streaming round trips, continuous batching giving every greedy
// request exactly what it gets alone, cancellation freeing the sequence,
// a table of bad requests, and the bounded queue.
#include <grpcpp/grpcpp.h>
#include <httplib.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <condition_variable>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>
#include <thread>
#include <tuple>

#include "absl/strings/str_cat.h"
#include "common/base/subprocess.h"
#include "common/chat/reasoning.h"
#include "common/chat/testing/template_fixtures.h"
#include "common/gguf/gguf.h"
#include "common/tokenizer/tokenizer.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "moesplit/v1/inference.grpc.pb.h"
#include "nlohmann/json.hpp"

namespace moesplit {
namespace {

using ::testing::HasSubstr;
using namespace std::chrono_literals;
namespace v1 = moesplit::v1;
using Json = nlohmann::json;

const std::string kDense = MOESPLIT_DENSE_BIN;
const std::string kCli = MOESPLIT_CLI_BIN;
constexpr int kCtx = 2048;  // long enough that a 300 ms deadline ends generation

// Removes the generated model when the test process exits.
struct RemoveAtExit {
  std::string path;
  ~RemoveAtExit() {
    if (!path.empty()) std::filesystem::remove(path);
  }
};

std::string ModelPath() {
  static RemoveAtExit cleanup;
  static const std::string path = [] {
    const std::string p = absl::StrCat(::testing::TempDir(), "/api_test_", getpid(), ".gguf");
    Subprocess gen(kCli, {"make-test-model", "--out", p, "--name", "api-test", "--threads", "2"});
    EXPECT_EQ(gen.Wait(120s), 0) << gen.stderr_text();
    cleanup.path = p;
    return p;
  }();
  return path;
}

// One moesplit-dense process serving gRPC and HTTP.
struct Server {
  Server(int parallel, int max_queue, std::vector<std::string> extra = {},
         const std::string& model = "") {
    // Port 0: the service picks free ports and prints them on its ready line.
    std::vector<std::string> args = {
        "--model", model.empty() ? ModelPath() : model, "--grpc", "127.0.0.1:0", "--http", "127.0.0.1:0",
        "--ctx", std::to_string(kCtx), "--threads", "2", "--parallel",
        std::to_string(parallel), "--max-queue", std::to_string(max_queue), "--step-tokens", "64"};
    args.insert(args.end(), extra.begin(), extra.end());
    proc = std::make_unique<Subprocess>(kDense, args);
    absl::Status s = proc->WaitFor("ready", 60s);
    EXPECT_TRUE(s.ok()) << s;
    const std::string& log = proc->stderr_text();
    const size_t g = log.find("grpc port "), h = log.find("http port ");
    if (g != std::string::npos) grpc_port = std::atoi(log.c_str() + g + 10);
    if (h != std::string::npos) http_port = std::atoi(log.c_str() + h + 10);
    EXPECT_GT(grpc_port, 0) << log;
    EXPECT_GT(http_port, 0) << log;
    stub = v1::Inference::NewStub(grpc::CreateChannel(absl::StrCat("127.0.0.1:", grpc_port),
                                                      grpc::InsecureChannelCredentials()));
  }
  ~Server() {
    proc->Signal(SIGTERM);
    if (proc->Wait(10s) < 0) proc->Kill(SIGKILL);
  }
  httplib::Client Http() const {
    httplib::Client c("127.0.0.1", http_port);
    c.set_read_timeout(60, 0);
    return c;
  }
  // The value of an unlabelled metric from GET /metrics (-1 when absent).
  double Metric(const std::string& name) const {
    auto r = Http().Get("/metrics");
    if (!r || r->status != 200) return -1;
    const std::string key = "\n" + name + " ";
    const size_t at = r->body.find(key);
    return at == std::string::npos ? -1 : std::stod(r->body.substr(at + key.size(), 40));
  }
  // Polls until the scheduler holds nothing (bounded).
  bool WaitIdle() const {
    for (int i = 0; i < 200; ++i) {
      if (Metric("moesplit_running_sequences") == 0 && Metric("moesplit_kv_cache_used_bytes") == 0)
        return true;
      std::this_thread::sleep_for(50ms);
    }
    return false;
  }

  int grpc_port = 0, http_port = 0;
  std::unique_ptr<Subprocess> proc;
  std::unique_ptr<v1::Inference::Stub> stub;
};

// POST with the body streamed to `on_data` (return false to hang up).
int PostStreaming(httplib::Client& c, const std::string& path, const std::string& body,
                  const std::function<bool(const char*, size_t)>& on_data) {
  httplib::Request req;
  req.method = "POST";
  req.path = path;
  req.body = body;
  req.set_header("Content-Type", "application/json");
  req.content_receiver = [&](const char* d, size_t n, uint64_t, uint64_t) {
    return on_data(d, n);
  };
  httplib::Response res;
  httplib::Error err;
  c.send(req, res, err);
  return res.status;
}

// POST, the whole event stream as text; *status gets the HTTP status.
std::string PostSse(const Server& s, const std::string& path, const std::string& body,
                    int* status) {
  httplib::Client c = s.Http();
  std::string sse;
  *status = PostStreaming(c, path, body, [&](const char* data, size_t n) {
    sse.append(data, n);
    return true;
  });
  return sse;
}

struct Streamed {
  grpc::Status status;
  std::vector<int32_t> tokens;
  std::string text, reasoning, finish;
  v1::Usage usage;
  int logprob_rows = 0, messages = 0;
};

Streamed Generate(const Server& s, const v1::GenerateRequest& req,
                  std::chrono::milliseconds deadline = 60000ms) {
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + deadline);
  auto reader = s.stub->Generate(&ctx, req);
  v1::GenerateResponse r;
  Streamed out;
  while (reader->Read(&r)) {
    ++out.messages;
    out.tokens.insert(out.tokens.end(), r.token_ids().begin(), r.token_ids().end());
    out.text += r.text();
    if (r.logprobs_size() > 0) ++out.logprob_rows;
    if (!r.finish_reason().empty()) out.finish = r.finish_reason(), out.usage = r.usage();
  }
  out.status = reader->Finish();
  return out;
}

Streamed Chat(const Server& s, const v1::ChatRequest& req) {
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + 60s);
  auto reader = s.stub->Chat(&ctx, req);
  v1::ChatResponse r;
  Streamed out;
  while (reader->Read(&r)) {
    out.tokens.insert(out.tokens.end(), r.token_ids().begin(), r.token_ids().end());
    out.text += r.content();
    out.reasoning += r.reasoning_content();
    if (!r.finish_reason().empty()) out.finish = r.finish_reason(), out.usage = r.usage();
  }
  out.status = reader->Finish();
  return out;
}

v1::GenerateRequest Greedy(const std::string& prompt, int max_tokens) {
  v1::GenerateRequest req;
  req.set_prompt(prompt);
  req.set_max_tokens(max_tokens);
  req.mutable_sampling()->set_temperature(0);
  return req;
}

class ApiTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { server_ = new Server(/*parallel=*/16, /*max_queue=*/8); }
  static void TearDownTestSuite() { delete server_; }
  static Server* server_;
};
Server* ApiTest::server_ = nullptr;

TEST_F(ApiTest, GrpcGenerateStreamsTokensLogprobsAndUsage) {
  v1::GenerateRequest req = Greedy("Hello world, this is", 8);
  req.set_logprobs(3);
  Streamed g = Generate(*server_, req);
  ASSERT_TRUE(g.status.ok()) << g.status.error_message();
  EXPECT_EQ(g.tokens.size(), 8u);
  EXPECT_EQ(g.logprob_rows, 8);
  EXPECT_EQ(g.finish, "length");
  EXPECT_EQ(g.usage.completion_tokens(), 8);
  EXPECT_GT(g.usage.prompt_tokens(), 0);
  EXPECT_GT(g.messages, 8);  // one per token + the final one
  // Greedy is deterministic.
  EXPECT_EQ(Generate(*server_, req).tokens, g.tokens);

  grpc::ClientContext ctx;
  v1::GetModelResponse m;
  ASSERT_TRUE(server_->stub->GetModel(&ctx, v1::GetModelRequest(), &m).ok());
  EXPECT_EQ(m.name(), "api-test");
  EXPECT_EQ(m.context_length(), kCtx);
  EXPECT_EQ(m.max_sequences(), 16);
  EXPECT_GT(m.memory_plan().dense_weights_bytes(), 0u);
  EXPECT_EQ(m.memory_plan().kv_cache_bytes(), 16 * m.kv_bytes_per_sequence());
  EXPECT_FALSE(m.bytes_by_type().empty());
}

TEST_F(ApiTest, GrpcChatUsesTheTemplateAndStreams) {
  v1::ChatRequest req;
  auto* m = req.add_messages();
  m->set_role("user");
  m->set_content("Say something.");
  req.set_max_tokens(6);
  req.mutable_sampling()->set_temperature(0);
  Streamed c = Chat(*server_, req);
  ASSERT_TRUE(c.status.ok()) << c.status.error_message();
  EXPECT_EQ(c.tokens.size(), 6u);
  EXPECT_EQ(c.finish, "length");
  // The rendered prompt (role markers and all) is longer than the message.
  grpc::ClientContext ctx;
  v1::TokenizeRequest tr;
  tr.set_text("Say something.");
  v1::TokenizeResponse tok;
  ASSERT_TRUE(server_->stub->Tokenize(&ctx, tr, &tok).ok());
  EXPECT_GT(c.usage.prompt_tokens(), tok.tokens_size());
}

TEST_F(ApiTest, SeedReproducesAndStopStringsCutAcrossTokens) {
  v1::GenerateRequest req = Greedy("The weather today", 16);
  req.mutable_sampling()->set_temperature(0.9f);
  req.mutable_sampling()->set_top_p(0.95f);
  req.mutable_sampling()->set_seed(7);
  req.mutable_sampling()->set_has_seed(true);
  Streamed a = Generate(*server_, req), b = Generate(*server_, req);
  ASSERT_TRUE(a.status.ok() && b.status.ok());
  EXPECT_EQ(a.tokens, b.tokens);

  // A stop string spanning a token boundary ends the text right before it.
  Streamed full = Generate(*server_, Greedy("The weather today", 16));
  ASSERT_TRUE(full.status.ok());
  ASSERT_GE(full.text.size(), 8u) << full.text;
  // The greedy text's pieces: find a cut where a token boundary falls inside.
  grpc::ClientContext ctx;
  v1::DetokenizeRequest dr;
  dr.add_tokens(full.tokens[0]);
  dr.add_tokens(full.tokens[1]);
  v1::DetokenizeResponse two;
  ASSERT_TRUE(server_->stub->Detokenize(&ctx, dr, &two).ok());
  ASSERT_EQ(full.text.rfind(two.text_bytes(), 0), 0u) << "text does not start with its first tokens";
  grpc::ClientContext ctx1;
  dr.clear_tokens();
  dr.add_tokens(full.tokens[0]);
  v1::DetokenizeResponse one;
  ASSERT_TRUE(server_->stub->Detokenize(&ctx1, dr, &one).ok());
  ASSERT_LT(one.text_bytes().size(), two.text_bytes().size());
  ASSERT_FALSE(one.text_bytes().empty());
  // Last byte of token 0 + first byte of token 1 (raw bytes: text may hold U+FFFD).
  const std::string stop = two.text_bytes().substr(one.text_bytes().size() - 1, 2);
  v1::GenerateRequest with_stop = Greedy("The weather today", 16);
  with_stop.add_stop(stop);
  Streamed cut = Generate(*server_, with_stop);
  ASSERT_TRUE(cut.status.ok());
  EXPECT_EQ(cut.finish, "stop");
  EXPECT_EQ(cut.text, full.text.substr(0, full.text.find(stop))) << "stop " << stop;
}

TEST_F(ApiTest, SixteenConcurrentGreedyRequestsEqualEachAlone) {
  std::vector<v1::GenerateRequest> reqs;
  for (int i = 0; i < 16; ++i) {
    std::string prompt = absl::StrCat("Request number ", i, ":");
    for (int k = 0; k < i % 5; ++k) absl::StrAppend(&prompt, " and some more words ", k);
    reqs.push_back(Greedy(prompt, 10 + i % 3));
  }
  std::vector<std::vector<int32_t>> alone;
  for (const auto& r : reqs) {
    Streamed g = Generate(*server_, r);
    ASSERT_TRUE(g.status.ok()) << g.status.error_message();
    alone.push_back(g.tokens);
  }
  std::vector<Streamed> together(reqs.size());
  std::vector<std::thread> threads;
  for (size_t i = 0; i < reqs.size(); ++i) {
    threads.emplace_back([&, i] { together[i] = Generate(*server_, reqs[i]); });
  }
  for (auto& t : threads) t.join();
  for (size_t i = 0; i < reqs.size(); ++i) {
    ASSERT_TRUE(together[i].status.ok()) << i << ": " << together[i].status.error_message();
    EXPECT_EQ(together[i].tokens, alone[i]) << "request " << i;
  }
  auto r = server_->Http().Get("/metrics");
  ASSERT_TRUE(r);
  // Steps really were shared: some step carried more than one sequence.
  EXPECT_THAT(r->body, HasSubstr("moesplit_batch_tokens_count"));
  EXPECT_LT(server_->Metric("moesplit_batch_tokens_bucket{le=\"1\"}"),
            server_->Metric("moesplit_batch_tokens_count"));
}

TEST_F(ApiTest, GrpcCancelAndDeadlineFreeTheSequence) {
  ASSERT_TRUE(server_->WaitIdle());
  {
    grpc::ClientContext ctx;
    // Greedy continuations of these prompts run to the context (2048 tokens,
    // seconds) on the test model; "A long story:" would end after 9 tokens,
    // racing the checks below.
    auto reader = server_->stub->Generate(&ctx, Greedy("Another long story:", 0));
    v1::GenerateResponse r;
    for (int i = 0; i < 3; ++i) ASSERT_TRUE(reader->Read(&r));
    EXPECT_EQ(server_->Metric("moesplit_running_sequences"), 1);
    EXPECT_GT(server_->Metric("moesplit_kv_cache_used_bytes"), 0);
    ctx.TryCancel();
    while (reader->Read(&r)) {
    }
    EXPECT_EQ(reader->Finish().error_code(), grpc::StatusCode::CANCELLED);
  }
  EXPECT_TRUE(server_->WaitIdle()) << "cancelled sequence still held";
  Streamed late = Generate(*server_, Greedy("Tell me", 0), 300ms);
  EXPECT_EQ(late.status.error_code(), grpc::StatusCode::DEADLINE_EXCEEDED);
  EXPECT_TRUE(server_->WaitIdle()) << "sequence past its deadline still held";
}

TEST_F(ApiTest, HttpClientDisconnectFreesTheSequence) {
  ASSERT_TRUE(server_->WaitIdle());
  httplib::Client c = server_->Http();
  int chunks = 0;
  PostStreaming(c, "/v1/completions",
                R"({"prompt":"Once upon a time","max_tokens":0,"temperature":0,"stream":true})",
                [&](const char*, size_t) { return ++chunks < 3; });
  EXPECT_GE(chunks, 3);
  EXPECT_TRUE(server_->WaitIdle()) << "disconnected stream still held";
}

// Streaming requests park no thread in the server: with 16 streams in
// flight at once (12 HTTP SSE, 4 gRPC; each has received a token and stops
// reading) the process has about as many threads as idle (a thread per
// request would add 16). Hanging up then frees every sequence.
TEST_F(ApiTest, StreamsInFlightHoldNoThreadEach) {
  ASSERT_TRUE(server_->WaitIdle());
  const pid_t pid = server_->proc->pid();
  const int idle = ThreadsOf(pid);
  ASSERT_GT(idle, 0);
  constexpr int kHttp = 12, kGrpc = 4;
  std::mutex mu;
  std::condition_variable cv;
  int started = 0;
  bool release = false;
  auto started_one = [&] {
    std::unique_lock<std::mutex> l(mu);
    ++started;
    cv.notify_all();
    cv.wait(l, [&] { return release; });
  };
  std::vector<std::thread> clients;
  for (int i = 0; i < kHttp; ++i) {
    clients.emplace_back([&, i] {
      httplib::Client c = server_->Http();
      bool first = true;
      PostStreaming(c, "/v1/completions",
                    absl::StrCat(R"({"prompt":"Stream number )", i,
                                 R"(","max_tokens":0,"temperature":0,"stream":true})"),
                    [&](const char*, size_t) {
                      if (first) started_one();
                      first = false;
                      return false;  // hang up once released
                    });
    });
  }
  for (int i = 0; i < kGrpc; ++i) {
    clients.emplace_back([&, i] {
      grpc::ClientContext ctx;
      auto reader = server_->stub->Generate(&ctx, Greedy(absl::StrCat("gRPC stream ", i), 0));
      v1::GenerateResponse r;
      if (reader->Read(&r)) started_one();
      ctx.TryCancel();
      while (reader->Read(&r)) {
      }
      reader->Finish();
    });
  }
  int in_flight_threads = -1;
  {
    std::unique_lock<std::mutex> l(mu);
    const bool all = cv.wait_for(l, 120s, [&] { return started == kHttp + kGrpc; });
    in_flight_threads = ThreadsOf(pid);
    release = true;
    cv.notify_all();
    EXPECT_TRUE(all) << started << " of " << kHttp + kGrpc << " streams started";
  }
  for (auto& t : clients) t.join();
  EXPECT_LE(in_flight_threads, idle + 6) << "idle " << idle;
  EXPECT_TRUE(server_->WaitIdle()) << "a hung-up stream still holds its sequence";
}

TEST_F(ApiTest, HttpCompletionsAndChatRoundTrip) {
  httplib::Client c = server_->Http();
  auto r = c.Post("/v1/completions",
                  R"({"model":"api-test","prompt":"Hello world, this is","max_tokens":8,"temperature":0,"logprobs":2})",
                  "application/json");
  ASSERT_TRUE(r);
  ASSERT_EQ(r->status, 200) << r->body;
  Json j = Json::parse(r->body);
  EXPECT_EQ(j["object"], "text_completion");
  EXPECT_EQ(j["choices"][0]["finish_reason"], "length");
  EXPECT_EQ(j["usage"]["completion_tokens"], 8);
  EXPECT_EQ(j["choices"][0]["logprobs"]["tokens"].size(), 8u);
  // Same text as the gRPC stream of the same request.
  Streamed g = Generate(*server_, Greedy("Hello world, this is", 8));
  EXPECT_EQ(j["choices"][0]["text"], g.text);

  // Streaming chat: chunks, finish, usage, [DONE].
  std::string sse;
  const int status = PostStreaming(
      c, "/v1/chat/completions",
      R"({"messages":[{"role":"user","content":"Hi"}],"max_tokens":5,"temperature":0,
          "stream":true,"stream_options":{"include_usage":true}})",
      [&](const char* d, size_t n) {
        sse.append(d, n);
        return true;
      });
  EXPECT_EQ(status, 200);
  std::vector<Json> events;
  bool done = false;
  for (size_t pos = 0; (pos = sse.find("data: ", pos)) != std::string::npos;) {
    const size_t end = sse.find("\n\n", pos);
    const std::string data = sse.substr(pos + 6, end - pos - 6);
    if (data == "[DONE]") {
      done = true;
    } else {
      events.push_back(Json::parse(data));
    }
    pos = end;
  }
  EXPECT_TRUE(done);
  ASSERT_GE(events.size(), 3u);
  EXPECT_EQ(events.front()["choices"][0]["delta"]["role"], "assistant");
  EXPECT_EQ(events[events.size() - 2]["choices"][0]["finish_reason"], "length");
  EXPECT_EQ(events.back()["usage"]["completion_tokens"], 5);
  EXPECT_TRUE(events.back()["choices"].empty());

  auto models = c.Get("/v1/models");
  ASSERT_TRUE(models);
  EXPECT_EQ(Json::parse(models->body)["data"][0]["id"], "api-test");
  auto health = c.Get("/health");
  ASSERT_TRUE(health);
  EXPECT_EQ(health->status, 200);
}

// The prefix cache through both APIs: a repeated prompt reports the reused
// tokens (HTTP usage.prompt_tokens_details.cached_tokens on both endpoints,
// the streaming usage chunk too; gRPC Usage.cached_tokens) and answers the
// same.
TEST_F(ApiTest, RepeatedPromptsReportCachedTokens) {
  httplib::Client c = server_->Http();
  std::string prompt;
  for (int i = 0; i < 40; ++i) absl::StrAppend(&prompt, "cached prefix line ", i, ". ");
  const std::string body = Json({{"prompt", prompt}, {"max_tokens", 6}, {"temperature", 0}}).dump();
  auto first = c.Post("/v1/completions", body, "application/json");
  auto second = c.Post("/v1/completions", body, "application/json");
  ASSERT_TRUE(first && second);
  ASSERT_EQ(second->status, 200) << second->body;
  const Json a = Json::parse(first->body), b = Json::parse(second->body);
  EXPECT_EQ(a["usage"]["prompt_tokens_details"]["cached_tokens"], 0);
  const int cached = b["usage"]["prompt_tokens_details"]["cached_tokens"].get<int>();
  EXPECT_GT(cached, 0);
  EXPECT_LT(cached, b["usage"]["prompt_tokens"].get<int>());
  EXPECT_EQ(cached % 64, 0);
  EXPECT_EQ(a["choices"][0]["text"], b["choices"][0]["text"]);
  EXPECT_EQ(b["timings"]["cache_n"], cached);

  // Streaming chat: the final usage chunk carries it.
  const std::string chat =
      Json({{"messages", {{{"role", "user"}, {"content", prompt + " chat"}}}},
            {"max_tokens", 4},
            {"temperature", 0},
            {"stream", true},
            {"stream_options", {{"include_usage", true}}}})
          .dump();
  std::vector<int> seen;
  for (int round = 0; round < 2; ++round) {
    std::string sse;
    EXPECT_EQ(PostStreaming(c, "/v1/chat/completions", chat,
                            [&](const char* d, size_t n) {
                              sse.append(d, n);
                              return true;
                            }),
              200);
    const size_t at = sse.rfind("\"usage\"");
    ASSERT_NE(at, std::string::npos) << sse;
    const size_t start = sse.rfind("data: ", at) + 6;
    const Json usage = Json::parse(sse.substr(start, sse.find("\n\n", start) - start))["usage"];
    seen.push_back(usage["prompt_tokens_details"]["cached_tokens"].get<int>());
  }
  EXPECT_EQ(seen[0], 0);
  EXPECT_GT(seen[1], 0);

  // gRPC: the same prompt again is served from the cache.
  Streamed g = Generate(*server_, Greedy(prompt, 6));
  ASSERT_TRUE(g.status.ok()) << g.status.error_message();
  EXPECT_EQ(g.usage.cached_tokens(), cached);
  EXPECT_EQ(g.text, b["choices"][0]["text"]);
  EXPECT_GE(server_->Metric("moesplit_prefix_cache_hits_total"), 3);
  EXPECT_GE(server_->Metric("moesplit_prefix_cache_reused_tokens_total"), 2 * cached);
}

// llama-server's request fields through the real server: logit_bias's
// string form forces a token, a GBNF grammar bounds the answer,
// cache_prompt false reads nothing from the prefix cache, and a sampler this
// server lacks is a 400 naming it.
TEST_F(ApiTest, LlamaServerFieldsTakeEffectOverHttp) {
  httplib::Client c = server_->Http();
  auto post = [&](const std::string& path, const Json& body) {
    auto r = c.Post(path, body.dump(), "application/json");
    EXPECT_TRUE(r) << body.dump();
    return r ? std::make_pair(r->status, Json::parse(r->body, nullptr, false))
             : std::make_pair(0, Json());
  };
  auto [s1, forced] = post("/v1/completions", {{"prompt", "Say"},
                                               {"max_tokens", 3},
                                               {"temperature", 0},
                                               {"ignore_eos", true},
                                               {"logit_bias", {{"x", 100}}}});
  ASSERT_EQ(s1, 200) << forced.dump();
  EXPECT_EQ(forced["choices"][0]["text"], "xxx");
  auto [s2, yes_no] = post("/v1/chat/completions",
                           {{"messages", {{{"role", "user"}, {"content", "Well?"}}}},
                            {"max_tokens", 20},
                            {"seed", 3},
                            {"grammar", "root ::= (\"yes\" | \"no\") \"!\""}});
  ASSERT_EQ(s2, 200) << yes_no.dump();
  const std::string answer = yes_no["choices"][0]["message"]["content"];
  EXPECT_TRUE(answer == "yes!" || answer == "no!") << answer;
  std::string prompt;
  for (int i = 0; i < 40; ++i) absl::StrAppend(&prompt, "uncached line ", i, ". ");
  for (int round = 0; round < 2; ++round) {
    auto [s, j] = post("/v1/completions",
                       {{"prompt", prompt}, {"max_tokens", 1}, {"cache_prompt", false}});
    ASSERT_EQ(s, 200) << j.dump();
    EXPECT_EQ(j["usage"]["prompt_tokens_details"]["cached_tokens"], 0) << round;
  }
  auto [s3, refused] = post("/completions", {{"prompt", "x"}, {"mirostat", 2}});
  EXPECT_EQ(s3, 400);
  EXPECT_EQ(refused["error"]["param"], "mirostat") << refused.dump();
}

// n > 1: n choices with their index, choice i sampling with seed + i (what a
// single request with that seed gives, so reproducible), the prompt counted
// once in usage, streamed chunks carrying the index; n beyond --parallel is
// 400.
TEST_F(ApiTest, SeveralChoicesShareThePromptWithASeedEach) {
  httplib::Client c = server_->Http();
  const std::string prompt = "Several choices of one prompt, each with a seed of its own:";
  auto body = [&](int n, bool stream) {
    return Json({{"prompt", prompt},
                 {"max_tokens", 6},
                 {"temperature", 1.0},
                 {"seed", 42},
                 {"n", n},
                 {"stream", stream},
                 {"stream_options", {{"include_usage", true}}}})
        .dump();
  };
  auto r = c.Post("/v1/completions", body(3, false), "application/json");
  ASSERT_TRUE(r);
  ASSERT_EQ(r->status, 200) << r->body;
  const Json j = Json::parse(r->body);
  ASSERT_EQ(j["choices"].size(), 3u);
  int completion = 0;
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(j["choices"][i]["index"], i);
    Json single = Json::parse(body(1, false));
    single["seed"] = 42 + i;
    auto one = c.Post("/v1/completions", single.dump(), "application/json");
    ASSERT_TRUE(one);
    const Json o = Json::parse(one->body);
    EXPECT_EQ(j["choices"][i]["text"], o["choices"][0]["text"]) << i;
    EXPECT_EQ(j["usage"]["prompt_tokens"], o["usage"]["prompt_tokens"]);
    completion += o["usage"]["completion_tokens"].get<int>();
  }
  EXPECT_EQ(j["usage"]["completion_tokens"], completion);
  auto again = c.Post("/v1/completions", body(3, false), "application/json");
  ASSERT_TRUE(again);
  EXPECT_EQ(Json::parse(again->body)["choices"], j["choices"]);

  std::string sse;
  EXPECT_EQ(PostStreaming(c, "/v1/completions", body(2, true),
                          [&](const char* d, size_t n) {
                            sse.append(d, n);
                            return true;
                          }),
            200);
  std::vector<std::string> streamed(2);
  Json usage;
  int finished = 0;
  for (size_t pos = 0; (pos = sse.find("data: ", pos)) != std::string::npos;) {
    const size_t end = sse.find("\n\n", pos);
    const std::string data = sse.substr(pos + 6, end - pos - 6);
    pos = end;
    if (data == "[DONE]") continue;
    const Json e = Json::parse(data);
    if (e.contains("usage")) usage = e["usage"];
    for (const Json& ch : e["choices"]) {
      const int i = ch["index"].get<int>();
      ASSERT_TRUE(i == 0 || i == 1) << data;
      streamed[i] += ch["text"].get<std::string>();
      if (!ch["finish_reason"].is_null()) ++finished;
    }
  }
  EXPECT_EQ(finished, 2);
  EXPECT_EQ(streamed[0], j["choices"][0]["text"]);
  EXPECT_EQ(streamed[1], j["choices"][1]["text"]);
  EXPECT_EQ(usage["prompt_tokens"], j["usage"]["prompt_tokens"]);

  auto chat = c.Post("/v1/chat/completions",
                     R"({"messages":[{"role":"user","content":"Hi"}],"max_tokens":3,"n":2})",
                     "application/json");
  ASSERT_TRUE(chat);
  ASSERT_EQ(chat->status, 200) << chat->body;
  const Json cj = Json::parse(chat->body);
  ASSERT_EQ(cj["choices"].size(), 2u);
  EXPECT_EQ(cj["choices"][1]["index"], 1);
  EXPECT_EQ(cj["choices"][1]["message"]["role"], "assistant");
  for (int bad : {0, 17}) {
    auto b = c.Post("/v1/completions", Json({{"prompt", "x"}, {"n", bad}}).dump(),
                    "application/json");
    ASSERT_TRUE(b);
    EXPECT_EQ(b->status, 400);
    EXPECT_THAT(b->body, HasSubstr("n must be in 1..16 (--parallel)"));
  }
}

struct BadCase {
  std::string name;
  std::string http_path;
  std::string http_body;
  int http_status;
  grpc::StatusCode grpc_code;  // for the same request over gRPC Chat/Generate
  std::string message;         // a substring of both messages
};

v1::ChatRequest ChatFor(const std::string& role, const std::string& content) {
  v1::ChatRequest req;
  if (!role.empty()) {
    auto* m = req.add_messages();
    m->set_role(role);
    m->set_content(content);
  }
  return req;
}

// Claude Code's billing line (its cch changing on every request) is left out
// of the rendered prompt by the default --volatile-system-pattern, on the
// OpenAI chat route and gRPC Chat alike: a request with another stamp reuses
// the prompt from the prefix cache, and both APIs render the same prompt.
TEST_F(ApiTest, ClaudeCodesBillingLineIsKeptOutOfTheCachedPrefix) {
  httplib::Client c = server_->Http();
  std::string rules;
  for (int i = 0; i < 30; ++i) absl::StrAppend(&rules, "Billing rule ", i, ". ");
  auto system = [&](const std::string& cch) {
    return absl::StrCat("x-anthropic-billing-header: cc_version=2.1.101.e51; cc_entrypoint=cli; cch=",
                        cch, ";\n", rules);
  };
  auto chat = [&](const std::string& cch) {
    auto r = c.Post("/v1/chat/completions",
                    Json({{"messages", {{{"role", "system"}, {"content", system(cch)}},
                                        {{"role", "user"}, {"content", "Hello"}}}},
                          {"max_tokens", 1}})
                        .dump(),
                    "application/json");
    EXPECT_TRUE(r && r->status == 200) << (r ? r->body : "no answer");
    return Json::parse(r->body)["usage"];
  };
  const Json a = chat("a5145"), b = chat("0aaa9");
  EXPECT_EQ(a["prompt_tokens"], b["prompt_tokens"]);
  const int cached = b["prompt_tokens_details"]["cached_tokens"].get<int>();
  EXPECT_EQ(cached, (b["prompt_tokens"].get<int>() - 1) / 64 * 64) << b.dump();
  EXPECT_GT(cached, 0);

  v1::ChatRequest req = ChatFor("system", system("77777"));
  auto* m = req.add_messages();
  m->set_role("user");
  m->set_content("Hello");
  req.set_max_tokens(1);
  Streamed g = Chat(*server_, req);
  ASSERT_TRUE(g.status.ok()) << g.status.error_message();
  EXPECT_EQ(g.usage.prompt_tokens(), b["prompt_tokens"].get<int>());
  EXPECT_EQ(g.usage.cached_tokens(), cached);
}

TEST_F(ApiTest, BadRequestsGetPreciseErrorsAndTheServerKeepsServing) {
  std::string long_prompt;
  for (int i = 0; i < kCtx; ++i) long_prompt += " word";
  const std::vector<BadCase> cases = {
      {"empty messages", "/v1/chat/completions", R"({"messages":[]})", 400,
       grpc::StatusCode::INVALID_ARGUMENT, "messages must not be empty"},
      {"unknown role", "/v1/chat/completions",
       R"({"messages":[{"role":"wizard","content":"hi"}]})", 400,
       grpc::StatusCode::INVALID_ARGUMENT, "role 'wizard' is not one of"},
      {"negative max_tokens", "/v1/completions", R"({"prompt":"hi","max_tokens":-1})", 400,
       grpc::StatusCode::INVALID_ARGUMENT, "max_tokens"},
      {"top_p 2", "/v1/completions", R"({"prompt":"hi","top_p":2})", 400,
       grpc::StatusCode::INVALID_ARGUMENT, "top_p must be in (0, 1], got 2"},
      {"ignore_eos not a boolean", "/v1/chat/completions",
       R"({"messages":[{"role":"user","content":"hi"}],"ignore_eos":"yes"})", 400,
       grpc::StatusCode::INVALID_ARGUMENT, "ignore_eos must be true or false"},
      {"invalid UTF-8", "/v1/chat/completions",
       "{\"messages\":[{\"role\":\"user\",\"content\":\"a\xff\xfe\"}]}", 400,
       grpc::StatusCode::INVALID_ARGUMENT, "UTF-8"},
      {"over-long prompt", "/v1/completions",
       absl::StrCat(R"({"prompt":")", long_prompt, R"("})"), 400,
       grpc::StatusCode::INVALID_ARGUMENT, absl::StrCat("the context holds ", kCtx)},
      {"unknown model", "/v1/completions", R"({"model":"gpt-17","prompt":"hi"})", 404,
       grpc::StatusCode::NOT_FOUND, "model 'gpt-17' is not served here"},
  };
  httplib::Client c = server_->Http();
  for (const BadCase& bc : cases) {
    auto r = c.Post(bc.http_path, bc.http_body, "application/json");
    ASSERT_TRUE(r) << bc.name;
    EXPECT_EQ(r->status, bc.http_status) << bc.name << ": " << r->body;
    Json j = Json::parse(r->body, nullptr, false);
    ASSERT_TRUE(j.contains("error")) << bc.name << ": " << r->body;
    EXPECT_THAT(j["error"]["message"].get<std::string>(), HasSubstr(bc.message)) << bc.name;
    EXPECT_TRUE(j["error"].contains("type") && j["error"].contains("param") &&
                j["error"].contains("code"))
        << bc.name;
    if (bc.name == "top_p 2") {
      EXPECT_EQ(j["error"]["param"], "top_p");
    }
    if (bc.name == "ignore_eos not a boolean") {
      EXPECT_EQ(j["error"]["param"], "ignore_eos");
    }
    if (bc.name == "unknown model") {
      EXPECT_EQ(j["error"]["code"], "model_not_found");
    }
  }
  // The same cases over gRPC.
  auto expect = [&](const std::string& name, const Streamed& s, grpc::StatusCode code,
                    const std::string& msg) {
    EXPECT_EQ(s.status.error_code(), code) << name << ": " << s.status.error_message();
    EXPECT_THAT(s.status.error_message(), HasSubstr(msg)) << name;
  };
  expect("empty messages", Chat(*server_, ChatFor("", "")), grpc::StatusCode::INVALID_ARGUMENT,
         "messages must not be empty");
  expect("unknown role", Chat(*server_, ChatFor("wizard", "hi")),
         grpc::StatusCode::INVALID_ARGUMENT, "role 'wizard' is not one of");
  // The text fields are proto `bytes`, so invalid UTF-8 reaches the service.
  expect("invalid UTF-8", Chat(*server_, ChatFor("user", "a\xff\xfe")),
         grpc::StatusCode::INVALID_ARGUMENT, "messages[0].content is not valid UTF-8");
  expect("invalid UTF-8 prompt", Generate(*server_, Greedy("a\xff\xfe", 4)),
         grpc::StatusCode::INVALID_ARGUMENT, "prompt is not valid UTF-8");
  v1::GenerateRequest bad_stop = Greedy("hi", 4);
  bad_stop.add_stop("\xc3");
  expect("invalid UTF-8 stop", Generate(*server_, bad_stop), grpc::StatusCode::INVALID_ARGUMENT,
         "stop[0] is not valid UTF-8");
  v1::GenerateRequest neg = Greedy("hi", -1);
  expect("negative max_tokens", Generate(*server_, neg), grpc::StatusCode::INVALID_ARGUMENT,
         "max_tokens -1 < 0");
  v1::GenerateRequest top_p = Greedy("hi", 4);
  top_p.mutable_sampling()->set_top_p(2);
  expect("top_p 2", Generate(*server_, top_p), grpc::StatusCode::INVALID_ARGUMENT,
         "top_p must be in (0, 1], got 2");
  v1::GenerateRequest too_long = Greedy(long_prompt, 4);
  expect("over-long prompt", Generate(*server_, too_long), grpc::StatusCode::INVALID_ARGUMENT,
         absl::StrCat("the context holds ", kCtx));
  v1::GenerateRequest unknown = Greedy("hi", 4);
  unknown.set_model("gpt-17");
  expect("unknown model", Generate(*server_, unknown), grpc::StatusCode::NOT_FOUND,
         "model 'gpt-17' is not served here");
  v1::GenerateRequest bad_token = Greedy("", 4);
  bad_token.add_prompt_tokens(1 << 30);
  expect("token id out of range", Generate(*server_, bad_token),
         grpc::StatusCode::INVALID_ARGUMENT, "is outside [0, ");
  // Still serving, nothing held.
  Streamed ok = Generate(*server_, Greedy("still there?", 3));
  EXPECT_TRUE(ok.status.ok()) << ok.status.error_message();
  EXPECT_EQ(ok.tokens.size(), 3u);
  EXPECT_TRUE(server_->WaitIdle());
  auto m = c.Get("/metrics");
  ASSERT_TRUE(m);
  EXPECT_THAT(m->body, HasSubstr("outcome=\"invalid_argument\""));
}

// A template whose generation prompt opens a <think> block (as Qwen3.5 and
// DeepSeek-V3.1 do): Chat and /v1/chat/completions return the output split by
// chat::SplitReasoning, in reasoning_content and content.
TEST(ReasoningTest, ThinkBlockGoesToReasoningContent) {
  const std::string tmpl = absl::StrCat(::testing::TempDir(), "/think_", getpid(), ".jinja");
  std::ofstream(tmpl) << "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}"
                         "<|im_end|>\n{% endfor %}{% if add_generation_prompt %}"
                         "<|im_start|>assistant\n<think>\n{% endif %}";
  Server s(2, 2, {"--chat-template-file", tmpl});
  const std::string prompt = "<|im_start|>user\nThink first.<|im_end|>\n<|im_start|>assistant\n<think>\n";
  Streamed g = Generate(s, Greedy(prompt, 12));
  ASSERT_TRUE(g.status.ok()) << g.status.error_message();
  const chat::ReasoningSplit want = chat::SplitReasoning(g.text, /*starts_in_reasoning=*/true);
  ASSERT_FALSE(want.reasoning_content.empty());

  v1::ChatRequest req = ChatFor("user", "Think first.");
  req.set_max_tokens(12);
  req.mutable_sampling()->set_temperature(0);
  Streamed c = Chat(s, req);
  ASSERT_TRUE(c.status.ok()) << c.status.error_message();
  EXPECT_EQ(c.tokens, g.tokens);
  EXPECT_EQ(c.reasoning, want.reasoning_content);
  EXPECT_EQ(c.text, want.content);

  auto r = s.Http().Post(
      "/v1/chat/completions",
      R"({"messages":[{"role":"user","content":"Think first."}],"max_tokens":12,"temperature":0})",
      "application/json");
  ASSERT_TRUE(r);
  ASSERT_EQ(r->status, 200) << r->body;
  const Json msg = Json::parse(r->body)["choices"][0]["message"];
  EXPECT_EQ(msg["reasoning_content"], want.reasoning_content);
  EXPECT_EQ(msg["content"], want.content);
  std::filesystem::remove(tmpl);
}

// A gpt-oss test model made to answer in harmony. Its one layer (a
// sliding-window layer of W = 10 positions: enough to tell the two
// "assistant<|channel|>" in the script apart) is set by hand: one-hot token
// embeddings (n_embd >= 2 n_vocab); attention with zero queries and keys,
// so every position in the window weighs the same, values = the tokens'
// one-hots, written by attn_output into a second block of the residual: the
// hidden state is the current token plus the mean of the last W tokens;
// (x W); the experts write nothing (ffn_down_exps and its bias zero). The output
// head is then a linear function of (current token, recent tokens), fitted
// here by a perceptron so that greedy decoding after the prompt "Hi" writes
// `script`. Returns the model's path.
std::string ScriptedHarmonyModel(const std::string& script) {
  constexpr int64_t kWindow = 10, kD = 1024, kHeads = 16, kHeadDim = 64;
  const std::string p = absl::StrCat(::testing::TempDir(), "/harmony_", getpid(), ".gguf");
  Subprocess gen(kCli, {"make-test-model", "--out", p, "--preset", "gpt-oss-20b", "--layers",
                        "1", "-d", std::to_string(kD), "--heads", std::to_string(kHeads),
                        "--kv-heads", std::to_string(kHeads), "--head-dim",
                        std::to_string(kHeadDim), "--experts", "4", "--top-k", "2",
                        "--expert-ffn", "32", "--ffn", "32", "--vocab", "400", "--type", "F32",
                        "--ctx", "2048", "--window", std::to_string(kWindow), "--threads", "2"});
  EXPECT_EQ(gen.Wait(120s), 0) << gen.stderr_text();
  std::ifstream in(p, std::ios::binary);
  std::vector<uint8_t> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  auto g = GgufFile::FromBuffer(bytes.data(), bytes.size());
  EXPECT_TRUE(g.ok()) << g.status();
  if (!g.ok()) return p;
  auto tok = Tokenizer::FromGguf(**g);
  EXPECT_TRUE(tok.ok()) << tok.status();
  if (!tok.ok()) return p;
  auto floats = [&](const std::string& name) -> float* {
    const GgufTensor* t = (*g)->FindTensor(name);
    EXPECT_TRUE(t != nullptr && t->type == GgmlType::kF32) << name;
    if (t == nullptr) return nullptr;
    float* f = reinterpret_cast<float*>(bytes.data() + (t->data - bytes.data()));
    std::fill(f, f + t->n_elements(), 0.0f);  // everything set below starts from zero
    return f;
  };
  const int64_t nv = (*tok)->n_vocab();
  EXPECT_LE(2 * nv, kD);
  for (const char* zero : {"blk.0.attn_q.weight", "blk.0.attn_q.bias", "blk.0.attn_k.weight",
                           "blk.0.attn_k.bias", "blk.0.attn_v.bias", "blk.0.attn_output.bias",
                           "blk.0.ffn_down_exps.weight", "blk.0.ffn_down_exps.bias"}) {
    floats(zero);
  }
  float* sinks = floats("blk.0.attn_sinks.weight");
  std::fill(sinks, sinks + kHeads, -100.0f);  // no weight on the sink
  float* embd = floats("token_embd.weight");
  for (int64_t x = 0; x < nv; ++x) embd[x * kD + x] = 1.0f;
  for (const char* one : {"blk.0.attn_norm.weight", "output_norm.weight"}) {
    float* w = floats(one);
    std::fill(w, w + kD, 1.0f);
  }
  // v = the one-hot of the token (the normed input is sqrt(d) times it).
  float* wv = floats("blk.0.attn_v.weight");
  for (int64_t x = 0; x < nv; ++x) wv[x * kD + x] = 1.0f / std::sqrt(static_cast<float>(kD));
  float* wo = floats("blk.0.attn_output.weight");
  // (times W: a token's share of the window weighs as much as the current
  // token, for the fit below)
  for (int64_t x = 0; x < nv; ++x) wo[(nv + x) * kD + x] = static_cast<float>(kWindow);
  // The steps: the current token and the window's mean, and what must follow.
  const std::vector<int32_t> prompt =
      *(*tok)->Encode("<|start|>user<|message|>Hi<|end|><|start|>assistant", true, false);
  const std::vector<int32_t> ids = *(*tok)->Encode(script, true, false);
  struct Step {
    int32_t cur, want;
    std::map<int32_t, float> bag;
  };
  std::vector<Step> steps;
  std::vector<int32_t> seq = prompt;
  for (int32_t id : ids) {
    Step st{seq.back(), id, {}};
    const size_t n = std::min<size_t>(kWindow, seq.size());
    for (size_t i = seq.size() - n; i < seq.size(); ++i) {
      st.bag[seq[i]] += static_cast<float>(kWindow) / n;
    }
    steps.push_back(st);
    seq.push_back(id);
  }
  // W[y]: kD weights; score(y) = W[y][cur] + sum_j bag_j W[y][nv + j].
  std::vector<float> w(nv * kD, 0.0f);
  auto score = [&](const Step& st, int32_t y) {
    float sc = w[y * kD + st.cur];
    for (const auto& [j, b] : st.bag) sc += b * w[y * kD + nv + j];
    return sc;
  };
  // Perceptron updates towards a margin of 4; the worst margin left must
  // still be clear of the f16 rounding of the attention.
  float worst = -1e30f;
  for (int epoch = 0; epoch < 20000 && worst < 4.0f; ++epoch) {
    worst = 1e30f;
    for (const Step& st : steps) {
      int32_t rival = -1;
      for (int32_t y = 0; y < nv; ++y) {
        if (y != st.want && (rival < 0 || score(st, y) > score(st, rival))) rival = y;
      }
      const float margin = score(st, st.want) - score(st, rival);
      worst = std::min(worst, margin);

      if (margin >= 4.0f) continue;
      for (auto [y, sign] : {std::pair{st.want, 1.0f}, std::pair{rival, -1.0f}}) {
        w[y * kD + st.cur] += sign;
        for (const auto& [j, b] : st.bag) w[y * kD + nv + j] += sign * b;
      }
    }
  }
  EXPECT_GE(worst, 1.0f) << "no linear head writes the script";
  float* out = floats("output.weight");
  std::copy(w.begin(), w.end(), out);
  std::ofstream(p, std::ios::binary | std::ios::trunc)
      .write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
  return p;
}

// gpt-oss's harmony output on the OpenAI and gRPC chat APIs: the analysis
// channel is reasoning_content, the final channel content, streamed and not
// (the model above writes exactly this harmony message).
TEST(HarmonyTest, AnalysisIsReasoningAndFinalIsContent) {
  const std::string script =
      "<|channel|>analysis<|message|>Think first.<|end|><|start|>assistant<|channel|>final"
      "<|message|>Hello there!<|return|>";
  const std::string model = ScriptedHarmonyModel(script);
  Server s(2, 2, {}, model);
  const std::string body =
      R"({"messages":[{"role":"user","content":"Hi"}],"max_tokens":40,"temperature":0)";
  auto r = s.Http().Post("/v1/chat/completions", body + "}", "application/json");
  ASSERT_TRUE(r);
  ASSERT_EQ(r->status, 200) << r->body;
  const Json choice = Json::parse(r->body)["choices"][0];
  EXPECT_EQ(choice["message"]["reasoning_content"], "Think first.") << r->body;
  EXPECT_EQ(choice["message"]["content"], "Hello there!") << r->body;
  EXPECT_EQ(choice["finish_reason"], "stop") << r->body;
  // Streamed: the same split, as deltas.
  int status = 0;
  const std::string sse = PostSse(s, "/v1/chat/completions", body + R"(,"stream":true})", &status);
  ASSERT_EQ(status, 200) << sse;
  std::string reasoning, content;
  int reasoning_chunks = 0, content_chunks = 0;
  for (size_t at = 0; (at = sse.find("data: ", at)) != std::string::npos;) {
    const size_t end = sse.find("\n\n", at);
    const std::string payload = sse.substr(at + 6, end - at - 6);
    at = end;
    if (payload == "[DONE]") break;
    const Json delta = Json::parse(payload)["choices"][0]["delta"];
    if (delta.contains("reasoning_content")) {
      reasoning += delta["reasoning_content"].get<std::string>();
      ++reasoning_chunks;
    }
    if (delta.contains("content") && delta["content"].is_string()) {
      content += delta["content"].get<std::string>();
      ++content_chunks;
    }
  }
  EXPECT_EQ(reasoning, "Think first.") << sse;
  EXPECT_EQ(content, "Hello there!") << sse;
  EXPECT_GT(reasoning_chunks, 1) << "reasoning should stream as it arrives";
  EXPECT_GT(content_chunks, 1);
  // gRPC Chat.
  v1::ChatRequest req = ChatFor("user", "Hi");
  req.set_max_tokens(40);
  req.mutable_sampling()->set_temperature(0);
  Streamed g = Chat(s, req);
  ASSERT_TRUE(g.status.ok()) << g.status.error_message();
  EXPECT_EQ(g.reasoning, "Think first.");
  EXPECT_EQ(g.text, "Hello there!");
  std::filesystem::remove(model);
}

// A harmony tool call written by a model (the same hand-set gpt-oss model,
// fitted to a call): a commentary message to functions.get_weather comes
// back as an OpenAI tool call, whole and streamed.
TEST(HarmonyTest, AToolCallComesBackAsToolCalls) {
  const std::string model = ScriptedHarmonyModel(
      " to=functions.get_weather<|channel|>commentary json<|message|>{\"city\":\"Paris\"}"
      "<|call|>");
  Server s(2, 2, {}, model);
  const std::string body =
      R"({"messages":[{"role":"user","content":"Hi"}],"max_tokens":120,"temperature":0,)"
      R"("tools":[{"type":"function","function":{"name":"get_weather","parameters":)"
      R"({"type":"object","properties":{"city":{"type":"string"}}}}}])";
  auto r = s.Http().Post("/v1/chat/completions", body + "}", "application/json");
  ASSERT_TRUE(r);
  ASSERT_EQ(r->status, 200) << r->body;
  const Json choice = Json::parse(r->body)["choices"][0];
  EXPECT_EQ(choice["finish_reason"], "tool_calls") << r->body;
  ASSERT_EQ(choice["message"]["tool_calls"].size(), 1u) << r->body;
  EXPECT_EQ(choice["message"]["tool_calls"][0]["function"]["name"], "get_weather");
  EXPECT_EQ(Json::parse(choice["message"]["tool_calls"][0]["function"]["arguments"].get<std::string>()),
            Json::parse(R"({"city":"Paris"})"));
  int status = 0;
  const std::string sse = PostSse(s, "/v1/chat/completions", body + R"(,"stream":true})", &status);
  ASSERT_EQ(status, 200) << sse;
  EXPECT_NE(sse.find("\"tool_calls\""), std::string::npos) << sse;
  EXPECT_NE(sse.find("get_weather"), std::string::npos) << sse;
  EXPECT_NE(sse.find("\"finish_reason\":\"tool_calls\""), std::string::npos) << sse;
  std::filesystem::remove(model);
}

// tool_choice required on gpt-oss (the hand-set model, fitted to reason and
// then answer without a call): the analysis message stays the reasoning, and
// where the model would open its final answer the grammar writes a
// commentary message to a function, as the vocabulary's harmony tokens, with
// arguments valid under its parameters. With tool_choice auto the same model
// answers as scripted.
TEST(HarmonyTest, RequiredToolChoiceForcesACallAfterTheAnalysis) {
  const std::string model = ScriptedHarmonyModel(
      "<|channel|>analysis<|message|>Think first.<|end|><|start|>assistant<|channel|>final"
      "<|message|>Hello there!<|return|>");
  Server s(2, 2, {}, model);
  const std::string body =
      R"({"messages":[{"role":"user","content":"Hi"}],"max_tokens":200,"temperature":0,)"
      R"("tools":[{"type":"function","function":{"name":"get_weather","parameters":)"
      R"({"type":"object","properties":{"city":{"enum":["Paris","Oslo"]}},"required":["city"]}}}])";
  auto a = s.Http().Post("/v1/chat/completions", body + "}", "application/json");
  ASSERT_TRUE(a);
  ASSERT_EQ(a->status, 200) << a->body;
  const Json free = Json::parse(a->body)["choices"][0];
  EXPECT_EQ(free["message"]["content"], "Hello there!") << a->body;
  EXPECT_EQ(free["finish_reason"], "stop") << a->body;
  for (const bool stream : {false, true}) {
    SCOPED_TRACE(stream);
    const std::string forced =
        body + R"(,"tool_choice":"required","logprobs":true)" + (stream ? R"(,"stream":true})" : "}");
    if (!stream) {
      auto r = s.Http().Post("/v1/chat/completions", forced, "application/json");
      ASSERT_TRUE(r);
      ASSERT_EQ(r->status, 200) << r->body;
      const Json choice = Json::parse(r->body)["choices"][0];
      EXPECT_EQ(choice["message"]["reasoning_content"], "Think first.") << r->body;
      EXPECT_TRUE(choice["message"]["content"].is_null()) << r->body;
      EXPECT_EQ(choice["finish_reason"], "tool_calls") << r->body;
      ASSERT_EQ(choice["message"]["tool_calls"].size(), 1u) << r->body;
      const Json call = choice["message"]["tool_calls"][0]["function"];
      EXPECT_EQ(call["name"], "get_weather");
      const Json args = Json::parse(call["arguments"].get<std::string>());
      EXPECT_TRUE(args == Json::parse(R"({"city":"Paris"})") || args == Json::parse(R"({"city":"Oslo"})"))
          << args;
      // The frame's tags were the special tokens, not their text spelled out.
      int constrain = 0, message = 0;
      for (const Json& t : choice["logprobs"]["content"]) {
        constrain += t["token"] == "<|constrain|>";
        message += t["token"] == "<|message|>";
      }
      EXPECT_EQ(constrain, 1) << choice["logprobs"];
      EXPECT_EQ(message, 2) << choice["logprobs"];  // the analysis's and the call's
    } else {
      int status = 0;
      const std::string sse = PostSse(s, "/v1/chat/completions", forced, &status);
      ASSERT_EQ(status, 200) << sse;
      EXPECT_NE(sse.find("\"tool_calls\""), std::string::npos) << sse;
      EXPECT_NE(sse.find("\"finish_reason\":\"tool_calls\""), std::string::npos) << sse;
      EXPECT_EQ(sse.find("Hello there"), std::string::npos) << sse;
    }
  }
  std::filesystem::remove(model);
}

// tool_choice named / required with a random-weight model, on a
// Hermes-family template (Qwen3's: JSON arguments), a Qwen3-Coder-family
// one (Qwen3.5's: XML parameters, after the think block its generation
// prompt opens), DeepSeek-V3.1's (special-token frames, which this
// vocabulary lacks, so they are spelled out), GLM-4.6's and GLM-4.7-Flash's
// (<arg_key>/<arg_value> tags; 4.7 after its opened think block) and
// MiniMax-M2's (<invoke>/<parameter> tags), Nemotron 3 Nano's (Qwen3-Coder's
// calls), Llama 3.1's (the bare JSON object) and Gemma 4's (its dictionary
// syntax, its tags spelled out): constrained decoding makes it
// call the function with arguments that match the schema, on HTTP
// (streamed and not) and gRPC. gpt-oss's is HarmonyTest's below (harmony
// needs a vocabulary with its tokens).
struct ToolChoiceCase {
  const char* label;
  const char* template_file;
  const char* city;  // the city property's schema
};

class ToolChoiceTest : public ::testing::TestWithParam<ToolChoiceCase> {};

// The template's file: the oracle's, or one this repository keeps.
std::string TemplatePath(const std::string& file) {
  for (const chat::fixtures::TemplateFixture& t : chat::fixtures::TemplateFixtures()) {
    if (t.name + ".jinja" == file) return t.template_path;
  }
  return std::string(MOESPLIT_FIXTURES_DIR) + "/templates/" + file;
}

TEST_P(ToolChoiceTest, RequiredAndNamedForceAValidCall) {
  const std::string tmpl = TemplatePath(GetParam().template_file);
  if (!std::filesystem::exists(tmpl)) GTEST_SKIP() << tmpl << " not present";
  Server s(2, 2, {"--chat-template-file", tmpl});
  const std::string tools = absl::StrCat(
      R"([{"type":"function","function":{"name":"get_weather","description":"Forecast",)",
      R"("parameters":{"type":"object","properties":{"city":)", GetParam().city,
      R"(,"days":{"type":"integer"}},"required":["city","days"]}}},)",
      R"({"type":"function","function":{"name":"search","description":"Search the web"}}])");
  {
    // A grammar and a forced call both constrain the output: a 400.
    auto g = s.Http().Post(
        "/v1/chat/completions",
        absl::StrCat(R"({"messages":[{"role":"user","content":"Hi"}],"tools":)", tools,
                     R"(,"tool_choice":"required","grammar":"root ::= \"x\""})"),
        "application/json");
    ASSERT_TRUE(g);
    EXPECT_EQ(g->status, 400) << g->body;
    EXPECT_EQ(Json::parse(g->body)["error"]["param"], "grammar") << g->body;
  }
  for (const std::string& choice :
       std::vector<std::string>{R"({"type":"function","function":{"name":"get_weather"}})",
                                R"("required")"}) {
    SCOPED_TRACE(choice);
    const std::string body = absl::StrCat(
        R"({"messages":[{"role":"user","content":"Weather in Paris?"}],"max_tokens":200,)",
        R"("temperature":0.8,"seed":3,"parallel_tool_calls":false,"tools":)", tools, R"(,"tool_choice":)", choice);
    auto r = s.Http().Post("/v1/chat/completions", body + "}", "application/json");
    ASSERT_TRUE(r);
    ASSERT_EQ(r->status, 200) << r->body;
    const Json choice0 = Json::parse(r->body)["choices"][0];
    EXPECT_EQ(choice0["finish_reason"], "tool_calls") << r->body;
    ASSERT_EQ(choice0["message"]["tool_calls"].size(), 1u) << r->body;
    const Json call = choice0["message"]["tool_calls"][0];
    EXPECT_EQ(call["type"], "function");
    EXPECT_THAT(call["id"].get<std::string>(), ::testing::StartsWith("call_"));
    const std::string name = call["function"]["name"];
    const Json args = Json::parse(call["function"]["arguments"].get<std::string>());
    EXPECT_TRUE(choice0["message"].value("reasoning_content", "").empty()) << r->body;
    EXPECT_TRUE(choice0["message"]["content"].is_null() ||
                choice0["message"]["content"].get<std::string>().empty()) << r->body;
    if (name == "get_weather") {
      EXPECT_TRUE(args["city"].is_string() && args["city"].get<std::string>().size() <= 12) << args;
      EXPECT_TRUE(args["days"].is_number_integer()) << args;
    } else {
      EXPECT_EQ(name, "search") << r->body;
      EXPECT_NE(choice.find("required"), std::string::npos) << "named get_weather, got " << name;
      EXPECT_TRUE(args.is_object()) << args;
    }
    // Streamed: the call comes as delta.tool_calls.
    int status = 0;
    const std::string sse =
        PostSse(s, "/v1/chat/completions", body + R"(,"stream":true})", &status);
    ASSERT_EQ(status, 200) << sse;
    EXPECT_NE(sse.find("\"tool_calls\""), std::string::npos) << sse;
    EXPECT_NE(sse.find("\"finish_reason\":\"tool_calls\""), std::string::npos) << sse;
  }
  // gRPC Chat, named.
  v1::ChatRequest req = ChatFor("user", "Weather in Paris?");
  req.set_max_tokens(200);
  req.set_tools_json(tools);
  req.set_tool_choice_json(R"({"type":"function","function":{"name":"get_weather"}})");
  req.set_no_parallel_tool_calls(true);
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + 60s);
  auto reader = s.stub->Chat(&ctx, req);
  v1::ChatResponse resp;
  std::vector<v1::ToolCall> calls;
  std::string finish;
  while (reader->Read(&resp)) {
    for (const auto& tc : resp.tool_calls()) calls.push_back(tc);
    if (!resp.finish_reason().empty()) finish = resp.finish_reason();
  }
  ASSERT_TRUE(reader->Finish().ok());
  ASSERT_EQ(calls.size(), 1u);
  EXPECT_EQ(calls[0].name(), "get_weather");
  EXPECT_TRUE(Json::parse(calls[0].arguments())["days"].is_number_integer());
  EXPECT_EQ(finish, "tool_calls");
}

INSTANTIATE_TEST_SUITE_P(
    Templates, ToolChoiceTest,
    ::testing::Values(ToolChoiceCase{"qwen3", "Qwen-Qwen3-0.6B.jinja", R"({"type":"string","maxLength":12})"},
                      ToolChoiceCase{"qwen3_5", "Qwen3.5-4B.jinja",
                                     R"({"type":"string","enum":["Paris","Oslo","Rome"]})"},
                      ToolChoiceCase{"deepseek_v3_1", "deepseek-ai-DeepSeek-V3.1.jinja",
                                     R"({"type":"string","maxLength":12})"},
                      ToolChoiceCase{"glm_4_6", "GLM-4.6.jinja",
                                     R"({"type":"string","enum":["Paris","Oslo","Rome"]})"},
                      ToolChoiceCase{"glm_4_7_flash", "GLM-4.7-Flash.jinja",
                                     R"({"type":"string","enum":["Paris","Oslo","Rome"]})"},
                      ToolChoiceCase{"minimax_m2", "MiniMax-M2.jinja",
                                     R"({"type":"string","enum":["Paris","Oslo","Rome"]})"},
                      ToolChoiceCase{"nemotron_3_nano", "NVIDIA-Nemotron-3-Nano-30B-A3B-BF16.jinja",
                                     R"({"type":"string","enum":["Paris","Oslo","Rome"]})"},
                      ToolChoiceCase{"llama_3_1", "meta-llama-Llama-3.1-8B-Instruct.jinja",
                                     R"({"type":"string","maxLength":12})"},
                      ToolChoiceCase{"gemma_4", "google-gemma-4-31B-it.jinja",
                                     R"({"type":"string","maxLength":12})"}),
    [](const auto& info) { return std::string(info.param.label); });

// Runs a shell command; its stdout in *out, its exit status returned (-1
// when it cannot start).
int ShellOutput(const std::string& cmd, std::string* out) {
  FILE* p = popen(cmd.c_str(), "r");
  if (p == nullptr) return -1;
  char buf[4096];
  for (size_t n; (n = fread(buf, 1, sizeof buf, p)) > 0;) out->append(buf, n);
  return pclose(p);
}

// `moesplit render-template` prints exactly what llama.cpp rendered for every
// template fixture (BOS/EOS from the tiny qwen3moe model, the fixture date),
// the oracle's renderings and this repository's (chat/testing/template_fixtures.h).
TEST(RenderTemplateCommandTest, MatchesEveryFixtureByteForByte) {
  const std::string model = std::string(MOESPLIT_FIXTURES_DIR) + "/models/qwen3moe-tiny-q8_0.gguf";
  int cases = 0;
  for (const chat::fixtures::TemplateFixture& t : chat::fixtures::TemplateFixtures()) {
    // A template without llama.cpp's renderings is one of a family not served yet.
    if (t.expected_path.empty()) continue;
    const Json expected = Json::parse(chat::fixtures::ReadTextFile(t.expected_path));
    // The day llama.cpp rendered them (Llama 3.x prints it).
    const std::string date = expected.value("date", std::string("2026-11-29"));
    int i = 0;
    for (const Json& c : expected["cases"]) {
      const std::string messages =
          absl::StrCat(::testing::TempDir(), "/render_", getpid(), "_", i++, ".json");
      std::ofstream(messages) << c["request"]["messages"].dump();
      const bool gen = c["request"].value("add_generation_prompt", false);
      const bool thinking =
          c["request"].value("chat_template_kwargs", Json::object()).value("enable_thinking", true);
      const std::string cmd =
          absl::StrCat("'", kCli, "' render-template --model '", model, "' --template-file '",
                       t.template_path, "' --messages-json '", messages, "' --date ", date,
                       gen ? "" : " --no-generation-prompt", thinking ? "" : " --no-thinking");
      std::string out;
      EXPECT_EQ(ShellOutput(cmd, &out), 0) << cmd;
      EXPECT_EQ(out, c["prompt"].get<std::string>()) << t.expected_path << " case " << i - 1;
      std::remove(messages.c_str());
      ++cases;
    }
  }
  EXPECT_GE(cases, 44);
}

// render-template --tools-json renders every case of the tools fixtures
// (tool definitions, assistant tool_calls, role "tool" results) as llama.cpp.
TEST(RenderTemplateCommandTest, ToolsFixturesWithToolsJson) {
  const std::string model = std::string(MOESPLIT_FIXTURES_DIR) + "/models/qwen3moe-tiny-q8_0.gguf";
  int cases = 0;
  for (const chat::fixtures::TemplateFixture& t : chat::fixtures::TemplateFixtures()) {
    if (t.tools_expected_path.empty()) continue;
    // Ordered: the template prints the tools' keys in the order given.
    const nlohmann::ordered_json expected =
        nlohmann::ordered_json::parse(chat::fixtures::ReadTextFile(t.tools_expected_path));
    for (const nlohmann::ordered_json& c : expected["cases"]) {
      const std::string base = absl::StrCat(::testing::TempDir(), "/tools_", getpid(), "_", cases);
      std::ofstream(base + ".messages.json") << c["request"]["messages"].dump();
      std::ofstream(base + ".tools.json") << c["request"]["tools"].dump();
      const std::string cmd = absl::StrCat(
          "'", kCli, "' render-template --model '", model, "' --template-file '", t.template_path,
          "' --messages-json '", base, ".messages.json' --tools-json '", base,
          ".tools.json' --date ", expected["date"].get<std::string>());
      std::string out;
      if (c.contains("error")) {  // the template refuses it (Llama 3.x: one call per message)
        EXPECT_NE(ShellOutput(cmd + " 2>/dev/null", &out), 0) << cmd;
      } else {
        EXPECT_EQ(ShellOutput(cmd, &out), 0) << cmd;
        EXPECT_EQ(out, c["prompt"].get<std::string>()) << t.tools_expected_path << " case " << cases;
      }
      std::remove((base + ".messages.json").c_str());
      std::remove((base + ".tools.json").c_str());
      ++cases;
    }
  }
  EXPECT_GE(cases, 26);
}

// Tools on both APIs with Qwen3's template (a random-weight model does not
// call tools by itself: what is checked is that the tools and a tool turn
// reach the prompt, the shapes, and the errors).
TEST(ToolsTest, ToolsReachThePromptAndBadToolsAreRefused) {
  const std::string tmpl = std::string(MOESPLIT_FIXTURES_DIR) + "/templates/Qwen-Qwen3-0.6B.jinja";
  Server s(2, 2, {"--chat-template-file", tmpl});
  const std::string tools =
      R"([{"type":"function","function":{"name":"get_weather","description":"Weather of a city",)"
      R"("parameters":{"type":"object","properties":{"city":{"type":"string"}}}}}])";
  v1::ChatRequest plain = ChatFor("user", "Weather in Oslo?");
  plain.set_max_tokens(2);
  plain.mutable_sampling()->set_temperature(0);
  Streamed base = Chat(s, plain);
  ASSERT_TRUE(base.status.ok()) << base.status.error_message();

  v1::ChatRequest with = plain;
  with.set_tools_json(tools);
  with.set_no_parallel_tool_calls(true);
  Streamed w = Chat(s, with);
  ASSERT_TRUE(w.status.ok()) << w.status.error_message();
  EXPECT_GT(w.usage.prompt_tokens(), base.usage.prompt_tokens() + 20);
  with.set_tool_choice_json("none");  // a bare word, or JSON text
  Streamed n = Chat(s, with);
  ASSERT_TRUE(n.status.ok()) << n.status.error_message();
  EXPECT_EQ(n.usage.prompt_tokens(), base.usage.prompt_tokens());

  // A tool turn renders (<tool_call> and <tool_response>): a longer prompt.
  v1::ChatRequest turn = with;
  turn.clear_tool_choice_json();
  v1::ChatMessage* a = turn.add_messages();
  a->set_role("assistant");
  v1::ToolCall* call = a->add_tool_calls();
  call->set_id("call_0");
  call->set_name("get_weather");
  call->set_arguments(R"({"city": "Oslo"})");
  v1::ChatMessage* t = turn.add_messages();
  t->set_role("tool");
  t->set_tool_call_id("call_0");
  t->set_content(R"({"temp": -3})");
  Streamed tw = Chat(s, turn);
  ASSERT_TRUE(tw.status.ok()) << tw.status.error_message();
  EXPECT_GT(tw.usage.prompt_tokens(), w.usage.prompt_tokens() + 10);

  for (const auto& [tools_json, choice, want] :
       std::vector<std::tuple<std::string, std::string, std::string>>{
           {"[{\"type\":\"function\",\"function\":{}}]", "", "tools[0].function.name"},
           {"{", "", "tools_json is not valid JSON"},
           {tools, "sometimes", "tool_choice must be"},
           {tools, R"({"type":"function","function":{"name":"nope"}})", "tool_choice names"}}) {
    v1::ChatRequest bad = plain;
    bad.set_tools_json(tools_json);
    bad.set_tool_choice_json(choice);
    Streamed b = Chat(s, bad);
    EXPECT_EQ(b.status.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << want;
    EXPECT_THAT(b.status.error_message(), HasSubstr(want));
  }

  // HTTP: the same checks, streamed and not, and a 400 naming the field.
  const Json ask = Json::parse(R"([{"role":"user","content":"Weather in Oslo?"}])");
  Json body = {{"messages", ask}, {"max_tokens", 2}, {"temperature", 0},
               {"tools", Json::parse(tools)}};
  auto r = s.Http().Post("/v1/chat/completions", body.dump(), "application/json");
  ASSERT_TRUE(r);
  ASSERT_EQ(r->status, 200) << r->body;
  const Json whole = Json::parse(r->body);
  EXPECT_EQ(whole["usage"]["prompt_tokens"], w.usage.prompt_tokens());
  EXPECT_EQ(whole["choices"][0]["message"]["role"], "assistant");
  body["stream"] = true;
  r = s.Http().Post("/v1/chat/completions", body.dump(), "application/json");
  ASSERT_TRUE(r);
  ASSERT_EQ(r->status, 200) << r->body;
  EXPECT_THAT(r->body, HasSubstr("data: [DONE]"));
  body["stream"] = false;
  body["tool_choice"] = "required";
  body["tools"] = Json::array();
  r = s.Http().Post("/v1/chat/completions", body.dump(), "application/json");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 400) << r->body;
  EXPECT_EQ(Json::parse(r->body)["error"]["param"], "tool_choice") << r->body;
}

// A template of no known tool-call family (plain ChatML): tool_choice
// "required" or a named function cannot be forced or read back, so it is a
// 400 on tool_choice (gRPC INVALID_ARGUMENT), never a 200 in plain text;
// "auto" still answers.
TEST(ToolsTest, RequiredOnATemplateWithoutToolFormatIsRefused) {
  const std::string tmpl = absl::StrCat(::testing::TempDir(), "/chatml_", getpid(), ".jinja");
  std::ofstream(tmpl) << "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n"
                         "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}";
  Server s(1, 2, {"--chat-template-file", tmpl});
  const Json tools = Json::parse(R"([{"type":"function","function":{"name":"get_weather",
    "parameters":{"type":"object","properties":{"city":{"type":"string"}}}}}])");
  Json body = {{"messages", Json::parse(R"([{"role":"user","content":"Weather in Oslo?"}])")},
               {"max_tokens", 2}, {"tools", tools}};
  for (const Json& choice : {Json("required"), Json::parse(R"({"type":"function","function":{"name":"get_weather"}})")}) {
    body["tool_choice"] = choice;
    for (bool stream : {false, true}) {
      body["stream"] = stream;
      auto r = s.Http().Post("/v1/chat/completions", body.dump(), "application/json");
      ASSERT_TRUE(r);
      EXPECT_EQ(r->status, 400) << r->body;
      EXPECT_EQ(Json::parse(r->body)["error"]["param"], "tool_choice") << r->body;
      EXPECT_THAT(r->body, HasSubstr("tool-call format is known")) << r->body;
    }
  }
  body["tool_choice"] = "auto";
  body["stream"] = false;
  auto r = s.Http().Post("/v1/chat/completions", body.dump(), "application/json");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200) << r->body;
  v1::ChatRequest req = ChatFor("user", "Weather in Oslo?");
  req.set_max_tokens(2);
  req.set_tools_json(tools.dump());
  req.set_tool_choice_json("required");
  Streamed g = Chat(s, req);
  EXPECT_EQ(g.status.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << g.status.error_message();
  EXPECT_THAT(g.status.error_message(), HasSubstr("tool-call format is known"));
  std::remove(tmpl.c_str());
}

TEST(ApiQueueTest, FullQueueIsResourceExhaustedAnd429WithRetryAfter) {
  Server s(/*parallel=*/1, /*max_queue=*/0);
  grpc::ClientContext ctx;
  auto reader = s.stub->Generate(&ctx, Greedy("Keep going:", 0));
  v1::GenerateResponse r;
  ASSERT_TRUE(reader->Read(&r));  // the only slot is taken
  Streamed busy = Generate(s, Greedy("me too", 2));
  EXPECT_EQ(busy.status.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_THAT(busy.status.error_message(), HasSubstr("--parallel 1"));
  auto h = s.Http().Post("/v1/completions", R"({"prompt":"me too","max_tokens":2})",
                         "application/json");
  ASSERT_TRUE(h);
  EXPECT_EQ(h->status, 429);
  EXPECT_TRUE(h->has_header("Retry-After"));
  EXPECT_THAT(h->body, HasSubstr("server busy"));
  ctx.TryCancel();
  while (reader->Read(&r)) {
  }
  reader->Finish();
  EXPECT_TRUE(s.WaitIdle());
  Streamed after = Generate(s, Greedy("me too", 2));
  EXPECT_TRUE(after.status.ok()) << after.status.error_message();
  auto m = s.Http().Get("/metrics");
  ASSERT_TRUE(m);
  EXPECT_THAT(m->body, HasSubstr("outcome=\"resource_exhausted\""));
  for (const char* name :
       {"moesplit_queue_depth", "moesplit_queue_capacity", "moesplit_max_sequences",
        "moesplit_time_to_first_token_seconds", "moesplit_inter_token_latency_seconds",
        "moesplit_request_duration_seconds", "moesplit_prompt_tokens_total",
        "moesplit_generated_tokens_total", "moesplit_kv_cache_capacity_bytes"}) {
    EXPECT_THAT(m->body, HasSubstr(name));
  }
}

}  // namespace
}  // namespace moesplit
