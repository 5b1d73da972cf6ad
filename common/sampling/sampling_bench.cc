// Sampler cost per token over a Qwen3-sized vocabulary (151,936 logits) for
// several parameter mixes, next to a full std::sort of the vocabulary as the
// thing top_k/top_p avoid; then the cost of constrained decoding per step on
// the real Qwen2 vocabulary (fixtures/vocab): the token mask (cached and
// cold), the masked draw and the matcher's advance, while random logits
// generate whole JSON documents under a schema. Prints thread-CPU times;
// asserts nothing.
//
//   sampling_bench [iterations]
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "common/gguf/gguf.h"
#include "common/sampling/json_schema.h"
#include "common/sampling/sampler.h"
#include "common/sampling/token_constraint.h"
#include "common/tokenizer/tokenizer.h"

namespace moesplit {
namespace {

constexpr int kVocab = 151936;
constexpr int kRows = 8;

uint64_t SplitMix(uint64_t& x) {
  uint64_t z = (x += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

float Uniform(uint64_t& x, float lo, float hi) {
  return lo + (hi - lo) * static_cast<float>((SplitMix(x) >> 40) * 0x1.0p-24);
}

// peaked: noise in [-6, 6) plus 10 tokens at [12, 20) (an LM-like row);
// flat: noise only (top_p then needs a large part of the vocabulary).
std::vector<std::vector<float>> MakeRows(bool peaked) {
  std::vector<std::vector<float>> rows(kRows, std::vector<float>(kVocab));
  uint64_t x = peaked ? 1 : 2;
  for (auto& row : rows) {
    for (float& v : row) v = Uniform(x, -6, 6);
    if (!peaked) continue;
    for (int k = 0; k < 10; ++k) {
      row[SplitMix(x) % kVocab] = Uniform(x, 12, 20);
    }
  }
  return rows;
}

// This thread's CPU time in ns (not wall time: the build machine is shared
// and oversubscribed, and descheduled time is not the sampler's cost).
double ThreadCpuNs() {
  timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return ts.tv_sec * 1e9 + ts.tv_nsec;
}

// Best of 5 rounds of `iters` steps.
double NsPerToken(int iters, const std::function<void(int)>& step) {
  step(0);  // warm up buffers
  double best = 0;
  for (int round = 0; round < 5; ++round) {
    const double t0 = ThreadCpuNs();
    for (int i = 0; i < iters; ++i) step(i);
    const double ns = (ThreadCpuNs() - t0) / iters;
    if (round == 0 || ns < best) best = ns;
  }
  return best;
}

void BenchSampler(const char* name, const SamplingParams& params,
                  const std::vector<std::vector<float>>& rows, int iters) {
  absl::StatusOr<Sampler> s = Sampler::Create(params, kVocab);
  if (!s.ok()) {
    std::fprintf(stderr, "%s: %s\n", name, s.status().ToString().c_str());
    std::exit(1);
  }
  SampledToken out;
  size_t kept = 0;
  const double ns = NsPerToken(iters, [&](int i) {
    if (!s->Sample(rows[i % kRows], &out).ok()) std::exit(1);
    kept += s->last_candidates().size();
  });
  std::printf("%-44s %10.0f ns/token  (avg %zu candidates kept)\n", name, ns,
              kept / (5 * iters + 1));
}

void BenchFullSort(const std::vector<std::vector<float>>& rows, int iters) {
  std::vector<Sampler::Candidate> c(kVocab);
  const double ns = NsPerToken(iters, [&](int i) {
    const auto& row = rows[i % kRows];
    for (int j = 0; j < kVocab; ++j) c[j] = {j, row[j]};
    std::sort(c.begin(), c.end(), sampling_internal::Precedes);
  });
  std::printf("%-44s %10.0f ns/token\n", "baseline: copy + full std::sort", ns);
}

void Run(int iters) {
  const auto peaked = MakeRows(true);
  const auto flat = MakeRows(false);
  SamplingParams base;
  base.seed = 1;
  base.has_seed = true;
  base.temperature = 0.8f;

  SamplingParams greedy = base;
  greedy.temperature = 0;
  SamplingParams plain = base;
  SamplingParams top_k = base;
  top_k.top_k = 40;
  SamplingParams top_p = base;
  top_p.top_p = 0.95f;
  SamplingParams min_p = base;
  min_p.min_p = 0.05f;
  SamplingParams llama = base;  // llama.cpp defaults + repetition penalty
  llama.top_k = 40;
  llama.top_p = 0.95f;
  llama.min_p = 0.05f;
  llama.repetition_penalty = 1.1f;
  llama.penalty_last_n = 64;
  SamplingParams llama_lp = llama;
  llama_lp.logprobs = 5;
  SamplingParams qwen = base;  // Qwen3 recommended: T .6, top_p .95, k 20
  qwen.temperature = 0.6f;
  qwen.top_k = 20;
  qwen.top_p = 0.95f;
  qwen.presence_penalty = 1.5f;

  std::printf("vocab %d, best of 5 rounds of %d tokens per line\n", kVocab,
              iters);
  BenchSampler("greedy (T=0)", greedy, peaked, iters);
  BenchSampler("T=0.8, no filters", plain, peaked, iters);
  BenchSampler("T=0.8, top_k=40", top_k, peaked, iters);
  BenchSampler("T=0.8, top_p=0.95 (peaked logits)", top_p, peaked, iters);
  BenchSampler("T=0.8, top_p=0.95 (flat logits)", top_p, flat, iters);
  BenchSampler("T=0.8, min_p=0.05", min_p, peaked, iters);
  BenchSampler("k=40 p=.95 min_p=.05 rep=1.1 last_n=64", llama, peaked, iters);
  BenchSampler("  same + logprobs=5", llama_lp, peaked, iters);
  BenchSampler("qwen3: T=.6 k=20 p=.95 presence=1.5", qwen, peaked, iters);
  BenchFullSort(peaked, std::max(1, iters / 10));
}

// Generates JSON under `spec` from random peaked logits (T = 1) for `steps`
// tokens (a new document when one ends) and prints the per-step costs.
void BenchConstraint(const char* name, const ConstraintSpec& spec,
                     const std::shared_ptr<const VocabIndex>& vocab, int steps) {
  auto g = CompileConstraint(spec);
  if (!g.ok()) {
    std::fprintf(stderr, "%s: %s\n", name, g.status().ToString().c_str());
    std::exit(1);
  }
  const int n_vocab = vocab->n_vocab();
  std::vector<std::vector<float>> rows(kRows, std::vector<float>(n_vocab));
  uint64_t x = 3;
  for (auto& row : rows) {
    for (float& v : row) v = Uniform(x, -6, 6);
  }
  SamplingParams p;
  p.seed = 1;
  p.has_seed = true;
  auto sampler = Sampler::Create(p, n_vocab);
  auto plain = Sampler::Create(p, n_vocab);
  std::optional<TokenConstraint> c;
  c.emplace(*g, vocab);
  double mask_ns = 0, draw_ns = 0, accept_ns = 0, plain_ns = 0, worst_mask = 0;
  int docs = 0, tokens_in_docs = 0;
  SampledToken out;
  for (int i = 0; i < steps; ++i) {
    double t0 = ThreadCpuNs();
    absl::Span<const uint64_t> allowed = c->AllowedTokens();
    double t1 = ThreadCpuNs();
    if (!sampler->Sample(rows[i % kRows], allowed, &out).ok()) std::exit(1);
    double t2 = ThreadCpuNs();
    if (!c->Accept(out.token).ok()) std::exit(1);
    double t3 = ThreadCpuNs();
    if (!plain->Sample(rows[i % kRows], &out).ok()) std::exit(1);
    double t4 = ThreadCpuNs();
    mask_ns += t1 - t0;
    worst_mask = std::max(worst_mask, t1 - t0);
    draw_ns += t2 - t1;
    accept_ns += t3 - t2;
    plain_ns += t4 - t3;
    ++tokens_in_docs;
    if (c->finished()) {
      ++docs;
      c.emplace(*g, vocab);
    }
  }
  std::printf("%-28s mask %7.1f us (worst %7.1f)  masked draw %6.1f us  advance %5.2f us"
              "  | unconstrained draw %6.1f us  (%d steps, %d documents)\n",
              name, mask_ns / steps / 1e3, worst_mask / 1e3, draw_ns / steps / 1e3,
              accept_ns / steps / 1e3, plain_ns / steps / 1e3, steps, docs);
}

void RunConstraint(int steps) {
  const char* env = std::getenv("MOESPLIT_FIXTURES_DIR");
  const std::string path = std::string(env != nullptr ? env : MOESPLIT_FIXTURES_DIR) +
                           "/vocab/ggml-vocab-qwen2.gguf";
  auto gguf = GgufFile::Open(path);
  if (!gguf.ok()) {
    std::printf("constrained decoding: skipped (%s)\n", gguf.status().ToString().c_str());
    return;
  }
  auto tok = Tokenizer::FromGguf(**gguf);
  if (!tok.ok()) std::exit(1);
  const double t0 = ThreadCpuNs();
  auto vocab = VocabIndex::FromTokenizer(**tok);
  if (!vocab.ok()) std::exit(1);
  std::printf("\nconstrained decoding, Qwen2 vocabulary (%d tokens, trie of %zu nodes built in "
              "%.1f ms), per step:\n",
              (*vocab)->n_vocab(), (*vocab)->trie_nodes(), (ThreadCpuNs() - t0) / 1e6);
  ConstraintSpec schema;
  schema.kind = ConstraintSpec::Kind::kJsonSchema;
  schema.schema = nlohmann::ordered_json::parse(R"({"type":"object","properties":{
      "name":{"type":"string","maxLength":40},"age":{"type":"integer"},
      "tags":{"type":"array","items":{"type":"string","maxLength":12},"maxItems":4},
      "address":{"type":"object","properties":{"city":{"type":"string"},
        "zip":{"type":"string","maxLength":10}},"required":["city","zip"]},
      "kind":{"enum":["person","company"]}},
      "required":["name","age","tags","address","kind"]})");
  BenchConstraint("json_schema (5 properties)", schema, *vocab, steps);
  BenchConstraint("json_object", ConstraintSpec{}, *vocab, steps);
}

}  // namespace
}  // namespace moesplit

int main(int argc, char** argv) {
  const int iters = argc > 1 ? std::atoi(argv[1]) : 100;
  moesplit::Run(iters);
  moesplit::RunConstraint(std::max(iters * 10, 200));
  return 0;
}
