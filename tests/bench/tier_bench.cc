// The expert-worker's RAM tier (issue 45) on a real routing trace, with and
// without lookahead.
//
//   tier_bench MODEL EXPERT_RAM [PROMPT] [GEN] [THREADS]
//
// Records the expert calls of one prefill of PROMPT tokens and GEN greedy
// decode steps (the CPU forward, experts in-process), then replays them
// against a tiered ExpertShard of EXPERT_RAM bytes (plan/byte_size.h units)
// twice from cold: no hints; each call's experts hinted one call ahead,
// 100 us after the previous call started (while it computes, its experts
// pinned: what the dense side's next-layer prediction gives at best, a
// perfect predictor).
// Prints per run: wall seconds of the prefill's and the decode's calls, the
// RAM hit rate (hits / expert uses), bytes read and the read rate, and the
// prefetch accuracy. Numbers are printed, never asserted.
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <future>
#include <thread>
#include <memory>
#include <string>
#include <vector>

#include "common/model/expert.h"
#include "common/model/forward.h"
#include "common/model/model.h"
#include "common/model/sequence_state.h"
#include "common/plan/byte_size.h"
#include "services/expert_worker/expert_shard.h"

namespace moesplit {
namespace {

// Passes calls through, keeping a copy of each.
class Recorder final : public model::ExpertBackend {
 public:
  explicit Recorder(model::ExpertBackend* inner) : inner_(inner) {}
  absl::Status ComputeInto(const model::ExpertCallView& call, float* partial,
                           uint64_t* worker_ns) override {
    calls.push_back(model::CopyCall(call));
    return inner_->ComputeInto(call, partial, worker_ns);
  }
  std::vector<model::ExpertCall> calls;

 private:
  model::ExpertBackend* inner_;
};

double Since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

int Run(int argc, char** argv) {
  if (argc < 3) {
    std::fprintf(stderr, "usage: tier_bench MODEL EXPERT_RAM [PROMPT] [GEN] [THREADS]\n");
    return 2;
  }
  const std::string path = argv[1];
  const auto ram = plan::ParseByteSize(argv[2]);
  const int n_prompt = argc > 3 ? std::atoi(argv[3]) : 64;
  const int n_gen = argc > 4 ? std::atoi(argv[4]) : 16;
  const int threads = argc > 5 ? std::atoi(argv[5]) : 2;
  if (!ram.ok()) {
    std::fprintf(stderr, "%s\n", std::string(ram.status().message()).c_str());
    return 2;
  }
  auto m = model::Model::Open(path);
  if (!m.ok()) {
    std::fprintf(stderr, "%s\n", std::string(m.status().message()).c_str());
    return 1;
  }
  const auto& hp = (*m)->hparams();
  // 1. The trace.
  ThreadPool pool(threads);
  std::vector<model::ExpertCall> prefill, decode;
  {
    model::InProcessExperts local(model::ExpertStore(*m), &pool);
    Recorder rec(&local);
    model::Forward forward(*m, &rec, &pool);
    auto state = model::SequenceState::Create(hp, n_prompt + n_gen + 1);
    std::vector<int32_t> prompt;
    for (int i = 0; i < n_prompt; ++i) prompt.push_back(1 + (i * 7919) % (hp.n_vocab - 1));
    std::vector<float> logits;
    if (absl::Status s = forward.Eval(prompt, state->get(), model::LogitsMode::kLast, &logits);
        !s.ok()) {
      std::fprintf(stderr, "%s\n", std::string(s.message()).c_str());
      return 1;
    }
    prefill = std::move(rec.calls);
    rec.calls.clear();
    for (int i = 0; i < n_gen; ++i) {
      int32_t next = 0;
      for (size_t v = 1; v < logits.size(); ++v) {
        if (logits[v] > logits[next]) next = static_cast<int32_t>(v);
      }
      if (absl::Status s = forward.Eval({&next, 1}, state->get(), model::LogitsMode::kLast, &logits);
          !s.ok()) {
        std::fprintf(stderr, "%s\n", std::string(s.message()).c_str());
        return 1;
      }
    }
    decode = std::move(rec.calls);
  }
  std::printf("trace: %zu prefill calls (%d tokens), %zu decode calls (%d tokens)\n",
              prefill.size(), n_prompt, decode.size(), n_gen);
  // 2. Replays.
  struct Mode {
    const char* name;
    bool hint_decode, hint_prefill;
  };
  for (const Mode& mode : {Mode{"no hints", false, false},
                           Mode{"hint one call ahead", true, true}}) {
    worker::ShardOptions opt;
    opt.model_path = path;
    opt.threads = threads;
    opt.numa = *worker::ParseNumaPolicy("off");
    opt.expert_ram = *ram;
    auto shard = worker::ExpertShard::Load(opt);
    if (!shard.ok()) {
      std::fprintf(stderr, "%s\n", std::string(shard.status().message()).c_str());
      return 1;
    }
    if (!(*shard)->tiered()) {
      std::printf("the shard (%.2f GB) fits in %s: nothing to measure\n",
                  (*shard)->shard_bytes() / 1e9, argv[2]);
      return 0;
    }
    model::ExpertResult r;
    for (auto* phase : {&prefill, &decode}) {
      const bool hint = phase == &prefill ? mode.hint_prefill : mode.hint_decode;
      const worker::TierStats before = (*shard)->tier_stats();
      const auto t0 = std::chrono::steady_clock::now();
      for (size_t i = 0; i < phase->size(); ++i) {
        // As the dense side sends it: the next layer's prediction while this
        // layer's call runs (its experts pinned), here 100 us after it starts.
        std::future<absl::Status> running = std::async(std::launch::async, [&, i] {
          return (*shard)->Compute((*phase)[i], &r);
        });
        if (hint && i + 1 < phase->size()) {
          std::this_thread::sleep_for(std::chrono::microseconds(100));
          const model::ExpertCall& next = (*phase)[i + 1];
          (*shard)->Hint(next.layer, next.expert_ids);
        }
        if (absl::Status s = running.get(); !s.ok()) {
          std::fprintf(stderr, "%s\n", std::string(s.message()).c_str());
          return 1;
        }
      }
      const double secs = Since(t0);
      const worker::TierStats a = (*shard)->tier_stats();
      const uint64_t uses = a.hits + a.misses - before.hits - before.misses;
      const uint64_t bytes = a.bytes_read - before.bytes_read;
      std::printf(
          "%-20s %-7s %7.3f s  hit rate %5.1f%% (%llu uses)  read %7.1f MB at %6.0f MB/s  "
          "prefetched %llu, used %llu\n",
          mode.name, phase == &prefill ? "prefill" : "decode", secs,
          uses ? 100.0 * (a.hits - before.hits) / uses : 0.0,
          static_cast<unsigned long long>(uses), bytes / 1e6, secs > 0 ? bytes / secs / 1e6 : 0,
          static_cast<unsigned long long>(a.prefetches - before.prefetches),
          static_cast<unsigned long long>(a.prefetch_used - before.prefetch_used));
    }
    std::printf("%-20s slots %d of %.1f MB (%.2f GB of %.2f GB in RAM)\n", mode.name,
                (*shard)->tier_stats().n_slots, (*shard)->tier_stats().slot_bytes / 1e6,
                (*shard)->description().resident_bytes / 1e9, (*shard)->shard_bytes() / 1e9);
  }
  return 0;
}

}  // namespace
}  // namespace moesplit

int main(int argc, char** argv) { return moesplit::Run(argc, argv); }
