// The scheduler in-process: continuous batching with chunked prefill gives
// every greedy request the tokens plain one-sequence decoding gives, however
// small the per-step token budget; cancellation and completion free the KV;
// the bounded queue refuses with RESOURCE_EXHAUSTED; a JSON constraint ends
// the request with "stop" once the document is complete.
#include "services/dense/dense_engine.h"

#include <unistd.h>

#include <atomic>
#include <condition_variable>
#include <cstdio>
#include <mutex>
#include <cstdlib>
#include <map>
#include <thread>
#include <tuple>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "common/sampling/json_schema.h"
#include "gtest/gtest.h"
#include "common/model/sequence_state.h"
#include "services/cli/test_model.h"
#include "services/dense/request_limits.h"

namespace moesplit::dense {
namespace {

using ::testing::HasSubstr;

// The test models written by this process, removed when it exits (a map
// that is never destroyed, so the engines of static lifetime may still read
// them; the files go in an atexit handler).
std::map<std::string, std::string>& TestModels() {
  static auto* models = new std::map<std::string, std::string>;
  return *models;
}

void RemoveTestModels() {
  for (const auto& [arch, path] : TestModels()) std::remove(path.c_str());
}

// A small test model of `arch` (qwen35moe: 3 gated DeltaNet layers and a
// gated attention layer), written once per process.
const std::string& ModelPath(const std::string& arch = "qwen3moe") {
  auto& models = TestModels();
  auto it = models.find(arch);
  if (it != models.end()) return it->second;
  if (models.empty()) std::atexit(RemoveTestModels);
  const std::string p =
      absl::StrCat(::testing::TempDir(), "/dense_engine_test_", getpid(), "_", arch, ".gguf");
  cli::TestModelSpec spec;
  spec.arch = arch;
  spec.n_layer = arch == "qwen35moe" || arch == "nemotron_h_moe" ? 4 : 2;
  spec.layer_kinds = "ME*E";  // nemotron_h_moe: Mamba-2, MoE, attention, MoE
  spec.ssm_state = 16;
  spec.ssm_n_k_heads = 2;
  spec.ssm_n_v_heads = 4;
  spec.ssm_head = 32;
  spec.threads = 2;
  EXPECT_TRUE(cli::WriteTestModel(spec, p).ok());
  return models[arch] = p;
}

std::unique_ptr<DenseEngine> Engine(int max_sequences, int max_queue, int step_tokens,
                                    const std::string& arch = "qwen3moe") {
  EngineOptions o;
  o.model_path = ModelPath(arch);
  o.threads = 2;
  o.n_ctx = 128;
  o.max_sequences = max_sequences;
  o.max_queue = max_queue;
  o.step_tokens = step_tokens;
#ifdef MOESPLIT_CUDA_EMULATED
  // On the emulated GPU: no expert cache and no streamed prefill, whose
  // choices of CPU or GPU kernels for an expert depend on history and on
  // the batch (equal within rounding, not bit for bit).
  o.backend = "cuda";
  o.expert_cache_slots = 0;
  o.prefill_stream_min_tokens = 0;
#endif
  auto e = DenseEngine::Create(o);
  EXPECT_TRUE(e.ok()) << e.status();
  return e.ok() ? std::move(*e) : nullptr;
}

GenerateParams Greedy(std::vector<int32_t> prompt, int n) {
  GenerateParams p;
  p.prompt = std::move(prompt);
  p.max_tokens = n;
  p.sampling.temperature = 0;
  return p;
}

std::vector<std::vector<int32_t>> Prompts() {
  std::vector<std::vector<int32_t>> out;
  for (int i = 0; i < 6; ++i) {
    std::vector<int32_t> p;
    for (int k = 0; k < 3 + 7 * i; ++k) p.push_back((i * 131 + k * 17) % 1000 + 3);
    out.push_back(std::move(p));
  }
  return out;
}

std::vector<int32_t> Tokens(DenseEngine& e, const GenerateParams& p, GenerateOutcome* o = nullptr);

// Plain greedy decoding of each prompt alone with Forward::Eval (on the
// emulated GPU: each prompt alone through a one-sequence engine).
std::vector<std::vector<int32_t>> Reference(const std::vector<std::vector<int32_t>>& prompts,
                                            int n, const std::string& arch) {
#ifdef MOESPLIT_CUDA_EMULATED
  auto alone = Engine(/*max_sequences=*/1, /*max_queue=*/1, /*step_tokens=*/512, arch);
  EXPECT_NE(alone, nullptr);
  std::vector<std::vector<int32_t>> got;
  for (const auto& p : prompts) got.push_back(Tokens(*alone, Greedy(p, n)));
  return got;
#endif
  auto m = model::Model::Open(ModelPath(arch));
  EXPECT_TRUE(m.ok());
  ThreadPool pool(2);
  model::InProcessExperts experts(model::ExpertStore(*m), &pool);
  model::Forward f(*m, &experts, &pool);
  std::vector<std::vector<int32_t>> out;
  for (const auto& p : prompts) {
    auto cache = model::SequenceState::Create((*m)->hparams(), 128);
    auto g = model::GreedyGenerate(f, cache->get(), p, n);
    EXPECT_TRUE(g.ok()) << g.status();
    out.push_back(*g);
  }
  return out;
}

std::vector<int32_t> Tokens(DenseEngine& e, const GenerateParams& p, GenerateOutcome* o) {
  std::vector<int32_t> out;
  auto r = e.Generate(p, [&](const GenerateDelta& d) {
    out.push_back(d.token);
    return true;
  });
  EXPECT_TRUE(r.ok()) << r.status();
  if (o != nullptr && r.ok()) *o = *r;
  return out;
}

class SchedulerTest : public ::testing::TestWithParam<std::tuple<std::string, int>> {};

TEST_P(SchedulerTest, ConcurrentGreedyEqualsDecodingAlone) {
  const auto& [arch, step_tokens] = GetParam();
  const auto prompts = Prompts();
  const auto want = Reference(prompts, 8, arch);
  auto e = Engine(/*max_sequences=*/4, /*max_queue=*/8, step_tokens, arch);
  ASSERT_NE(e, nullptr);
#ifdef MOESPLIT_CUDA_EMULATED
  ASSERT_EQ(e->backend_name().rfind("cuda:", 0), 0u) << e->backend_name();
#endif
  std::vector<std::vector<int32_t>> got(prompts.size());
  std::vector<std::thread> ts;
  for (size_t i = 0; i < prompts.size(); ++i) {
    ts.emplace_back([&, i] { got[i] = Tokens(*e, Greedy(prompts[i], 8)); });
  }
  for (auto& t : ts) t.join();
  for (size_t i = 0; i < prompts.size(); ++i) {
    // EOG may end a sequence early; the reference is cut the same way.
    std::vector<int32_t> w = want[i];
    for (size_t k = 0; k < w.size(); ++k) {
      if (e->tokenizer().IsEndOfGeneration(w[k])) {
        w.resize(k + 1);
        break;
      }
    }
    EXPECT_EQ(got[i], w) << arch << " prompt " << i << ", step_tokens " << step_tokens;
  }
  EXPECT_EQ(e->running(), 0);
  EXPECT_EQ(e->queued(), 0);
}

// 1: every prompt token its own step next to the decodes; 5: chunks that
// cut prompts anywhere; 512: whole prompts. qwen35moe: recurrent state.
// nemotron_h_moe: Mamba-2 state (CPU only: no CUDA kernels yet).
#ifdef MOESPLIT_CUDA_EMULATED
#define MOESPLIT_ENGINE_ARCHS ::testing::Values("qwen3moe", "qwen35moe")
#else
#define MOESPLIT_ENGINE_ARCHS ::testing::Values("qwen3moe", "qwen35moe", "nemotron_h_moe")
#endif
INSTANTIATE_TEST_SUITE_P(StepTokens, SchedulerTest,
                         ::testing::Combine(MOESPLIT_ENGINE_ARCHS, ::testing::Values(1, 5, 512)),
                         [](const auto& info) {
                           return absl::StrCat(std::get<0>(info.param), "_",
                                               std::get<1>(info.param));
                         });

TEST(DenseEngineTest, RejectsBadRequestsBeforeQueueing) {
  auto e = Engine(1, 0, 64);
  ASSERT_NE(e, nullptr);
  EXPECT_THAT(std::string(e->Submit(Greedy({}, 4)).status().message()), HasSubstr("empty"));
  const absl::Status over = e->Submit(Greedy(std::vector<int32_t>(200, 5), 4)).status();
  EXPECT_THAT(std::string(over.message()),
              HasSubstr("the prompt has 200 tokens, the context holds 128"));
  // The numbers the HTTP API reports as n_prompt_tokens / n_ctx.
  size_t n_prompt_tokens = 0;
  int n_ctx = 0;
  ASSERT_TRUE(ContextOverflowOf(over, &n_prompt_tokens, &n_ctx));
  EXPECT_EQ(n_prompt_tokens, 200u);
  EXPECT_EQ(n_ctx, 128);
  EXPECT_FALSE(ContextOverflowOf(absl::InvalidArgumentError("the prompt has 200 tokens"),
                                 &n_prompt_tokens, &n_ctx));
  EXPECT_THAT(std::string(e->Submit(Greedy({1, 2}, -1)).status().message()),
              HasSubstr("max_tokens -1 < 0"));
  GenerateParams bad = Greedy({1, 2}, 4);
  bad.sampling.top_p = 2;
  EXPECT_EQ(e->Submit(bad).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(e->Submit(Greedy({1, 5000}, 4)).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(e->running() + e->queued(), 0);
}

// The push path: the consumer is woken (on the engine thread) at most once
// per Take, gets every delta in order, then the end; the wake-up callback
// is released once the end was signalled; a Subscribe after the end wakes
// at once.
TEST(DenseEngineTest, PushedDeltasCoalesceArriveInOrderAndTheCallbackIsReleased) {
  auto e = Engine(2, 4, 64);
  ASSERT_NE(e, nullptr);
  const GenerateParams p = Greedy({1, 2, 3}, 12);
  const std::vector<int32_t> want = Tokens(*e, p);
  auto h = e->Submit(p);
  ASSERT_TRUE(h.ok()) << h.status();
  std::mutex mu;
  std::condition_variable cv;
  int wakes = 0, outstanding = 0;
  bool overlapped = false;  // a wake-up while one was outstanding
  auto token = std::make_shared<int>(0);  // held by the callback
  (*h)->Subscribe([&, token] {
    std::lock_guard<std::mutex> l(mu);
    if (outstanding > 0) overlapped = true;
    ++outstanding;
    ++wakes;
    cv.notify_all();
  });
  std::vector<int32_t> got;
  absl::StatusOr<GenerateOutcome> result = GenerateOutcome{};
  for (bool done = false; !done;) {
    {
      std::unique_lock<std::mutex> l(mu);
      cv.wait(l, [&] { return outstanding > 0; });
      outstanding = 0;
    }
    // Slow consumer: the engine goes on, the deltas wait in the handle.
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
    std::vector<GenerateDelta> ds;
    done = (*h)->Take(&ds, &result);
    for (const GenerateDelta& d : ds) got.push_back(d.token);
  }
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_EQ(result->finish_reason, "length");
  EXPECT_EQ(got, want);
  EXPECT_FALSE(overlapped);
  EXPECT_LE(wakes, static_cast<int>(want.size()) + 1);
  // The handle drops its callback at the end (just after it unlocks).
  for (int i = 0; i < 5000 && token.use_count() > 1; ++i) std::this_thread::yield();
  EXPECT_EQ(token.use_count(), 1);
  // Nothing is left, and a late consumer is woken at once with the end.
  int late = 0;
  (*h)->Subscribe([&] { ++late; });
  EXPECT_EQ(late, 1);
  std::vector<GenerateDelta> rest;
  EXPECT_TRUE((*h)->Take(&rest, &result));
  EXPECT_TRUE(rest.empty());
}

// Cancel from another thread ends a blocking Wait ("cancelled") and frees
// the sequence; shutting the engine down ends queued requests UNAVAILABLE
// through the same path.
TEST(DenseEngineTest, CancelWakesWaitAndShutdownEndsQueuedRequests) {
  auto e = Engine(1, 2, 64);
  ASSERT_NE(e, nullptr);
  auto running = e->Submit(Greedy({1, 2, 3}, 0));
  ASSERT_TRUE(running.ok());
  std::atomic<int> seen{0};
  std::thread canceller([&] {
    while (seen.load() < 2) std::this_thread::yield();
    (*running)->Cancel();
  });
  auto r = (*running)->Wait([&](const GenerateDelta&) {
    ++seen;
    return true;
  });
  canceller.join();
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->finish_reason, "cancelled");
  EXPECT_EQ(e->running(), 0);
  EXPECT_EQ(e->metrics().kv_used_bytes.Value(), 0);

  auto busy = e->Submit(Greedy({4, 5}, 0));
  auto queued = e->Submit(Greedy({6, 7}, 3));
  ASSERT_TRUE(busy.ok());
  ASSERT_TRUE(queued.ok());
  std::atomic<bool> woke{false};
  (*queued)->Subscribe([&] { woke = true; });
  e.reset();  // stops the engine: both end UNAVAILABLE
  absl::StatusOr<GenerateOutcome> end = GenerateOutcome{};
  std::vector<GenerateDelta> ds;
  EXPECT_TRUE(woke.load());
  ASSERT_TRUE((*queued)->Take(&ds, &end));
  EXPECT_EQ(end.status().code(), absl::StatusCode::kUnavailable);
  ds.clear();
  ASSERT_TRUE((*busy)->Take(&ds, &end));
  EXPECT_EQ(end.status().code(), absl::StatusCode::kUnavailable);
}

class EngineArchTest : public ::testing::TestWithParam<std::string> {};

TEST_P(EngineArchTest, CancelFreesTheSlotAndQueueIsBounded) {
  auto e = Engine(/*max_sequences=*/1, /*max_queue=*/1, 64, GetParam());
  ASSERT_NE(e, nullptr);
  auto first = e->Submit(Greedy({1, 2, 3}, 0));
  ASSERT_TRUE(first.ok());
  auto second = e->Submit(Greedy({4, 5, 6}, 3));
  ASSERT_TRUE(second.ok());
  auto third = e->Submit(Greedy({7, 8}, 3));
  EXPECT_EQ(third.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(std::string(third.status().message()), HasSubstr("--max-queue 1"));
  int seen = 0;
  auto r = (*first)->Wait([&](const GenerateDelta&) { return ++seen < 3; });
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->finish_reason, "cancelled");
  auto r2 = (*second)->Wait([](const GenerateDelta&) { return true; });
  ASSERT_TRUE(r2.ok()) << r2.status();
  EXPECT_EQ(r2->prompt_tokens, 3);
  EXPECT_LE(r2->completion_tokens, 3);
  EXPECT_EQ(e->running(), 0);
  EXPECT_EQ(e->metrics().kv_used_bytes.Value(), 0);
}

TEST(DenseEngineTest, JsonConstraintStopsAtTheEndOfTheDocumentAndLengthCutsIt) {
  auto e = Engine(2, 4, 64);
  ASSERT_NE(e, nullptr);
  auto run = [&](const char* schema, int max_tokens, float temperature, std::string* text) {
    ConstraintSpec spec;
    spec.kind = ConstraintSpec::Kind::kJsonSchema;
    spec.schema = nlohmann::ordered_json::parse(schema);
    auto g = CompileConstraint(spec);
    EXPECT_TRUE(g.ok()) << g.status();
    GenerateParams p = Greedy({1, 2, 3}, max_tokens);
    p.sampling.temperature = temperature;
    p.sampling.seed = 5;
    p.sampling.has_seed = true;
    p.constraint = *g;
    text->clear();
    auto o = e->Generate(p, [&](const GenerateDelta& d) {
      *text += d.text;
      return true;
    });
    EXPECT_TRUE(o.ok()) << o.status();
    return o.ok() ? *o : GenerateOutcome{};
  };
  std::string text;
  for (float t : {0.0f, 1.0f}) {
    GenerateOutcome o = run(R"({"enum":["alpha","beta"]})", 50, t, &text);
    EXPECT_EQ(o.finish_reason, "stop") << text;
    EXPECT_TRUE(text == "\"alpha\"" || text == "\"beta\"") << text;
    EXPECT_LE(o.completion_tokens, 7);  // no token after the closing quote
  }
  GenerateOutcome cut = run(R"({"type":"array","items":{"type":"integer"},"minItems":40})", 4,
                            1.0f, &text);
  EXPECT_EQ(cut.finish_reason, "length");
  EXPECT_EQ(cut.completion_tokens, 4);
  EXPECT_EQ(text.rfind("[", 0), 0u) << text;
  EXPECT_EQ(e->running(), 0);
}

// ignore_eos: where sampling ends a request with an end-of-generation token,
// the same request with ignore_eos never samples one and runs to max_tokens.
TEST(DenseEngineTest, IgnoreEosRunsToMaxTokensWhereEndOfGenerationStops) {
  auto e = Engine(1, 2, 64);
  ASSERT_NE(e, nullptr);
  constexpr int kMax = 100;
  GenerateParams p = Greedy({1, 2, 3}, kMax);
  p.sampling.temperature = 2.0f;  // the flattest allowed: the EOG tokens come up
  p.sampling.has_seed = true;
  // The first seed whose request ends on an end-of-generation token (the
  // seeds are fixed, so is the one found).
  int seed = -1;
  for (int s = 1; s <= 64 && seed < 0; ++s) {
    p.sampling.seed = s;
    GenerateOutcome o;
    const std::vector<int32_t> t = Tokens(*e, p, &o);
    if (o.finish_reason == "stop" && !t.empty() && e->tokenizer().IsEndOfGeneration(t.back())) {
      ASSERT_LT(o.completion_tokens, kMax);
      seed = s;
    }
  }
  ASSERT_GT(seed, 0) << "no seed in 1..64 ends on an end-of-generation token";
  p.sampling.seed = seed;
  p.ignore_eos = true;
  GenerateOutcome o;
  const std::vector<int32_t> t = Tokens(*e, p, &o);
  EXPECT_EQ(o.finish_reason, "length") << "seed " << seed;
  EXPECT_EQ(o.completion_tokens, kMax);
  ASSERT_EQ(t.size(), static_cast<size_t>(kMax));
  for (int32_t id : t) EXPECT_FALSE(e->tokenizer().IsEndOfGeneration(id)) << id;
  EXPECT_EQ(e->running(), 0);
}

// gpt-oss too: its test model's 128-token windows keep rings (SequenceState)
// at the prefix-cache tests' context.
INSTANTIATE_TEST_SUITE_P(Archs, EngineArchTest, ::testing::Values("qwen3moe", "qwen35moe", "gpt-oss"));

// ------------------------------------------------------------ prefix cache

// An engine over the same test model with the prefix cache on or off, the
// primary tier's budget `memory` (0 = automatic) and the host tier's `ram`.
std::unique_ptr<DenseEngine> CacheEngine(const std::string& arch, bool cache, int n_ctx,
                                         uint64_t memory = 0, uint64_t ram = 0,
                                         int max_sequences = 2, uint64_t device = 0) {
  EngineOptions o;
  o.model_path = ModelPath(arch);
  o.threads = 2;
  o.n_ctx = n_ctx;
  o.max_sequences = max_sequences;
  o.step_tokens = 512;
  o.prefix_cache = cache;
  o.cache_memory = memory;
  o.cache_ram = ram;
  o.cache_device = device;
#ifdef MOESPLIT_CUDA_EMULATED
  o.backend = "cuda";
  o.expert_cache_slots = 0;
  o.prefill_stream_min_tokens = 0;
#endif
  auto e = DenseEngine::Create(o);
  EXPECT_TRUE(e.ok()) << e.status();
  return e.ok() ? std::move(*e) : nullptr;
}

std::vector<int32_t> RandomTokens(int n, uint32_t seed) {
  std::vector<int32_t> out;
  uint32_t x = seed * 2654435761u + 1;
  for (int i = 0; i < n; ++i) {
    x = x * 1664525u + 1013904223u;
    out.push_back(static_cast<int32_t>(3 + (x >> 8) % 997));
  }
  return out;
}

struct Served {
  std::vector<int32_t> tokens;
  GenerateOutcome outcome;
  RequestTimings timings;
};

Served Serve(DenseEngine& e, const std::vector<int32_t>& prompt, int n) {
  Served out;
  auto h = e.Submit(Greedy(prompt, n));
  EXPECT_TRUE(h.ok()) << h.status();
  if (!h.ok()) return out;
  auto r = (*h)->Wait([&](const GenerateDelta& d) {
    out.tokens.push_back(d.token);
    return true;
  });
  EXPECT_TRUE(r.ok()) << r.status();
  if (r.ok()) out.outcome = *r;
  out.timings = (*h)->timings();
  return out;
}

std::vector<int32_t> Concat(std::vector<int32_t> a, const std::vector<int32_t>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

// The second turn of a conversation (the first prompt, its answer and a new
// message) reuses the first turn's state: cached_tokens says how much, the
// forward pass evaluates only the prompt tokens after them (the engine's
// count of prompt tokens evaluated), and the greedy tokens are those of an
// engine without the cache. (The times to the first token are printed; how
// much faster the next turn starts is a benchmark's question.)
TEST_P(EngineArchTest, AConversationsNextTurnReusesItsPrefix) {
  const std::string arch = GetParam();
  // Whole blocks (63 of 64 tokens: 4032), so that the next turn evaluates
  // only its new tokens.
#ifdef MOESPLIT_CUDA_EMULATED
  const int kPrompt = 576;  // the emulated kernels are slow; the path is the same
#else
  const int kPrompt = 4032;
#endif
  auto e = CacheEngine(arch, true, 4096);
  auto cold = CacheEngine(arch, false, 4096);
  ASSERT_NE(e, nullptr);
  ASSERT_NE(cold, nullptr);
  ASSERT_NE(e->prefix_cache(), nullptr);
  EXPECT_EQ(cold->prefix_cache(), nullptr);
  const auto first = RandomTokens(kPrompt, 1);
  auto evaluated = [&] { return static_cast<int64_t>(e->metrics().prompt_tokens.Value()); };
  const Served t1 = Serve(*e, first, 8);
  EXPECT_EQ(t1.outcome.cached_tokens, 0);
  EXPECT_EQ(evaluated(), kPrompt) << arch;
  const auto second = Concat(Concat(first, t1.tokens), RandomTokens(16, 2));
  const Served t2 = Serve(*e, second, 8);
  EXPECT_EQ(evaluated() - kPrompt, static_cast<int64_t>(second.size()) - t2.outcome.cached_tokens)
      << arch << ": the next turn evaluated more than its new tokens";
  const Served want = Serve(*cold, second, 8);
  EXPECT_EQ(t2.tokens, want.tokens) << arch;
  EXPECT_EQ(want.outcome.cached_tokens, 0);
  // Every whole block of the first prompt (a hybrid model resumes at the
  // last block boundary of the prompt, where its state was kept).
  const int block = e->prefix_cache()->block_tokens();
  EXPECT_EQ(t2.outcome.cached_tokens, kPrompt / block * block) << arch;
  EXPECT_EQ(e->metrics().prefix_cache_hits.Value(), 1);
  EXPECT_EQ(e->metrics().prefix_cache_misses.Value(), 1);
  EXPECT_EQ(e->metrics().prefix_cache_reused_tokens.Value(), t2.outcome.cached_tokens);
  EXPECT_GT(e->metrics().prefix_cache_primary_bytes.Value(), 0);
#ifndef MOESPLIT_CUDA_EMULATED
  if (arch == "gpt-oss") {  // its sliding-window layers kept rings, not 4096 positions
    auto m = model::Model::Open(ModelPath(arch));
    ASSERT_TRUE(m.ok());
    const model::HyperParams& hp = (*m)->hparams();
    EXPECT_EQ(e->metrics().kv_capacity_bytes.Value(), 2.0 * model::SequenceState::BytesFor(hp, 4096, 512));
    EXPECT_LT(model::SequenceState::BytesFor(hp, 4096, 512), model::SequenceState::BytesFor(hp, 4096, 4096));
  }
#endif
  std::printf("%s: first turn %d tokens, ttft %.3f s; next turn %zu tokens (%d cached), ttft "
              "%.3f s; without the cache %.3f s\n",
              arch.c_str(), kPrompt, t1.timings.ttft_s, second.size(), t2.outcome.cached_tokens,
              t2.timings.ttft_s, want.timings.ttft_s);
}

// A prefix-cache block's bytes without a recurrent state (prefix_cache.h).
uint64_t BlockBytes(const model::HyperParams& hp) {
  return model::SequenceState::KvBytesPerPosition(hp) * kDefaultBlockTokens +
         kDefaultBlockTokens * sizeof(int32_t);
}

// More distinct prefixes than the primary tier holds: evicted blocks go to
// the host tier and later hits take them from there; the tokens do not
// change.
TEST_P(EngineArchTest, EvictedPrefixesComeBackFromTheHostTier) {
  const std::string arch = GetParam();
  auto m = model::Model::Open(ModelPath(arch));
  ASSERT_TRUE(m.ok());
  const auto& hp = (*m)->hparams();
  const uint64_t block = BlockBytes(hp);
  // Room for two prefixes' blocks (3 each) and their states (a hybrid
  // model keeps one per prefix, at its last block boundary).
  const uint64_t primary = 6 * block + 2 * model::SequenceState::RecurrentBytes(hp);
  auto e = CacheEngine(arch, true, 512, primary, uint64_t{64} << 20);
  ASSERT_NE(e, nullptr);
  std::vector<std::vector<int32_t>> prompts;
  std::vector<std::vector<int32_t>> first;
  for (int i = 0; i < 5; ++i) {
    prompts.push_back(RandomTokens(200, 10 + i));
    const Served s = Serve(*e, prompts.back(), 6);
    EXPECT_EQ(s.outcome.cached_tokens, 0) << i;
    first.push_back(s.tokens);
  }
  EXPECT_GT(e->metrics().prefix_cache_demotions.Value(), 0);
  EXPECT_GT(e->metrics().prefix_cache_host_blocks.Value(), 0);
  EXPECT_LE(e->metrics().prefix_cache_primary_bytes.Value(), primary);
  for (int i = 0; i < 5; ++i) {
    const Served s = Serve(*e, prompts[i], 6);
    EXPECT_EQ(s.tokens, first[i]) << arch << " prompt " << i;
    EXPECT_EQ(s.outcome.cached_tokens, 192) << arch << " prompt " << i;
  }
  EXPECT_GT(e->metrics().prefix_cache_host_hits.Value(), 0);
  EXPECT_EQ(e->metrics().prefix_cache_hits.Value(), 5);
  // Without a host tier the same traffic drops blocks and recomputes.
  auto drop = CacheEngine(arch, true, 512, primary, 0);
  ASSERT_NE(drop, nullptr);
  for (int i = 0; i < 5; ++i) EXPECT_EQ(Serve(*drop, prompts[i], 6).tokens, first[i]);
  EXPECT_EQ(Serve(*drop, prompts[0], 6).outcome.cached_tokens, 0);
  EXPECT_GT(drop->metrics().prefix_cache_evictions.Value(), 0);
  EXPECT_EQ(drop->metrics().prefix_cache_host_bytes.Value(), 0);
}

// The GPU's device tier: blocks stay in device memory, spill to the host
// tiers past its budget and come back up on a hit; the tokens do not
// change. On the CPU a device tier is refused with --backend cpu and
// ignored (no budget, no device blocks) with auto.
TEST_P(EngineArchTest, TheDeviceTierHoldsPrefixesAndSpillsToTheHost) {
  const std::string arch = GetParam();
  auto m = model::Model::Open(ModelPath(arch));
  ASSERT_TRUE(m.ok());
  const auto& hp = (*m)->hparams();
  const uint64_t block = BlockBytes(hp);
  const uint64_t device = 4 * block + model::SequenceState::RecurrentBytes(hp);
  const uint64_t primary = 4 * block + 2 * model::SequenceState::RecurrentBytes(hp);
#ifdef MOESPLIT_CUDA_EMULATED
  auto e = CacheEngine(arch, true, 512, primary, uint64_t{64} << 20, 2, device);
  ASSERT_NE(e, nullptr);
  EXPECT_EQ(e->metrics().prefix_cache_device_capacity.Value(), device);
  std::vector<std::vector<int32_t>> prompts, first;
  for (int i = 0; i < 5; ++i) {
    prompts.push_back(RandomTokens(200, 40 + i));
    const Served s = Serve(*e, prompts.back(), 6);
    EXPECT_EQ(s.outcome.cached_tokens, 0) << i;
    first.push_back(s.tokens);
  }
  EXPECT_GT(e->metrics().prefix_cache_device_blocks.Value(), 0);
  EXPECT_LE(e->metrics().prefix_cache_device_bytes.Value(), device);
  EXPECT_GT(e->metrics().prefix_cache_device_demotions.Value(), 0);
  EXPECT_GT(e->metrics().prefix_cache_demotions.Value(), 0);  // on down to the host tier
  for (int i = 4; i >= 0; --i) {  // the most recent first: on the device still
    const Served s = Serve(*e, prompts[i], 6);
    EXPECT_EQ(s.tokens, first[i]) << arch << " prompt " << i;
    EXPECT_EQ(s.outcome.cached_tokens, 192) << arch << " prompt " << i;
  }
  EXPECT_GT(e->metrics().prefix_cache_device_hits.Value(), 0);
  EXPECT_GT(e->metrics().prefix_cache_uploads.Value(), 0);
  EXPECT_GT(e->metrics().prefix_cache_host_hits.Value(), 0);
  EXPECT_LE(e->metrics().prefix_cache_device_bytes.Value(), device);
  EXPECT_EQ(e->metrics().prefix_cache_hits.Value(), 5);
  // The same traffic without a device tier gives the same tokens.
  auto host_only = CacheEngine(arch, true, 512, primary, uint64_t{64} << 20);
  ASSERT_NE(host_only, nullptr);
  for (int i = 0; i < 5; ++i) EXPECT_EQ(Serve(*host_only, prompts[i], 6).tokens, first[i]) << i;
  EXPECT_EQ(host_only->metrics().prefix_cache_device_blocks.Value(), 0);
#else
  EngineOptions o;
  o.model_path = ModelPath(arch);
  o.threads = 2;
  o.n_ctx = 512;
  o.cache_device = device;
  o.backend = "cpu";
  auto refused = DenseEngine::Create(o);
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(refused.status().message().find("--backend cpu"), std::string::npos)
      << refused.status();
  if (QueryGpuMemory().total == 0) {  // no GPU: auto runs on the CPU
    auto e = CacheEngine(arch, true, 512, primary, 0, 2, device);
    ASSERT_NE(e, nullptr);
    EXPECT_EQ(e->metrics().prefix_cache_device_capacity.Value(), 0);
    const auto p = RandomTokens(200, 40);
    const Served a = Serve(*e, p, 6);
    const Served b = Serve(*e, p, 6);
    EXPECT_EQ(a.tokens, b.tokens);
    EXPECT_EQ(b.outcome.cached_tokens, 192);
    EXPECT_EQ(e->metrics().prefix_cache_device_blocks.Value(), 0);
  }
#endif
}

// Several sequences sharing a system prompt run at once: each imports the
// shared blocks while the others insert theirs, and gets the tokens it gets
// from an engine without the cache.
TEST_P(EngineArchTest, ConcurrentSequencesShareAPrefix) {
  const std::string arch = GetParam();
  auto e = CacheEngine(arch, true, 512, 0, 0, /*max_sequences=*/4);
  auto cold = CacheEngine(arch, false, 512);
  ASSERT_NE(e, nullptr);
  ASSERT_NE(cold, nullptr);
  const auto system = RandomTokens(150, 7);
  Serve(*e, system, 2);  // the shared part is cached
  std::vector<std::vector<int32_t>> prompts;
  for (int i = 0; i < 6; ++i) prompts.push_back(Concat(system, RandomTokens(20 + 9 * i, 30 + i)));
  std::vector<Served> got(prompts.size());
  std::vector<std::thread> ts;
  for (size_t i = 0; i < prompts.size(); ++i) {
    ts.emplace_back([&, i] { got[i] = Serve(*e, prompts[i], 6); });
  }
  for (auto& t : ts) t.join();
  for (size_t i = 0; i < prompts.size(); ++i) {
    EXPECT_EQ(got[i].tokens, Serve(*cold, prompts[i], 6).tokens) << arch << " prompt " << i;
    EXPECT_EQ(got[i].outcome.cached_tokens, 128) << arch << " prompt " << i;
  }
}

}  // namespace
}  // namespace moesplit::dense
