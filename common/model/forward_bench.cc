// Benchmark: prompt and generation speed of the CPU reference forward pass
// on a synthetic random-weight model (written once, then reused).
//
//   model_bench [layers=2] [embd=2048] [heads=32] [kv_heads=4] [head_dim=128]
//               [experts=128] [used=8] [ff=768] [vocab=151936] [type=Q4_K]
//               [threads=0] [prompt=32] [tokens=16] [batched=1] [prompt_runs=1]
//               [path=/tmp/...gguf]
//
// Not a test (timing belongs in benchmarks); prints tokens/s.
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <map>
#include <string>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "common/model/forward.h"
#include "common/model/testing/tiny_model.h"

namespace moesplit::model {
namespace {

using Clock = std::chrono::steady_clock;

double Seconds(Clock::time_point since) {
  return std::chrono::duration<double>(Clock::now() - since).count();
}

// FNV-1a of the bytes of v.
uint64_t Fnv1a(const std::vector<float>& v) {
  uint64_t h = 14695981039346656037ull;
  const auto* p = reinterpret_cast<const unsigned char*>(v.data());
  for (size_t i = 0; i < v.size() * sizeof(float); ++i) h = (h ^ p[i]) * 1099511628211ull;
  return h;
}

// Prompt and generation speed of the model at `path`.
int Measure(const std::string& path, int64_t n_vocab, const std::string& type_name, int threads,
            int64_t n_prompt, int64_t n_gen, bool batched, int64_t prompt_runs) {
  auto model = Model::Open(path);
  if (!model.ok()) {
    std::fprintf(stderr, "%s\n", std::string(model.status().message()).c_str());
    return 1;
  }
  ThreadPool pool(threads);
  InProcessExperts experts(LocalExpertStore(*model, &pool), &pool);
  Forward forward(*model, &experts, &pool);
  auto cache = SequenceState::Create((*model)->hparams(), n_prompt + n_gen + 1);
  if (!cache.ok()) return 1;
  std::vector<int32_t> prompt(n_prompt);
  for (int64_t i = 0; i < n_prompt; ++i) prompt[i] = static_cast<int32_t>((i * 7919) % n_vocab);
  std::vector<float> logits;
  auto t0 = Clock::now();
  absl::Status st = forward.Eval(prompt, cache->get(), LogitsMode::kLast, &logits);
  const double prompt_s = Seconds(t0);
  if (!st.ok()) {
    std::fprintf(stderr, "%s\n", std::string(st.message()).c_str());
    return 1;
  }
  const uint64_t prompt_hash = Fnv1a(logits);
  // Repeated prompts (the cache cleared each time): the first run above
  // also pays for first-touch page faults of the weights and the buffers.
  for (int64_t r = 1; r < prompt_runs; ++r) {
    (*cache)->Clear();
    t0 = Clock::now();
    st = forward.Eval(prompt, cache->get(), LogitsMode::kLast, &logits);
    const double s = Seconds(t0);
    if (!st.ok()) return 1;
    std::printf("  prompt run %lld: %.2f tok/s%s\n", static_cast<long long>(r + 1), n_prompt / s,
                Fnv1a(logits) == prompt_hash ? "" : " (logits differ from run 1!)");
  }
  t0 = Clock::now();
  for (int64_t i = 0; i < n_gen; ++i) {
    const int32_t tok[1] = {static_cast<int32_t>((i * 31) % n_vocab)};
    st = forward.Eval(tok, cache->get(), LogitsMode::kLast, &logits);
    if (!st.ok()) return 1;
  }
  const double gen_s = Seconds(t0);
  std::printf("%s, %d threads: prompt %lld tokens %.2f tok/s; generation %lld tokens %.2f tok/s\n",
              type_name.c_str(), pool.size(), static_cast<long long>(n_prompt), n_prompt / prompt_s,
              static_cast<long long>(n_gen), n_gen / gen_s);
  // Bits of the prompt's and the last step's logits (a kernel change that
  // keeps the arithmetic must not change them).
  std::printf("  logits fnv1a: prompt %016llx, last %016llx\n",
              static_cast<unsigned long long>(prompt_hash),
              static_cast<unsigned long long>(Fnv1a(logits)));
  // Batched decode (continuous batching): B sequences, one token each per
  // EvalBatch step, after a short prompt each.
  if (!batched) return 0;
  for (int b : {1, 4, 16}) {
    std::vector<std::unique_ptr<SequenceState>> caches;
    std::vector<std::vector<float>> out(b);
    std::vector<int32_t> toks(b);
    for (int s = 0; s < b; ++s) {
      caches.push_back(std::move(*SequenceState::Create((*model)->hparams(), n_gen + 9)));
      const int32_t p[8] = {1, 2, 3, 4, 5, 6, 7, static_cast<int32_t>(s % n_vocab)};
      if (!forward.Eval(p, caches.back().get(), LogitsMode::kNone, nullptr).ok()) return 1;
    }
    t0 = Clock::now();
    for (int64_t i = 0; i < n_gen; ++i) {
      std::vector<SequenceBatch> batch;
      for (int s = 0; s < b; ++s) {
        toks[s] = static_cast<int32_t>((i * 31 + s * 7) % n_vocab);
        batch.push_back({caches[s].get(), absl::MakeConstSpan(&toks[s], 1), LogitsMode::kLast,
                         &out[s]});
      }
      if (!forward.EvalBatch(batch).ok()) return 1;
    }
    const double s = Seconds(t0);
    std::printf("  batched decode, %2d sequences: %.2f tok/s total, %.1f ms per step\n", b,
                b * n_gen / s, 1e3 * s / n_gen);
  }
  return 0;
}

int Run(std::map<std::string, std::string> args) {
  auto num = [&](const char* key, int64_t def) {
    int64_t v = def;
    if (args.count(key) && !absl::SimpleAtoi(args[key], &v)) {
      std::fprintf(stderr, "bad %s\n", key);
      std::exit(2);
    }
    return v;
  };
  testing::TinyModelOptions o;
  o.n_layer = num("layers", 2);
  o.n_embd = num("embd", 2048);
  o.n_head = num("heads", 32);
  o.n_head_kv = num("kv_heads", 4);
  o.head_dim = num("head_dim", 128);
  o.n_expert = num("experts", 128);
  o.n_expert_used = num("used", 8);
  o.n_ff_exp = num("ff", 768);
  o.n_vocab = num("vocab", 151936);
  o.n_ctx_train = 4096;
  const std::string type_name = args.count("type") ? args["type"] : "Q4_K";
  const auto type = GgmlTypeFromName(type_name);
  if (!type) {
    std::fprintf(stderr, "unknown type %s\n", type_name.c_str());
    return 2;
  }
  o.matrix_type = *type;
  const std::string path =
      args.count("path") ? args["path"]
                         : absl::StrCat("/tmp/moesplit_bench_", o.n_layer, "l_", o.n_embd, "d_",
                                        o.n_expert, "e_", o.n_vocab, "v_", type_name, ".gguf");
  if (!std::filesystem::exists(path)) {
    const auto t0 = Clock::now();
    const absl::Status st = testing::WriteTinyModel(o, path);
    if (!st.ok()) {
      std::fprintf(stderr, "%s\n", std::string(st.message()).c_str());
      return 1;
    }
    std::printf("wrote %s in %.1f s\n", path.c_str(), Seconds(t0));
  }
  return Measure(path, o.n_vocab, type_name, static_cast<int>(num("threads", 0)),
                 num("prompt", 32), num("tokens", 16), num("batched", 1) != 0,
                 num("prompt_runs", 1));
}

}  // namespace
}  // namespace moesplit::model

int main(int argc, char** argv) {
  std::map<std::string, std::string> args;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    const size_t eq = a.find('=');
    if (eq == std::string::npos) {
      std::fprintf(stderr, "arguments are key=value\n");
      return 2;
    }
    args[a.substr(0, eq)] = a.substr(eq + 1);
  }
  return moesplit::model::Run(std::move(args));
}
