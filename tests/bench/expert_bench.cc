// Routed-expert throughput on Qwen3-30B-A3B- or gpt-oss-20b-shaped layers (a
// benchmark; its numbers are printed, never asserted).
//
//   expert_bench [--shape qwen3|gpt-oss] [--threads N] [--seconds S] [--layers L]
//                [--prefill-tokens T] [--scalar-prefill] [--no-previous] [--no-decode]
//                [--level NAME]
//
// Builds L layers (default 4) in memory with quant::FillRandomBlocks. qwen3
// (the default): 128 experts, top-8, n_embd 2048, n_ff 768, gate/up Q4_K,
// down Q6_K on even layers and Q4_K on odd ones (as Q4_K_M). gpt-oss: 32
// experts, top-4, n_embd 2880, n_ff 2880, all three MXFP4 (as the published
// files), with biases and the clamped SwiGLU. Measures, in one run and with
// the same thread count:
//   - the machine's DRAM read bandwidth: a streaming read of a 1 GiB buffer;
//   - decode: one token routed to top-k random experts per layer, all layers in
//     turn; tokens/s of the expert part and the weight bytes it streams per
//     second, also as a fraction of the DRAM bandwidth;
//   - prefill: T (512) tokens, each routed to top-k random experts, all layers;
//   - the roofline of the packed row's decode: the same experts' bytes read
//     with the DRAM measurement's loop and nothing computed ("read only");
// for every kernel level the CPU has (quant::SetActiveKernelLevel), and for
// the previous one-MatMul-per-expert algorithm at the best level.

#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <vector>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

#include "common/base/memory_bandwidth.h"
#include "common/base/scratch_buffer.h"
#include "common/base/thread_pool.h"
#include "common/gguf/types.h"
#include "common/model/arch.h"
#include "common/model/expert.h"
#include "common/model/internal/ops.h"
#include "common/quant/matmul.h"
#include "common/quant/packed.h"
#include "common/quant/quant.h"
#include "common/quant/random_blocks.h"

namespace moesplit {
namespace {

using Clock = std::chrono::steady_clock;
using model::ExpertCall;
using model::ExpertResult;
using model::ExpertStore;

// The layers' shape.
struct Shape {
  const char* name;
  int64_t d, ff, experts, top_k;
  GgmlType gate_up, down_even, down_odd;  // down's type on even and odd layers
  model::ExpertFfnSpec ffn;
  bool biases;
};
const Shape kQwen3 = {"qwen3", 2048, 768, 128, 8, GgmlType::kQ4_K, GgmlType::kQ6_K, GgmlType::kQ4_K, {}, false};
const Shape kGptOss = {"gpt-oss", 2880, 2880, 32, 4, GgmlType::kMXFP4, GgmlType::kMXFP4, GgmlType::kMXFP4,
                       {model::ExpertActivation::kSwiGluOai, 1.702f, 7.0f}, true};

double Seconds(Clock::time_point a, Clock::time_point b) { return std::chrono::duration<double>(b - a).count(); }

struct Options {
  Shape shape = kQwen3;
  int threads = 2;
  double seconds = 2.0;
  int layers = 4;
  int prefill_tokens = 512;
  bool scalar_prefill = false;
  bool previous = true;
  bool decode = true;
  std::string level;  // only this level ("scalar", "avx2", "avx512", "amx"); empty: all
};

Options Parse(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto next = [&]() { return i + 1 < argc ? argv[++i] : ""; };
    if (a == "--shape") {
      const std::string v = next();
      if (v != kQwen3.name && v != kGptOss.name) {
        std::fprintf(stderr, "--shape: '%s' is not qwen3 or gpt-oss\n", v.c_str());
        std::exit(2);
      }
      o.shape = v == kQwen3.name ? kQwen3 : kGptOss;
    } else if (a == "--threads") o.threads = std::atoi(next());
    else if (a == "--seconds") o.seconds = std::atof(next());
    else if (a == "--layers") o.layers = std::atoi(next());
    else if (a == "--prefill-tokens") o.prefill_tokens = std::atoi(next());
    else if (a == "--scalar-prefill") o.scalar_prefill = true;
    else if (a == "--no-previous") o.previous = false;
    else if (a == "--no-decode") o.decode = false;
    else if (a == "--level") o.level = next();
    else {
      std::fprintf(stderr, "unknown flag %s\n", a.c_str());
      std::exit(2);
    }
  }
  return o;
}

// ---- weights ----------------------------------------------------------------

struct Layers {
  Shape shape;
  std::vector<std::shared_ptr<uint8_t[]>> buffers;  // huge pages, as the worker's arena
  std::vector<std::unique_ptr<ExpertStore>> stores;  // one per layer (layer index 0 in each)
  std::vector<uint64_t> expert_bytes;                // gate + up + down of one expert, per layer
  std::vector<GgmlType> down_types;
};

model::ExpertTensorView MakeTensor(Layers* L, GgmlType type, int64_t n_in, int64_t n_out, uint64_t seed) {
  const int64_t n_expert = L->shape.experts;
  const uint64_t row = *RowBytes(type, n_in);
  const uint64_t bytes = row * n_out * n_expert;
  L->buffers.push_back(AllocateHugePageBytes(bytes));
  const absl::Status s = quant::FillRandomBlocks(type, seed, 0.02f, L->buffers.back().get(), n_in * n_out * n_expert);
  if (!s.ok()) {
    std::fprintf(stderr, "FillRandomBlocks: %s\n", std::string(s.message()).c_str());
    std::exit(1);
  }
  return {type, L->buffers.back().get(), n_in, n_out, n_expert, row, row * n_out};
}

std::vector<float> RandomBiases(int64_t n, uint64_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 0.02f);
  std::vector<float> b(n);
  for (float& v : b) v = normal(rng);
  return b;
}

std::unique_ptr<ExpertStore> MakeStore(const Shape& sh, model::LayerExperts le) {
  return std::make_unique<ExpertStore>(std::vector<model::LayerExperts>{std::move(le)}, 1,
                                       static_cast<int>(sh.experts), 0, 0, sh.d, sh.ff, nullptr, sh.ffn);
}

Layers MakeLayers(const Shape& sh, int n_layers) {
  Layers L;
  L.shape = sh;
  for (int l = 0; l < n_layers; ++l) {
    const GgmlType down = l % 2 == 0 ? sh.down_even : sh.down_odd;
    model::LayerExperts le;
    le.gate = MakeTensor(&L, sh.gate_up, sh.d, sh.ff, 10 * l + 1);
    le.up = MakeTensor(&L, sh.gate_up, sh.d, sh.ff, 10 * l + 2);
    le.down = MakeTensor(&L, down, sh.ff, sh.d, 10 * l + 3);
    if (sh.biases) {
      le.gate_b = RandomBiases(sh.ff * sh.experts, 10 * l + 4);
      le.up_b = RandomBiases(sh.ff * sh.experts, 10 * l + 5);
      le.down_b = RandomBiases(sh.d * sh.experts, 10 * l + 6);
    }
    L.expert_bytes.push_back(le.gate.expert_bytes + le.up.expert_bytes + le.down.expert_bytes);
    L.down_types.push_back(down);
    L.stores.push_back(MakeStore(sh, std::move(le)));
  }
  return L;
}

// The same layers copied into the packed layout (quant/packed.h) where it
// exists; expert_bytes stays the GGUF bytes, so GB/s compare like for like.
Layers PackLayers(const Layers& src) {
  Layers L;
  L.shape = src.shape;
  const int64_t n_expert = src.shape.experts;
  L.expert_bytes = src.expert_bytes;
  L.down_types = src.down_types;
  for (const auto& store : src.stores) {
    const model::LayerExperts& orig = store->Layer(0);
    model::LayerExperts le{{}, {}, {}, orig.gate_b, orig.up_b, orig.down_b};
    model::ExpertTensorView* out[3] = {&le.gate, &le.up, &le.down};
    const model::ExpertTensorView* from[3] = {&orig.gate, &orig.up, &orig.down};
    for (int k = 0; k < 3; ++k) {
      const uint64_t bytes = model::CopiedExpertBytes(*from[k], 0, n_expert, true);
      L.buffers.push_back(AllocateHugePageBytes(bytes + 64));
      uint8_t* dst = reinterpret_cast<uint8_t*>((reinterpret_cast<uintptr_t>(L.buffers.back().get()) + 63) & ~uintptr_t{63});
      *out[k] = model::CopyExperts(*from[k], 0, n_expert, true, dst);
    }
    L.stores.push_back(MakeStore(L.shape, std::move(le)));
  }
  return L;
}

ExpertCall RandomCall(const Shape& sh, int n_tokens, std::mt19937* rng) {
  ExpertCall c;
  c.n_tokens = n_tokens;
  c.d = static_cast<int32_t>(sh.d);
  c.hidden.resize(n_tokens * sh.d);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  for (float& v : c.hidden) v = normal(*rng);
  c.token_offsets.push_back(0);
  std::vector<int32_t> ids(sh.experts);
  for (int t = 0; t < n_tokens; ++t) {
    for (int e = 0; e < sh.experts; ++e) ids[e] = e;
    for (int j = 0; j < sh.top_k; ++j) {
      std::swap(ids[j], ids[j + (*rng)() % (sh.experts - j)]);
      c.expert_ids.push_back(ids[j]);
      c.weights.push_back(1.0f / sh.top_k);
    }
    c.token_offsets.push_back(static_cast<uint32_t>(c.expert_ids.size()));
  }
  return c;
}

// ---- the previous algorithm: one MatMul per expert and matrix ----------------

class PreviousExperts final : public model::ExpertBackend {
 public:
  PreviousExperts(const ExpertStore& store, ThreadPool* pool) : store_(store), pool_(pool) {}
  absl::Status ComputeInto(const model::ExpertCallView& call, float* partial,
                           uint64_t* worker_ns) override {
    const int64_t d = call.d, ff = store_.n_ff();
    std::vector<std::vector<int32_t>> by_expert(store_.n_expert());
    for (size_t k = 0; k < call.expert_ids.size(); ++k) by_expert[call.expert_ids[k]].push_back(static_cast<int32_t>(k));
    std::vector<float> out(call.expert_ids.size() * d);
    for (int32_t e = 0; e < static_cast<int32_t>(by_expert.size()); ++e) {
      const auto& entries = by_expert[e];
      if (entries.empty()) continue;
      const int64_t n = static_cast<int64_t>(entries.size());
      std::vector<float> x(n * d), gate(n * ff), up(n * ff), y(n * d);
      for (int64_t r = 0; r < n; ++r) {
        const auto it = std::upper_bound(call.token_offsets.begin(), call.token_offsets.end(),
                                         static_cast<uint32_t>(entries[r]));
        std::copy_n(call.hidden.data() + ((it - call.token_offsets.begin()) - 1) * d, d, x.data() + r * d);
      }
      (void)quant::MatMul(store_.Gate(call.layer, e), x.data(), n, gate.data(), pool_);
      (void)quant::MatMul(store_.Up(call.layer, e), x.data(), n, up.data(), pool_);
      model::internal::SwiGlu(gate.data(), up.data(), n, ff, gate.data());
      (void)quant::MatMul(store_.Down(call.layer, e), gate.data(), n, y.data(), pool_);
      for (int64_t r = 0; r < n; ++r) std::copy_n(y.data() + r * d, d, out.data() + entries[r] * d);
    }
    std::fill(partial, partial + call.n_tokens * d, 0.0f);
    for (int32_t t = 0; t < call.n_tokens; ++t) {
      float* dst = partial + t * d;
      for (uint32_t k = call.token_offsets[t]; k < call.token_offsets[t + 1]; ++k) {
        for (int64_t i = 0; i < d; ++i) dst[i] += out[k * d + i] * call.weights[k];
      }
    }
    return absl::OkStatus();
  }

 private:
  const ExpertStore& store_;
  ThreadPool* pool_;
};

// ---- the access-pattern roofline: the same bytes read, nothing computed -------

// The experts' bytes of each call read and nothing computed
// (model::ReadExpertWeights): the highest rate any kernel could stream them
// at on this machine. The result is zeros.
class ReadOnlyExperts final : public model::ExpertBackend {
 public:
  ReadOnlyExperts(const ExpertStore& store, ThreadPool* pool) : store_(store), pool_(pool) {}
  absl::Status ComputeInto(const model::ExpertCallView& call, float* partial,
                           uint64_t* worker_ns) override {
    std::vector<int32_t> ids;
    for (int32_t e : call.expert_ids) ids.push_back(e - store_.expert_begin());
    model::ReadExpertWeights(store_.Layer(call.layer), ids, pool_);
    std::fill(partial, partial + static_cast<size_t>(call.n_tokens) * call.d, 0.0f);
    return absl::OkStatus();
  }

 private:
  const ExpertStore& store_;
  ThreadPool* pool_;
};

// ---- measurements ---------------------------------------------------------------

struct Row {
  std::string impl, level;
  double decode_tps = 0, decode_gbs = 0, prefill_tps = -1;
  double dram_gbs = 0;    // mean of the DRAM reads measured before each decode chunk
  double ratio = 0, ratio_min = 0, ratio_max = 0;  // decode GB/s / DRAM GB/s per chunk
  double decode_cpu = 0;  // CPU time / (wall time x threads) during decode
  bool decoded = false;   // false under --no-decode: the decode columns say so
};

// User + system CPU seconds of the whole process.
double ProcessCpuSeconds() {
  rusage u;
  getrusage(RUSAGE_SELF, &u);
  return u.ru_utime.tv_sec + u.ru_stime.tv_sec + 1e-6 * (u.ru_utime.tv_usec + u.ru_stime.tv_usec);
}

template <typename MakeBackend>
Row Measure(const Options& o, const Layers& L, ThreadPool* pool, DramReader* dram_reader, MakeBackend make,
            bool prefill) {
  Row row;
  std::vector<std::unique_ptr<model::ExpertBackend>> backends;
  for (int l = 0; l < o.layers; ++l) backends.push_back(make(*L.stores[l], pool));
  std::mt19937 rng(1);
  // Decode: pre-generated calls, one per layer per token.
  std::vector<ExpertCall> calls;
  for (int i = 0; i < 64; ++i) calls.push_back(RandomCall(L.shape, 1, &rng));
  ExpertResult res;
  for (int l = 0; l < o.layers; ++l) (void)backends[l]->Compute(calls[0], &res);  // warm-up
  // The machine's memory bandwidth drifts (shared host): decode runs in
  // chunks, each right after a DRAM read measurement, and the fraction is
  // taken per chunk.
  constexpr int kChunks = 6;
  int64_t tokens = 0;
  double bytes = 0, elapsed = 0, cpu = 0, ratio_sum = 0, dram_sum = 0;
  row.ratio_min = 1e9;
  row.ratio_max = 0;
  for (int c = 0; o.decode && c < kChunks; ++c) {
    const double dram = dram_reader->MeasureGbps(2);
    const double cpu0 = ProcessCpuSeconds();
    const auto t0 = Clock::now();
    double chunk_bytes = 0, dt = 0;
    do {
      for (int l = 0; l < o.layers; ++l) {
        (void)backends[l]->Compute(calls[(tokens * o.layers + l) % calls.size()], &res);
        chunk_bytes += static_cast<double>(L.expert_bytes[l]) * L.shape.top_k;
      }
      ++tokens;
      dt = Seconds(t0, Clock::now());
    } while (dt < o.seconds / kChunks);
    cpu += ProcessCpuSeconds() - cpu0;
    elapsed += dt;
    bytes += chunk_bytes;
    const double ratio = chunk_bytes / dt / 1e9 / dram;
    ratio_sum += ratio;
    dram_sum += dram;
    row.ratio_min = std::min(row.ratio_min, ratio);
    row.ratio_max = std::max(row.ratio_max, ratio);
  }
  row.decoded = o.decode;
  row.decode_tps = elapsed > 0 ? tokens / elapsed : 0;
  row.decode_gbs = elapsed > 0 ? bytes / elapsed / 1e9 : 0;
  row.decode_cpu = elapsed > 0 ? cpu / (elapsed * pool->size()) : 0;
  row.dram_gbs = dram_sum / kChunks;  // 0 under --no-decode (no chunks ran)
  row.ratio = ratio_sum / kChunks;
  if (prefill) {
    const ExpertCall call = RandomCall(L.shape, o.prefill_tokens, &rng);
    (void)backends[0]->Compute(call, &res);  // warm-up (sizes scratch)
    int rounds = 0;
    const auto p0 = Clock::now();
    double pe = 0;
    do {
      for (int l = 0; l < o.layers; ++l) (void)backends[l]->Compute(call, &res);
      ++rounds;
      pe = Seconds(p0, Clock::now());
    } while (pe < o.seconds && rounds < 20);
    row.prefill_tps = static_cast<double>(o.prefill_tokens) * rounds / pe;
  }
  return row;
}

const char* LevelName(quant::KernelLevel l) {
  switch (l) {
    case quant::KernelLevel::kScalar: return "scalar";
    case quant::KernelLevel::kAvx2: return "avx2";
    case quant::KernelLevel::kAvx512: return "avx512";
    case quant::KernelLevel::kAmx: return "amx";
  }
  return "?";
}

void Print(const Row& r) {
  if (r.decoded) {
    std::printf("%-22s %-7s %12.1f %11.2f %9.2f %6.1f%% (%2.0f-%2.0f) %5.0f%%", r.impl.c_str(), r.level.c_str(),
                r.decode_tps, r.decode_gbs, r.dram_gbs, 100 * r.ratio, 100 * r.ratio_min, 100 * r.ratio_max,
                100 * r.decode_cpu);
  } else {
    std::printf("%-22s %-7s %12s %11s %9s %17s %6s", r.impl.c_str(), r.level.c_str(), "skipped", "-", "-", "-", "-");
  }
  if (r.prefill_tps >= 0) {
    std::printf(" %16.1f\n", r.prefill_tps);
  } else {
    std::printf(" %16s\n", "skipped");
  }
  std::fflush(stdout);
}

int Main(int argc, char** argv) {
  const Options o = Parse(argc, argv);
  ThreadPool pool(o.threads);
  const Shape& sh = o.shape;
  std::printf("expert_bench: %s shape, %d layers x %lld experts, n_embd %lld, n_ff %lld, top-%lld; gate/up %s, "
              "down %s (even layers) / %s (odd); %s; threads %d\n",
              sh.name, o.layers, (long long)sh.experts, (long long)sh.d, (long long)sh.ff, (long long)sh.top_k,
              std::string(GgmlTypeName(sh.gate_up)).c_str(), std::string(GgmlTypeName(sh.down_even)).c_str(),
              std::string(GgmlTypeName(sh.down_odd)).c_str(),
              sh.biases ? (model::ExpertFfnName(sh.ffn) + " with biases").c_str() : model::ExpertFfnName(sh.ffn).c_str(),
              o.threads);
  const auto tb = Clock::now();
  const Layers L = MakeLayers(sh, o.layers);
  double total = 0;
  for (int l = 0; l < o.layers; ++l) total += static_cast<double>(L.expert_bytes[l]) * sh.experts;
  std::printf("weights: %.2f GB in memory (built in %.1f s); one decode token streams %.1f MB\n", total / 1e9,
              Seconds(tb, Clock::now()), [&] {
                double b = 0;
                for (int l = 0; l < o.layers; ++l) b += static_cast<double>(L.expert_bytes[l]) * sh.top_k;
                return b / 1e6;
              }());
  // One buffer for every measurement: a fresh 1 GiB each time cost more
  // time in page clearing than the decode it is compared with.
  DramReader dram_reader(&pool);
  const double dram = dram_reader.MeasureGbps(5);
  std::printf("DRAM read bandwidth (%d threads, 1 GiB streaming read): %.2f GB/s\n\n", o.threads, dram);
  std::printf("(decode runs in 6 chunks, each right after a DRAM read with the same threads: DRAM GB/s is\n"
              " their mean, 'of DRAM' the mean (min-max) of the per-chunk ratios; cpu: process CPU time /\n"
              " (wall time x threads) during decode, below 100%% when other processes share the cores)\n");
  std::printf("%-22s %-7s %12s %11s %9s %17s %6s %16s\n", "implementation", "level", "decode tok/s", "expert GB/s",
              "DRAM GB/s", "of DRAM", "cpu", "prefill tok/s");
  const quant::KernelLevel best = quant::ActiveKernelLevel();
  auto fused = [](const ExpertStore& s, ThreadPool* p) -> std::unique_ptr<model::ExpertBackend> {
    return std::make_unique<model::InProcessExperts>(s, p);
  };
  auto previous = [](const ExpertStore& s, ThreadPool* p) -> std::unique_ptr<model::ExpertBackend> {
    return std::make_unique<PreviousExperts>(s, p);
  };
  for (quant::KernelLevel level : {quant::KernelLevel::kScalar, quant::KernelLevel::kAvx2,
                                   quant::KernelLevel::kAvx512, quant::KernelLevel::kAmx}) {
    if (level > best) break;
    if (!o.level.empty() && o.level != LevelName(level)) continue;
    quant::SetActiveKernelLevel(level);
    const bool prefill = level != quant::KernelLevel::kScalar || o.scalar_prefill;
    Row r = Measure(o, L, &pool, &dram_reader, fused, prefill);
    r.impl = "fused InProcessExperts";
    r.level = LevelName(level);
    Print(r);
  }
  quant::SetActiveKernelLevel(best);
  if (quant::PackedPreferred(sh.gate_up) && (o.level.empty() || o.level == "packed")) {
    const Layers P = PackLayers(L);
    Row r = Measure(o, P, &pool, &dram_reader, fused, true);
    r.impl = sh.gate_up == GgmlType::kMXFP4 ? "fused, packed MXFP4" : "fused, packed Q4_K/Q6_K";
    r.level = LevelName(best);
    Print(r);
    // The roofline of that row: its experts' bytes read without computing.
    auto read_only = [](const ExpertStore& s, ThreadPool* p) -> std::unique_ptr<model::ExpertBackend> {
      return std::make_unique<ReadOnlyExperts>(s, p);
    };
    Row ro = Measure(o, P, &pool, &dram_reader, read_only, false);
    ro.impl = "read only, same bytes";
    ro.level = "-";
    Print(ro);
  }
  // The previous algorithm knows only the plain SwiGLU without biases.
  if (o.previous && !sh.biases && sh.ffn.activation == model::ExpertActivation::kSwiGlu) {
    Row r = Measure(o, L, &pool, &dram_reader, previous, true);
    r.impl = "previous (MatMul/exp.)";
    r.level = LevelName(best);
    Print(r);
  }
  return 0;
}

}  // namespace
}  // namespace moesplit

int main(int argc, char** argv) { return moesplit::Main(argc, argv); }
