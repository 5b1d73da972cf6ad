// moesplit bench: prefill and decode speed of the whole system, the
// expert-worker alone, and the machine's DRAM read bandwidth, in one run so
// that their ratios are measured side by side.
//
//   moesplit bench [--model M] [--threads T] [--prompt 512] [--gen 128]
//                  [--depth D[,D...]] [--reps 3] [--experts shm|grpc|local|ADDRS]
//                  [--json]
//
// End to end: this process runs the dense part on the CPU (the reference
// backend) and the routed experts go to --experts (default: one worker
// started for the run, over shared memory), exactly as `moesplit generate`.
//   warm-up: one --prompt-token prefill and 8 decode steps (as llama-bench
//            warms up), reported as the first prefill after start;
//   prefill: the same prompt into an empty cache, --reps times (the mean);
//   decode:  for each depth D, D tokens are prefilled (untimed), then --gen
//            tokens are generated greedily, one forward step per token.
// The worker alone: every expert call the decode (and the prefill) sent is
// recorded and replayed to the same backend with nothing else running; the
// weight bytes those calls must read (the distinct experts of each call, all
// three matrices) over that time is the worker's effective weight bandwidth.
// The decode replay runs --reps rounds, each right after a streaming DRAM
// read over the same thread count (common/base, best of 3); the bandwidths
// reported are the means over the rounds. Remote workers also report their
// own time per call (ExpertResult::worker_ns): the same bytes over that time
// is the worker's bandwidth without the transport's hand-offs, printed
// beside it with the hand-off's cost per expert call (round trip - worker
// time, per layer and token); and each round ends with the same experts' bytes read with the
// DRAM loop and no compute (ReadOnlyReplaySeconds), the roofline of that
// access pattern.

#include <algorithm>
#include <chrono>
#include <cmath>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "absl/synchronization/mutex.h"
#include "common/base/memory_bandwidth.h"
#include "common/base/status.h"
#include "common/model/forward.h"
#include "common/model/internal/ops.h"
#include "nlohmann/json.hpp"
#include "services/cli/commands.h"
#include "services/cli/engine.h"
#include "services/cli/model_cache.h"

namespace moesplit::cli {
namespace {

using Clock = std::chrono::steady_clock;

double Since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

// Passes calls through to the real backend (Start and Finish too, so that
// the forward overlaps as it does without it); while recording, keeps a copy
// of each call and the time the caller spent inside the backend's calls
// (for Start/Finish: in the two, not the work done between them).
class RecordingExperts final : public model::ExpertBackend {
 public:
  explicit RecordingExperts(model::ExpertBackend* inner) : inner_(inner) {}

  absl::Status ComputeInto(const model::ExpertCallView& call, float* partial,
                           uint64_t* worker_ns) override {
    const auto t0 = Clock::now();
    absl::Status s = inner_->ComputeInto(call, partial, worker_ns);
    Note(call, Since(t0));
    return s;
  }
  absl::Status Start(const model::ExpertCallView& call, float* partial,
                     uint64_t* worker_ns) override {
    const auto t0 = Clock::now();
    absl::Status s = inner_->Start(call, partial, worker_ns);
    Note(call, Since(t0));
    return s;
  }
  absl::Status Finish() override {
    const auto t0 = Clock::now();
    absl::Status s = inner_->Finish();
    Note(std::nullopt, Since(t0));
    return s;
  }

  // From now on, sums the seconds spent in the calls and (keep_calls) keeps
  // a copy of each. A prefill's calls are whole hidden states (4 MB a layer
  // on the default model, 15 MB on DeepSeek-V3's): copying them into fresh
  // vectors took ~5% of the dense process's samples in a timed 512-token
  // prefill, so timed prefills only sum seconds and the calls to replay
  // come from one more, untimed, prefill. A decode call is one token's.
  void Start(bool keep_calls) {
    absl::MutexLock lock(&mu_);
    recording_ = keep_calls;
    calls_.clear();
    seconds_ = 0;
  }
  // The calls since Start() and the seconds spent in them.
  std::vector<model::ExpertCall> Stop(double* seconds) {
    absl::MutexLock lock(&mu_);
    recording_ = false;
    *seconds = seconds_;
    return std::move(calls_);
  }

 private:
  void Note(std::optional<model::ExpertCallView> call, double dt) {
    absl::MutexLock lock(&mu_);
    seconds_ += dt;
    if (recording_ && call) calls_.push_back(model::CopyCall(*call));
  }

  model::ExpertBackend* const inner_;
  absl::Mutex mu_;
  bool recording_ = false;
  double seconds_ = 0;
  std::vector<model::ExpertCall> calls_;
};

// Bytes of gate + up + down of one expert of each layer.
std::vector<uint64_t> ExpertBytesByLayer(const model::Model& m) {
  std::vector<uint64_t> out;
  for (int il = 0; il < m.n_layer(); ++il) {
    const model::LayerWeights& L = m.layer(il);
    out.push_back(L.gate_exps.expert_bytes + L.up_exps.expert_bytes +
                  L.down_exps.expert_bytes);
  }
  return out;
}

// Weight bytes a call must read: every distinct expert it names, once.
uint64_t CallWeightBytes(const model::ExpertCall& call, const std::vector<uint64_t>& by_layer,
                         int n_expert) {
  std::vector<uint8_t> seen(n_expert, 0);
  uint64_t n = 0;
  for (int32_t e : call.expert_ids) {
    if (e >= 0 && e < n_expert && !seen[e]) {
      seen[e] = 1;
      ++n;
    }
  }
  return n * by_layer[call.layer];
}

struct Replay {
  double seconds = 0;
  double worker_seconds = 0;  // the worker's own time on the calls (ExpertResult::worker_ns)
  uint64_t weight_bytes = 0;
};

// Replays `calls` `reps` times (the best time is kept).
absl::StatusOr<Replay> ReplayCalls(model::ExpertBackend* backend,
                                   const std::vector<model::ExpertCall>& calls,
                                   const std::vector<uint64_t>& by_layer, int n_expert,
                                   int reps) {
  Replay r;
  for (const model::ExpertCall& c : calls) r.weight_bytes += CallWeightBytes(c, by_layer, n_expert);
  model::ExpertResult result;
  r.seconds = 1e30;
  for (int rep = 0; rep < reps; ++rep) {
    const auto t0 = Clock::now();
    uint64_t worker_ns = 0;
    for (const model::ExpertCall& c : calls) {
      RETURN_IF_ERROR(backend->Compute(c, &result));
      worker_ns += result.worker_ns;
    }
    const double s = Since(t0);
    if (s < r.seconds) {
      r.seconds = s;
      r.worker_seconds = worker_ns * 1e-9;
    }
  }
  return r;
}

// The roofline of the worker's decode bandwidth: the calls' expert bytes
// read and nothing computed (model::ReadExpertWeights), from this process's
// mapping of the model file (the same bytes as the worker's copies, on large
// page-cache folios where the kernel gives them). Returns seconds.
double ReadOnlyReplaySeconds(const model::Model& m, const std::vector<model::ExpertCall>& calls,
                             ThreadPool* pool) {
  const auto t0 = Clock::now();
  for (const model::ExpertCall& c : calls) {
    const model::LayerWeights& L = m.layer(c.layer);
    model::ReadExpertWeights({L.gate_exps, L.up_exps, L.down_exps, {}, {}, {}}, c.expert_ids, pool);
  }
  return Since(t0);
}

// Deterministic prompt tokens: ids drawn from the vocabulary's ordinary
// (non-special) range.
std::vector<int32_t> BenchTokens(int64_t n, int64_t n_vocab, uint64_t seed) {
  std::mt19937_64 rng(seed);
  const int64_t hi = std::max<int64_t>(2, std::min<int64_t>(n_vocab, 256));
  std::vector<int32_t> out(n);
  for (int32_t& t : out) t = static_cast<int32_t>(rng() % hi);
  return out;
}

// The parts' time between two readings of Forward::part_times, divided by
// `runs`.
model::Forward::PartTimes PartsBetween(const model::Forward::PartTimes& before,
                                       const model::Forward::PartTimes& after, double runs) {
  return {(after.attention_s - before.attention_s) / runs,
          (after.deltanet_s - before.deltanet_s) / runs,
          (after.mamba2_s - before.mamba2_s) / runs, (after.moe_s - before.moe_s) / runs,
          (after.head_s - before.head_s) / runs};
}

int32_t Argmax(const std::vector<float>& v) {
  return static_cast<int32_t>(model::internal::Argmax(v.data(), static_cast<int64_t>(v.size())));
}

// One round of the worker-alone decode replay and the DRAM read before it.
struct Round {
  double dram_gbps = 0;
  double worker_gbps = 0;
  double busy_gbps = 0;  // over the worker's own time (0: the backend does not report it)
  double read_only_gbps = 0;  // the same bytes read without compute (ReadOnlyReplaySeconds)
};

struct DecodeResult {
  int64_t depth = 0;
  double tok_s = 0;
  double expert_seconds = 0;  // time the dense side waited for experts
  model::Forward::PartTimes parts;  // the decode's share of each part of the step
  std::vector<model::ExpertCall> calls;
};

}  // namespace

absl::Status RunBench(const Args& args, const CommandIo& io) {
  std::string model_path, depths_flag = "0";
  int64_t threads = 2, n_prompt = 512, n_gen = 128, reps = 3;
  bool json = false;
  ExpertsFlag experts;
  experts.experts = "shm";
  FlagParser f;
  f.AddString("model|m", &model_path, "GGUF model")
      .Meta("PATH")
      .DefaultText("a cached random-weight Qwen3-30B-A3B-shaped model with 4 layers, Q4_K_M");
  f.AddInt("threads|t", &threads,
           "threads for the dense part and for each worker; 0: every CPU the process may use");
  f.AddInt("prompt", &n_prompt, "prefill prompt length in tokens");
  f.AddInt("gen", &n_gen, "tokens generated per decode run");
  f.AddString("depth", &depths_flag, "context depth(s) before decoding, comma-separated")
      .Meta("D[,D...]");
  f.AddInt("reps", &reps, "timed prefills, and worker-alone decode rounds");
  f.AddBool("json", &json, "print one JSON object instead of a table");
  AddExpertsFlags(f, &experts);
  ASSIGN_OR_RETURN(bool go, ParseFlags(f, args,
                                       "bench [--model M] [--threads T] [--prompt 512] "
                                       "[--gen 128] [--depth D[,D...]] [--reps 3] [--json]",
                                       io));
  if (!go) return absl::OkStatus();
  if (!f.positional().empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("bench: unexpected argument '", f.positional()[0], "'"));
  }
  if (threads < 0) return absl::InvalidArgumentError(absl::StrCat("--threads must be >= 0, got ", threads));
  if (n_prompt < 1) return absl::InvalidArgumentError(absl::StrCat("--prompt must be >= 1, got ", n_prompt));
  if (n_gen < 1) return absl::InvalidArgumentError(absl::StrCat("--gen must be >= 1, got ", n_gen));
  if (reps < 1 || reps > 100) {
    return absl::InvalidArgumentError(absl::StrCat("--reps must be in 1..100, got ", reps));
  }
  std::vector<int64_t> depths;
  for (absl::string_view piece : absl::StrSplit(depths_flag, ',', absl::SkipEmpty())) {
    int64_t d = 0;
    if (!absl::SimpleAtoi(piece, &d) || d < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("--depth: '", piece, "' is not a non-negative integer"));
    }
    depths.push_back(d);
  }
  if (depths.empty()) return absl::InvalidArgumentError("--depth is empty");

  const int n_threads = ThreadCount(threads);
  if (model_path.empty()) {
    ASSIGN_OR_RETURN(model_path, EnsureTestModel(BenchTestModelSpec(), n_threads, io.err));
  }
  ASSIGN_OR_RETURN(std::unique_ptr<Engine> engine, Engine::Open(model_path, n_threads, experts));
  const model::Model& m = engine->model();
  const auto& hp = m.hparams();
  const int64_t max_depth = *std::max_element(depths.begin(), depths.end());
  constexpr int64_t kWarmDecode = 8;  // warm-up decode steps after the prompt
  const int64_t n_ctx = std::max(n_prompt + kWarmDecode, max_depth + n_gen);
  if (n_ctx > hp.n_ctx_train) {
    return absl::InvalidArgumentError(absl::StrCat(
        "bench needs ", n_ctx, " positions (max of --prompt + 8 and depth + --gen) but the model's "
        "context length is ", hp.n_ctx_train));
  }
  RecordingExperts recorder(engine->experts());
  model::Forward forward(engine->shared_model(), &recorder, engine->pool());
  ASSIGN_OR_RETURN(std::unique_ptr<model::SequenceState> cache, model::SequenceState::Create(hp, n_ctx));
  const std::vector<uint64_t> by_layer = ExpertBytesByLayer(m);
  const int n_expert = static_cast<int>(hp.n_expert);
  std::vector<float> logits;

  std::fprintf(io.err, "bench: warm-up (one prefill of %lld tokens, %lld decode steps)\n",
               static_cast<long long>(n_prompt), static_cast<long long>(kWarmDecode));
  const std::vector<int32_t> prompt = BenchTokens(n_prompt, hp.n_vocab, 1);
  // Warm-up, as llama-bench does: the same prompt once, so that first-touch
  // costs (the weights' pages, the workers' and this process's scratch
  // buffers, the shared-memory ring) stay out of the timed runs. Its speed
  // is reported too, as the first prefill after start.
  auto t0 = Clock::now();
  RETURN_IF_ERROR(forward.Eval(prompt, cache.get(), model::LogitsMode::kLast, &logits));
  const double first_prefill_s = Since(t0);
  for (int64_t i = 0; i < kWarmDecode; ++i) {
    const int32_t next = Argmax(logits);
    RETURN_IF_ERROR(forward.Eval({&next, 1}, cache.get(), model::LogitsMode::kLast, &logits));
  }

  // Prefill, --reps times into an empty cache.
  std::fprintf(io.err, "bench: prefill of %lld tokens, %lld times\n",
               static_cast<long long>(n_prompt), static_cast<long long>(reps));
  double prefill_s = 0, prefill_expert_s = 0;
  std::vector<model::ExpertCall> prefill_calls;
  const model::Forward::PartTimes prefill_before = forward.part_times();
  for (int64_t r = 0; r < reps; ++r) {
    cache->Clear();
    recorder.Start(/*keep_calls=*/false);
    t0 = Clock::now();
    RETURN_IF_ERROR(forward.Eval(prompt, cache.get(), model::LogitsMode::kLast, &logits));
    prefill_s += Since(t0);
    double expert_s = 0;
    recorder.Stop(&expert_s);
    prefill_expert_s += expert_s;
  }
  prefill_s /= reps;
  prefill_expert_s /= reps;
  const model::Forward::PartTimes prefill_parts =
      PartsBetween(prefill_before, forward.part_times(), static_cast<double>(reps));
  // The same prefill once more, untimed, keeping its calls for the replay.
  {
    cache->Clear();
    recorder.Start(/*keep_calls=*/true);
    RETURN_IF_ERROR(forward.Eval(prompt, cache.get(), model::LogitsMode::kLast, &logits));
    double unused_s = 0;
    prefill_calls = recorder.Stop(&unused_s);
  }

  // Decode at each depth.
  std::vector<DecodeResult> decodes;
  for (int64_t depth : depths) {
    std::fprintf(io.err, "bench: decode of %lld tokens at depth %lld\n",
                 static_cast<long long>(n_gen), static_cast<long long>(depth));
    cache->Clear();
    int32_t next = 1;
    if (depth > 0) {
      const std::vector<int32_t> ctx = BenchTokens(depth, hp.n_vocab, 2);
      RETURN_IF_ERROR(forward.Eval(ctx, cache.get(), model::LogitsMode::kLast, &logits));
      next = Argmax(logits);
    }
    DecodeResult d;
    d.depth = depth;
    recorder.Start(/*keep_calls=*/true);
    const model::Forward::PartTimes before = forward.part_times();
    t0 = Clock::now();
    for (int64_t i = 0; i < n_gen; ++i) {
      RETURN_IF_ERROR(forward.Eval({&next, 1}, cache.get(), model::LogitsMode::kLast, &logits));
      next = Argmax(logits);
    }
    d.tok_s = n_gen / Since(t0);
    d.parts = PartsBetween(before, forward.part_times(), 1);
    d.calls = recorder.Stop(&d.expert_seconds);
    decodes.push_back(std::move(d));
  }

  // The worker alone: the first depth's decode calls replayed with nothing
  // else running, in --reps rounds, each right after a DRAM read with the
  // same thread count, so that each ratio compares the two under the same
  // conditions (a shared VM's memory bandwidth drifts by tens of percent
  // within minutes). Then the prefill calls, once.
  std::fprintf(io.err, "bench: replaying the expert calls to the worker alone (%lld rounds, "
               "each after a DRAM read with %d threads)\n", static_cast<long long>(reps), n_threads);
  ThreadPool dram_pool(n_threads);
  DramReader dram(&dram_pool);
  std::vector<Round> rounds;
  double worker_decode_s = 0, worker_busy_s = 0;
  uint64_t decode_weight_bytes = 0;
  ReadOnlyReplaySeconds(m, decodes[0].calls, &dram_pool);  // maps the pages
  for (int64_t r = 0; r < reps; ++r) {
    Round round;
    round.dram_gbps = dram.MeasureGbps(3);
    ASSIGN_OR_RETURN(Replay wd, ReplayCalls(engine->experts(), decodes[0].calls, by_layer, n_expert, 1));
    round.worker_gbps = wd.weight_bytes / wd.seconds / 1e9;
    round.busy_gbps = wd.worker_seconds > 0 ? wd.weight_bytes / wd.worker_seconds / 1e9 : 0;
    worker_decode_s += wd.seconds;
    worker_busy_s += wd.worker_seconds;
    decode_weight_bytes = wd.weight_bytes;
    round.read_only_gbps =
        wd.weight_bytes / ReadOnlyReplaySeconds(m, decodes[0].calls, &dram_pool) / 1e9;
    rounds.push_back(round);
  }
  ASSIGN_OR_RETURN(Replay wp, ReplayCalls(engine->experts(), prefill_calls, by_layer, n_expert, 1));

  // Means over the rounds; the fraction is the ratio of the means.
  double dram_gbps = 0, worker_gbps = 0, busy_gbps = 0, read_only_gbps = 0;
  double min_fraction = 1e30, max_fraction = 0;
  for (const Round& r : rounds) {
    dram_gbps += r.dram_gbps / rounds.size();
    worker_gbps += r.worker_gbps / rounds.size();
    busy_gbps += r.busy_gbps / rounds.size();
    read_only_gbps += r.read_only_gbps / rounds.size();
    min_fraction = std::min(min_fraction, r.worker_gbps / r.dram_gbps);
    max_fraction = std::max(max_fraction, r.worker_gbps / r.dram_gbps);
  }
  const double worker_decode_tok_s = n_gen * reps / worker_decode_s;
  // Per expert call of the decode replay: the round trip, the worker's own
  // part (remote workers only) and the rest, the hand-off.
  const double n_decode_calls = static_cast<double>(decodes[0].calls.size()) * reps;
  const double call_round_trip_us = 1e6 * worker_decode_s / std::max(1.0, n_decode_calls);
  const double call_worker_us = 1e6 * worker_busy_s / std::max(1.0, n_decode_calls);
  const double worker_prefill_tok_s = n_prompt / wp.seconds;
  const double weight_bytes_per_token = static_cast<double>(decode_weight_bytes) / n_gen;

  if (json) {
    nlohmann::json j;
    j["model"] = model_path;
    j["threads"] = n_threads;
    j["experts"] = experts.experts;
    j["prompt"] = n_prompt;
    j["gen"] = n_gen;
    j["depth"] = depths[0];
    j["reps"] = reps;
    j["prefill_tok_s"] = n_prompt / prefill_s;
    j["prefill_first_tok_s"] = n_prompt / first_prefill_s;
    j["decode_tok_s"] = decodes[0].tok_s;
    nlohmann::json by_depth = nlohmann::json::object();
    for (const DecodeResult& d : decodes) by_depth[std::to_string(d.depth)] = d.tok_s;
    j["decode_tok_s_by_depth"] = by_depth;
    j["worker_decode_tok_s"] = worker_decode_tok_s;
    j["worker_prefill_tok_s"] = worker_prefill_tok_s;
    j["worker_weight_gbps"] = worker_gbps;
    j["dram_read_gbps"] = dram_gbps;
    j["worker_weight_fraction_of_dram"] = worker_gbps / dram_gbps;
    if (busy_gbps > 0) {
      j["worker_busy_weight_gbps"] = busy_gbps;
      j["worker_busy_fraction_of_dram"] = busy_gbps / dram_gbps;
      j["worker_busy_fraction_of_round_trips"] = worker_busy_s / worker_decode_s;
      j["expert_call_worker_us"] = call_worker_us;
      j["expert_call_handoff_us"] = call_round_trip_us - call_worker_us;
    }
    j["expert_call_round_trip_us"] = call_round_trip_us;
    j["read_only_weight_gbps"] = read_only_gbps;
    j["read_only_fraction_of_dram"] = read_only_gbps / dram_gbps;
    nlohmann::json per_round = nlohmann::json::array();
    for (const Round& r : rounds) {
      per_round.push_back({{"dram_read_gbps", r.dram_gbps},
                           {"worker_weight_gbps", r.worker_gbps},
                           {"worker_busy_weight_gbps", r.busy_gbps},
                           {"read_only_weight_gbps", r.read_only_gbps}});
    }
    j["worker_rounds"] = per_round;
    j["expert_weight_bytes_per_token"] = weight_bytes_per_token;
    j["decode_expert_wait_fraction"] = decodes[0].expert_seconds * decodes[0].tok_s / n_gen;
    // Shares of the decode's wall time (the rest: embedding, head, sampling).
    const double decode_s = n_gen / decodes[0].tok_s;
    j["decode_attention_fraction"] = decodes[0].parts.attention_s / decode_s;
    j["decode_deltanet_fraction"] = decodes[0].parts.deltanet_s / decode_s;
    j["decode_mamba2_fraction"] = decodes[0].parts.mamba2_s / decode_s;
    j["decode_moe_fraction"] = decodes[0].parts.moe_s / decode_s;
    j["decode_head_fraction"] = decodes[0].parts.head_s / decode_s;
    j["prefill_expert_wait_fraction"] = prefill_expert_s / prefill_s;
    j["prefill_attention_fraction"] = prefill_parts.attention_s / prefill_s;
    j["prefill_deltanet_fraction"] = prefill_parts.deltanet_s / prefill_s;
    j["prefill_mamba2_fraction"] = prefill_parts.mamba2_s / prefill_s;
    j["prefill_moe_fraction"] = prefill_parts.moe_s / prefill_s;
    std::fprintf(io.out, "%s\n", j.dump().c_str());
    return absl::OkStatus();
  }
  std::fprintf(io.out, "model   %s\nthreads %d, experts %s\n", model_path.c_str(), n_threads,
               experts.experts.c_str());
  std::fprintf(io.out, "prefill (%lld tokens)              %8.1f tok/s  (experts %4.1f%% of it; "
               "attention %.1f%%, DeltaNet %.1f%%, Mamba-2 %.1f%%, MoE FFN %.1f%% of it; mean of "
               "%lld)\n",
               static_cast<long long>(n_prompt), n_prompt / prefill_s,
               100 * prefill_expert_s / prefill_s, 100 * prefill_parts.attention_s / prefill_s,
               100 * prefill_parts.deltanet_s / prefill_s, 100 * prefill_parts.mamba2_s / prefill_s,
               100 * prefill_parts.moe_s / prefill_s,
               static_cast<long long>(reps));
  std::fprintf(io.out, "first prefill after start          %8.1f tok/s\n",
               n_prompt / first_prefill_s);
  for (const DecodeResult& d : decodes) {
    const double decode_s = n_gen / d.tok_s;
    std::fprintf(io.out,
                 "decode (depth %5lld)               %8.1f tok/s  (experts %4.1f%% of it; "
                 "attention %.1f%%, DeltaNet %.1f%%, Mamba-2 %.1f%%, MoE FFN %.1f%%, output head "
                 "%.1f%% of it)\n",
                 static_cast<long long>(d.depth), d.tok_s,
                 100 * d.expert_seconds * d.tok_s / n_gen, 100 * d.parts.attention_s / decode_s,
                 100 * d.parts.deltanet_s / decode_s, 100 * d.parts.mamba2_s / decode_s,
                 100 * d.parts.moe_s / decode_s,
                 100 * d.parts.head_s / decode_s);
  }
  std::fprintf(io.out, "worker alone: decode               %8.1f tok/s\n", worker_decode_tok_s);
  std::fprintf(io.out, "worker alone: prefill              %8.1f tok/s\n", worker_prefill_tok_s);
  std::fprintf(io.out, "DRAM read bandwidth                %8.1f GB/s  (mean of %zu rounds)\n",
               dram_gbps, rounds.size());
  std::fprintf(io.out, "worker weight bandwidth            %8.1f GB/s  (%.1f%% of DRAM, rounds "
               "%.0f-%.0f%%; %.1f MB/token)\n",
               worker_gbps, 100 * worker_gbps / dram_gbps, 100 * min_fraction,
               100 * max_fraction, weight_bytes_per_token / 1e6);
  if (busy_gbps > 0) {
    std::fprintf(io.out, "  over the worker's own time       %8.1f GB/s  (%.1f%% of DRAM; the "
                 "calls' round trips are %.1f%% worker time, the rest hand-off)\n",
                 busy_gbps, 100 * busy_gbps / dram_gbps, 100 * worker_busy_s / worker_decode_s);
    std::fprintf(io.out, "expert call (decode), per layer    %8.1f us round trip = %.1f us "
                 "worker + %.1f us hand-off\n",
                 call_round_trip_us, call_worker_us, call_round_trip_us - call_worker_us);
  }
  std::fprintf(io.out, "same bytes, read without compute   %8.1f GB/s  (%.1f%% of DRAM: the "
               "roofline of the worker's access pattern)\n",
               read_only_gbps, 100 * read_only_gbps / dram_gbps);
  return absl::OkStatus();
}

}  // namespace moesplit::cli
