// moesplit generate: streams a continuation of --prompt to stdout; prompt
// and generation speed go to stderr.
#include <chrono>

#include "absl/strings/str_cat.h"
#include "common/base/status.h"
#include "services/cli/commands.h"
#include "services/cli/engine.h"
#include "services/cli/generation.h"
#include "services/cli/model_cache.h"
#include "common/sampling/sampler.h"

namespace moesplit::cli {
namespace {

double Since(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t)
      .count();
}

void PrintSpeed(int64_t n_prompt, double t_prompt, int64_t n_gen,
                double t_gen, const char* why_stopped, std::FILE* log) {
  std::fprintf(log,
               "prompt: %lld tokens in %.3f s (%.1f tok/s)\n"
               "generation: %lld tokens in %.3f s (%.1f tok/s)%s\n",
               static_cast<long long>(n_prompt), t_prompt,
               t_prompt > 0 ? n_prompt / t_prompt : 0.0,
               static_cast<long long>(n_gen), t_gen,
               t_gen > 0 ? n_gen / t_gen : 0.0, why_stopped);
}

struct GenerateOptions {
  int64_t n_predict = 32;
  bool special = true;
  // llama.cpp's defaults, and a fixed seed so that runs are reproducible.
  SamplingParams sampling{.temperature = 0.8f,
                          .top_k = 40,
                          .top_p = 0.95f,
                          .min_p = 0.05f,
                          .seed = 42,
                          .has_seed = true};
};

// Prompt evaluation, then sample / stream / evaluate until n_predict tokens
// or an end-of-generation token.
absl::Status Generate(const Engine& engine, const std::string& prompt,
                      const GenerateOptions& o, const CommandIo& io) {
  ASSIGN_OR_RETURN(Sampler sampler,
                   Sampler::Create(o.sampling,
                                   static_cast<int>(engine.n_vocab())));
  ASSIGN_OR_RETURN(std::vector<int32_t> tokens,
                   engine.tokenizer().Encode(prompt, o.special));
  if (tokens.empty()) return absl::InvalidArgumentError("empty prompt");
  RETURN_IF_ERROR(engine.CheckTokens(tokens));
  RETURN_IF_ERROR(sampler.Accept(tokens));  // penalties see the prompt
  const auto& hp = engine.model().hparams();
  const int64_t n_prompt = static_cast<int64_t>(tokens.size());
  if (n_prompt > hp.n_ctx_train) {
    return absl::OutOfRangeError(absl::StrCat(
        "prompt of ", n_prompt, " tokens exceeds the context length ",
        hp.n_ctx_train));
  }
  const int64_t n_gen_max = std::min(o.n_predict, hp.n_ctx_train - n_prompt);
  ASSIGN_OR_RETURN(std::unique_ptr<model::SequenceState> cache,
                   model::SequenceState::Create(hp, n_prompt + n_gen_max));
  std::vector<float> logits;
  auto start = std::chrono::steady_clock::now();
  RETURN_IF_ERROR(engine.forward().Eval(tokens, cache.get(),
                                        model::LogitsMode::kLast, &logits));
  const double t_prompt = Since(start);

  start = std::chrono::steady_clock::now();
  auto eval = [&](int32_t token, std::vector<float>* out) {
    const int32_t one[1] = {token};
    return engine.forward().Eval(one, cache.get(), model::LogitsMode::kLast,
                                 out);
  };
  auto emit = [&](absl::string_view text) {
    std::fwrite(text.data(), 1, text.size(), io.out);
    std::fflush(io.out);
  };
  ASSIGN_OR_RETURN(GenerationResult r,
                   GenerateTokens(engine.tokenizer(), sampler, std::move(logits),
                                  n_gen_max, eval, emit));
  const double t_gen = Since(start);
  std::fputc('\n', io.out);
  std::fflush(io.out);
  const int64_t n_gen = static_cast<int64_t>(r.tokens.size());
  const bool eog = r.stopped_at_end;
  PrintSpeed(n_prompt, t_prompt, n_gen, t_gen,
             eog ? ", stopped at an end-of-generation token"
                 : (n_gen_max < o.n_predict ? ", stopped at the context length"
                                            : ""),
             io.err);
  return absl::OkStatus();
}

}  // namespace

absl::Status RunGenerate(const Args& args, const CommandIo& io) {
  std::string model_path, prompt;
  GenerateOptions o;
  SamplingParams& sp = o.sampling;
  int64_t threads = 0, seed = static_cast<int64_t>(sp.seed), top_k = sp.top_k;
  double temp = sp.temperature, top_p = sp.top_p, min_p = sp.min_p,
         repeat = sp.repetition_penalty;
  FlagParser f;
  f.AddString("model|m", &model_path, "GGUF model")
      .Meta("PATH")
      .DefaultText("a cached random-weight test model");
  f.AddString("prompt|p", &prompt, "prompt text (required)").Meta("TEXT");
  f.AddInt("n|n-predict", &o.n_predict, "tokens to generate");
  f.AddDouble("temp", &temp, "temperature in [0, 2], 0 = argmax");
  f.AddInt("top-k", &top_k, "top-k, 0 = off");
  f.AddDouble("top-p", &top_p, "top-p, 1 = off");
  f.AddDouble("min-p", &min_p, "min-p, 0 = off");
  f.AddDouble("repeat-penalty", &repeat, "repetition penalty over the last 64 tokens, 1 = off");
  f.AddInt("seed|s", &seed, "sampling seed");
  f.AddInt("threads|t", &threads, "threads; 0: every CPU the process may use").Range(0, 1024);
  ExpertsFlag experts;
  AddExpertsFlags(f, &experts);
  f.AddBool("special", &o.special, "parse special tokens in the prompt");
  ASSIGN_OR_RETURN(bool go, ParseFlags(f, args,
                                       "generate [--model M] --prompt S [-n N] "
                                       "[--temp T] [--seed S] [--threads T]",
                                       io));
  if (!go) return absl::OkStatus();
  if (!f.positional().empty()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "generate: unexpected argument '", f.positional()[0], "'"));
  }
  if (prompt.empty()) {
    return absl::InvalidArgumentError("empty prompt (give --prompt TEXT)");
  }
  if (o.n_predict < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("-n must be >= 0, got ", o.n_predict));
  }
  if (top_k < 0 || top_k > INT32_MAX) {
    return absl::InvalidArgumentError(
        absl::StrCat("top_k must be >= 0, got ", top_k));
  }
  sp.temperature = static_cast<float>(temp);
  sp.top_k = static_cast<int32_t>(top_k);
  sp.top_p = static_cast<float>(top_p);
  sp.min_p = static_cast<float>(min_p);
  sp.repetition_penalty = static_cast<float>(repeat);
  sp.seed = static_cast<uint64_t>(seed);
  RETURN_IF_ERROR(Validate(sp, /*n_vocab=*/1));  // before loading anything
  const int n_threads = ThreadCount(threads);
  if (model_path.empty()) {
    ASSIGN_OR_RETURN(model_path, EnsureDefaultTestModel(n_threads, io.err));
  }
  ASSIGN_OR_RETURN(std::unique_ptr<Engine> engine,
                   Engine::Open(model_path, n_threads, experts));
  return Generate(*engine, prompt, o, io);
}

}  // namespace moesplit::cli
