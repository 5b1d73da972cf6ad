#include "services/expert_worker/expert_tier.h"

#include <unistd.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <atomic>
#include <random>
#include <thread>

#include "absl/strings/str_cat.h"
#include "common/model/model.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "services/expert_worker/expert_shard.h"
#include "services/expert_worker/memory_budget.h"
#include "services/expert_worker/slot_policy.h"

namespace moesplit::worker {
namespace {

using ::testing::HasSubstr;

std::string Fixture(const std::string& name) {
  return std::string(MOESPLIT_FIXTURES_DIR) + "/models/" + name;
}

// A call of `n_tokens` tokens, each routed to `top_k` distinct experts of
// [eb, ee) drawn from `rng`.
model::ExpertCall RandomCall(int layer, int n_tokens, int d, int eb, int ee, int top_k,
                             std::mt19937* rng) {
  model::ExpertCall c;
  c.call_id = 7;
  c.layer = layer;
  c.n_tokens = n_tokens;
  c.d = d;
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  for (int i = 0; i < n_tokens * d; ++i) c.hidden.push_back(u(*rng));
  c.token_offsets.push_back(0);
  for (int t = 0; t < n_tokens; ++t) {
    std::vector<int> all;
    for (int e = eb; e < ee; ++e) all.push_back(e);
    std::shuffle(all.begin(), all.end(), *rng);
    for (int k = 0; k < std::min(top_k, ee - eb); ++k) {
      c.expert_ids.push_back(all[k]);
      c.weights.push_back(0.1f + 0.8f * (u(*rng) + 1.0f) / 2.0f);
    }
    c.token_offsets.push_back(c.expert_ids.size());
  }
  return c;
}

ShardOptions Options(const std::string& model, const std::string& shard, uint64_t expert_ram) {
  ShardOptions opt;
  opt.model_path = model;
  opt.shard = *ParseShardSpec(shard);
  opt.threads = 2;
  opt.numa = *ParseNumaPolicy("off");
  opt.expert_ram = expert_ram;
  opt.io_threads = 4;
  return opt;
}

// Slots for `n` experts of the shard's largest layer.
uint64_t SlotsFor(const std::string& path, int n) {
  auto m = model::Model::Open(path);
  return ExpertTier::SlotBytes(**m, 0, (*m)->n_layer()) * n;
}

// Tiered shards whose budget holds a handful of experts give the all-in-RAM
// shard's bits, for K-quants (packed), f16, MXFP4 with gpt-oss's biases,
// and deepseek2's leading dense layer; calls with more distinct experts
// than slots run in token runs, and misses evict.
TEST(ExpertTierTest, TieredResultsEqualAllInRamBitForBit) {
  struct Case {
    std::string model, shard;
    int slots;
  };
  for (const Case& c : {Case{"qwen3moe-tiny-q4_k_m.gguf", "", 5},
                        Case{"qwen3moe-tiny-f16.gguf", "layers=1-2,experts=1-6", 4},
                        Case{"gptoss-tiny-mxfp4_moe.gguf", "", 6},
                        Case{"deepseek2-tiny-q8_0.gguf", "", 4}}) {
    SCOPED_TRACE(c.model);
    const std::string path = Fixture(c.model);
    auto ram = ExpertShard::Load(Options(path, c.shard, /*expert_ram=*/1ull << 40));
    ASSERT_TRUE(ram.ok()) << ram.status();
    ASSERT_FALSE((*ram)->tiered());
    auto tier = ExpertShard::Load(Options(path, c.shard, SlotsFor(path, c.slots)));
    ASSERT_TRUE(tier.ok()) << tier.status();
    ASSERT_TRUE((*tier)->tiered());
    EXPECT_LT((*tier)->description().resident_bytes, (*tier)->shard_bytes());
    const auto& d = (*ram)->description();
    std::mt19937 rng(1);
    for (int round = 0; round < 3; ++round) {
      for (int layer = d.layer_begin; layer < d.layer_end; ++layer) {
        for (int n : {1, 3, 17}) {
          const model::ExpertCall call =
              RandomCall(layer, n, d.d, d.expert_begin, d.expert_end, 2, &rng);
          model::ExpertResult want, got;
          const absl::Status ws = (*ram)->Compute(call, &want);
          if (!ws.ok()) {  // a dense-FFN layer: both refuse it alike
            EXPECT_EQ((*tier)->Compute(call, &got).code(), ws.code());
            continue;
          }
          ASSERT_TRUE((*tier)->Compute(call, &got).ok()) << layer << " " << n;
          ASSERT_EQ(want.partial.size(), got.partial.size());
          EXPECT_EQ(0, std::memcmp(want.partial.data(), got.partial.data(),
                                   4 * want.partial.size()))
              << "layer " << layer << " tokens " << n;
        }
      }
    }
    const TierStats st = (*tier)->tier_stats();
    EXPECT_GT(st.misses, 0u);
    EXPECT_GT(st.hits, 0u);
    EXPECT_EQ(st.reads, st.misses);
    EXPECT_LE(st.resident, st.n_slots);
    EXPECT_GT(st.bytes_read, 0u);
    uint64_t in_buckets = 0;
    for (uint64_t b : st.read_buckets) in_buckets += b;
    EXPECT_EQ(in_buckets, st.reads);
  }
}

// A single token needing more experts than there are slots is refused
// clearly; so is a budget that holds no expert.
TEST(ExpertTierTest, TooSmallBudgetsAreClearErrors) {
  const std::string path = Fixture("qwen3moe-tiny-q4_k_m.gguf");
  auto tier = ExpertShard::Load(Options(path, "", SlotsFor(path, 2)));
  ASSERT_TRUE(tier.ok()) << tier.status();
  std::mt19937 rng(3);
  const auto& d = (*tier)->description();
  model::ExpertResult r;
  const absl::Status s =
      (*tier)->Compute(RandomCall(0, 1, d.d, 0, d.n_expert, 3, &rng), &r);
  EXPECT_EQ(s.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(std::string(s.message()), HasSubstr("needs 3 experts"));
  EXPECT_TRUE((*tier)->Compute(RandomCall(0, 4, d.d, 0, d.n_expert, 2, &rng), &r).ok());
  auto none = ExpertShard::Load(Options(path, "", 100));
  EXPECT_EQ(none.status().code(), absl::StatusCode::kResourceExhausted);
}

// The reader seam: reads of one file range fail on demand.
class FaultyReader final : public ExpertReader {
 public:
  absl::Status Read(const std::string& path, uint64_t offset, uint64_t size,
                    uint8_t* dst) override {
    ++reads;
    if (fail.has_value()) return *fail;
    return real.Read(path, offset, size, dst);
  }
  DirectFileReader real;
  std::optional<absl::Status> fail;
  int reads = 0;
};

TEST(ExpertTierTest, ReadFaultsFailTheCallsThatNeedThemAndNothingElse) {
  const std::string path = Fixture("qwen3moe-tiny-q4_k_m.gguf");
  auto reader = std::make_shared<FaultyReader>();
  ShardOptions opt = Options(path, "", SlotsFor(path, 8));
  opt.reader = reader;
  auto tier = ExpertShard::Load(opt);
  ASSERT_TRUE(tier.ok()) << tier.status();
  auto ram = ExpertShard::Load(Options(path, "", 1ull << 40));
  ASSERT_TRUE(ram.ok()) << ram.status();
  const auto& d = (*tier)->description();
  std::mt19937 rng(5);
  const model::ExpertCall warm = RandomCall(0, 1, d.d, 0, 2, 2, &rng);  // experts 0, 1
  model::ExpertResult got, want;
  ASSERT_TRUE((*tier)->Compute(warm, &got).ok());
  // An I/O error: UNAVAILABLE with the reader's words; resident experts
  // still serve.
  reader->fail = absl::UnavailableError(absl::StrCat(path, ": reading at offset 1234: EIO"));
  const model::ExpertCall cold = RandomCall(1, 2, d.d, 0, d.n_expert, 2, &rng);
  absl::Status s = (*tier)->Compute(cold, &got);
  EXPECT_EQ(s.code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(std::string(s.message()), HasSubstr("offset 1234"));
  EXPECT_THAT(std::string(s.message()), HasSubstr("layer 1 expert"));
  ASSERT_TRUE((*tier)->Compute(warm, &got).ok());
  ASSERT_TRUE((*ram)->Compute(warm, &want).ok());
  EXPECT_EQ(0, std::memcmp(want.partial.data(), got.partial.data(), 4 * want.partial.size()));
  // A short read (the file ends early): DATA_LOSS naming the file and offset.
  reader->fail = absl::DataLossError(absl::StrCat(path, ": the file ends at offset 99"));
  s = (*tier)->Compute(cold, &got);
  EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(std::string(s.message()), HasSubstr(path));
  // Once the file reads again, the same call computes the right bits.
  reader->fail.reset();
  ASSERT_TRUE((*tier)->Compute(cold, &got).ok());
  ASSERT_TRUE((*ram)->Compute(cold, &want).ok());
  EXPECT_EQ(0, std::memcmp(want.partial.data(), got.partial.data(), 4 * want.partial.size()));
  EXPECT_GT((*tier)->tier_stats().read_errors, 0u);
}

// The real reader on a file cut short under a loaded tier: DATA_LOSS naming
// the file and the offset, never a crash.
TEST(ExpertTierTest, TruncatedFileIsDataLoss) {
  const auto dir = std::filesystem::temp_directory_path() /
                   absl::StrCat("moesplit_tier_", getpid());
  std::filesystem::create_directories(dir);
  const std::string path = (dir / "m.gguf").string();
  std::filesystem::copy_file(Fixture("qwen3moe-tiny-q4_k_m.gguf"), path);
  auto m = model::Model::Open(path);
  ASSERT_TRUE(m.ok()) << m.status();
  const int last = (*m)->n_layer() - 1;
  auto loc = (*m)->file().Locate((*m)->layer(last).gate_exps.data);
  ASSERT_TRUE(loc.ok());
  const uint64_t cut = loc->offset;
  m->reset();
  auto tier = ExpertShard::Load(Options(path, "", SlotsFor(path, 4)));
  ASSERT_TRUE(tier.ok()) << tier.status();
  ASSERT_EQ(truncate(path.c_str(), static_cast<off_t>(cut)), 0);
  std::mt19937 rng(9);
  const auto& d = (*tier)->description();
  model::ExpertResult r;
  const absl::Status s = (*tier)->Compute(RandomCall(last, 1, d.d, 0, d.n_expert, 2, &rng), &r);
  EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(std::string(s.message()), HasSubstr(path));
  EXPECT_THAT(std::string(s.message()), HasSubstr(absl::StrCat("the file ends at offset ", cut)));
  std::filesystem::remove_all(dir);
}

// Lookahead: experts hinted before their call are read meanwhile, so the
// call finds them (prefetch used, no new read), with the same bits; a hint
// for resident experts or outside the shard reads nothing; a hint whose
// read fails leaves the expert to the call, which reads it itself.
TEST(ExpertTierTest, HintsReadAheadAndCountTheirAccuracy) {
  const std::string path = Fixture("qwen3moe-tiny-q4_k_m.gguf");
  auto reader = std::make_shared<FaultyReader>();
  ShardOptions opt = Options(path, "", SlotsFor(path, 8));
  opt.reader = reader;
  auto tier = ExpertShard::Load(opt);
  ASSERT_TRUE(tier.ok()) << tier.status();
  auto ram = ExpertShard::Load(Options(path, "", 1ull << 40));
  ASSERT_TRUE(ram.ok()) << ram.status();
  const auto& d = (*tier)->description();
  auto settle = [&](uint64_t reads) {  // waits for the hints' reads
    for (int i = 0; i < 2000 && (*tier)->tier_stats().reads + (*tier)->tier_stats().read_errors < reads; ++i) {
      usleep(1000);
    }
  };
  std::mt19937 rng(11);
  model::ExpertCall call = RandomCall(2, 1, d.d, 0, d.n_expert, 2, &rng);
  (*tier)->Hint(2, call.expert_ids);
  (*tier)->Hint(2, std::vector<int32_t>{-1, 99});  // outside: ignored
  settle(2);
  TierStats st = (*tier)->tier_stats();
  EXPECT_EQ(st.prefetches, 2u);
  EXPECT_EQ(st.reads, 2u);
  model::ExpertResult got, want;
  ASSERT_TRUE((*tier)->Compute(call, &got).ok());
  ASSERT_TRUE((*ram)->Compute(call, &want).ok());
  EXPECT_EQ(0, std::memcmp(want.partial.data(), got.partial.data(), 4 * want.partial.size()));
  st = (*tier)->tier_stats();
  EXPECT_EQ(st.reads, 2u);  // the call read nothing more
  EXPECT_EQ(st.misses, 0u);
  EXPECT_EQ(st.hits, 2u);
  EXPECT_EQ(st.prefetch_used, 2u);
  (*tier)->Hint(2, call.expert_ids);  // resident now: nothing to read
  EXPECT_EQ((*tier)->tier_stats().prefetches, 2u);
  // A hint whose read fails: the call reads the expert itself.
  model::ExpertCall other = RandomCall(3, 1, d.d, 0, d.n_expert, 2, &rng);
  reader->fail = absl::UnavailableError("EIO");
  (*tier)->Hint(3, other.expert_ids);
  settle(4);
  EXPECT_EQ((*tier)->tier_stats().read_errors, 2u);
  reader->fail.reset();
  ASSERT_TRUE((*tier)->Compute(other, &got).ok());
  ASSERT_TRUE((*ram)->Compute(other, &want).ok());
  EXPECT_EQ(0, std::memcmp(want.partial.data(), got.partial.data(), 4 * want.partial.size()));
  EXPECT_EQ((*tier)->tier_stats().reads, 4u);
}

// Hints racing calls from another thread keep every call's bits (the tier
// under a hint per call, as the dense side sends them a layer ahead).
TEST(ExpertTierTest, HintsConcurrentWithCallsKeepTheBits) {
  const std::string path = Fixture("gptoss-tiny-mxfp4_moe.gguf");
  auto tier = ExpertShard::Load(Options(path, "", SlotsFor(path, 6)));
  ASSERT_TRUE(tier.ok()) << tier.status();
  auto ram = ExpertShard::Load(Options(path, "", 1ull << 40));
  ASSERT_TRUE(ram.ok()) << ram.status();
  const auto& d = (*tier)->description();
  std::mt19937 rng(13);
  std::vector<model::ExpertCall> calls;
  for (int i = 0; i < 40; ++i) {
    calls.push_back(RandomCall(i % d.n_layer, 1 + i % 3, d.d, 0, d.n_expert, 2, &rng));
  }
  std::atomic<bool> done{false};
  std::thread hinter([&] {
    for (size_t i = 0; !done.load(); i = (i + 1) % calls.size()) {
      (*tier)->Hint(calls[i].layer, calls[i].expert_ids);
    }
  });
  for (const auto& c : calls) {
    model::ExpertResult got, want;
    ASSERT_TRUE((*tier)->Compute(c, &got).ok());
    ASSERT_TRUE((*ram)->Compute(c, &want).ok());
    EXPECT_EQ(0, std::memcmp(want.partial.data(), got.partial.data(), 4 * want.partial.size()));
  }
  done = true;
  hinter.join();
  EXPECT_GT((*tier)->tier_stats().prefetches, 0u);
}

// A scan (every key once, as a long prefill touches every expert) does not
// flush keys used over and over (the decode set); with plain LRU it would.
TEST(ExpertSlotPolicyTest, ScanDoesNotFlushTheHotSet) {
  constexpr int kSlots = 20, kKeys = 1000, kHot = 12;
  ExpertSlotPolicy p(kSlots, kKeys);
  auto use = [&](int key) {
    int slot;
    if (auto s = p.Touch(key)) {
      slot = *s;
      p.Pin(slot);
    } else {
      int evicted;
      slot = p.Assign(key, &evicted);
      ASSERT_GE(slot, 0);
    }
    p.Unpin(slot);
  };
  for (int round = 0; round < 10; ++round) {
    for (int k = 0; k < kHot; ++k) use(k);
  }
  for (int k = 0; k < kHot; ++k) EXPECT_TRUE(p.Protected(p.SlotOf(k))) << k;
  for (int k = kHot; k < kKeys; ++k) use(k);  // the scan, alone
  for (int k = 0; k < kHot; ++k) EXPECT_GE(p.SlotOf(k), 0) << "hot key " << k << " flushed";
  EXPECT_EQ(p.resident(), kSlots);
  // Two more passes of the scan with a decode step every 50 keys (continuous
  // batching interleaves them): LRU would flush the hot set every time (50
  // scan keys > the 8 other slots); here it stays.
  for (int pass = 0; pass < 2; ++pass) {
    for (int k = kHot; k < kKeys; ++k) {
      use(k);
      if (k % 50 == 0) {
        for (int h = 0; h < kHot; ++h) {
          EXPECT_GE(p.SlotOf(h), 0) << "hot key " << h << " flushed at scan key " << k;
          use(h);
        }
      }
    }
  }
}

// A new hot set replaces an old one once it is used more (aging lets it in).
TEST(ExpertSlotPolicyTest, ANewHotSetTakesOver) {
  constexpr int kSlots = 10, kKeys = 100;
  ExpertSlotPolicy p(kSlots, kKeys);
  auto use = [&](int key) {
    int slot;
    if (auto s = p.Touch(key)) {
      slot = *s;
      p.Pin(slot);
    } else {
      int evicted;
      slot = p.Assign(key, &evicted);
    }
    p.Unpin(slot);
  };
  for (int round = 0; round < 20; ++round) {
    for (int k = 0; k < 8; ++k) use(k);
  }
  for (int round = 0; round < 200; ++round) {
    for (int k = 50; k < 58; ++k) use(k);
  }
  for (int k = 50; k < 58; ++k) EXPECT_GE(p.SlotOf(k), 0) << k;
}

// Pinned slots are never victims; Drop frees a slot.
TEST(ExpertSlotPolicyTest, PinnedSlotsAreNeverEvicted) {
  ExpertSlotPolicy p(2, 10);
  int evicted;
  p.Touch(0);
  const int a = p.Assign(0, &evicted);
  p.Touch(1);
  const int b = p.Assign(1, &evicted);
  p.Touch(2);
  EXPECT_EQ(p.Assign(2, &evicted), -1);  // both pinned
  p.Unpin(b);
  EXPECT_EQ(p.Assign(2, &evicted), b);
  EXPECT_EQ(evicted, 1);
  p.Drop(b);
  EXPECT_EQ(p.SlotOf(2), -1);
  EXPECT_EQ(p.resident(), 1);
  EXPECT_EQ(p.KeyOf(a), 0);
}

TEST(MemoryBudgetTest, ParsesTheKernelsFiles) {
  EXPECT_EQ(MemAvailableFromMeminfo("MemTotal: 100 kB\nMemAvailable:   2048 kB\n"), 2048u * 1024);
  EXPECT_EQ(MemAvailableFromMeminfo("MemTotal: 100 kB\n"), std::nullopt);
  const std::string cg = "9:name=systemd:/\n4:memory:/pod/abc\n0::/unified/x\n";
  EXPECT_EQ(CgroupPath(cg, true), "/pod/abc");
  EXPECT_EQ(CgroupPath(cg, false), "/unified/x");
  EXPECT_EQ(CgroupPath("0::/\n", true), std::nullopt);
  EXPECT_EQ(ParseCgroupLimit("max\n"), std::nullopt);
  EXPECT_EQ(ParseCgroupLimit("9223372036854771712\n"), std::nullopt);
  EXPECT_EQ(ParseCgroupLimit("6442450944\n"), 6442450944u);
  // The budget: the lesser of MemAvailable and the cgroup's headroom, less
  // an eighth (at least 512 MiB).
  MemoryFacts f;
  f.mem_available = 64ull << 30;
  EXPECT_EQ(DefaultExpertRam(f), 56ull << 30);
  f.cgroup_limit = 10ull << 30;
  f.cgroup_usage = 2ull << 30;
  EXPECT_EQ(DefaultExpertRam(f), 7ull << 30);
  f.cgroup_usage = 10ull << 30;
  EXPECT_EQ(DefaultExpertRam(f), 0u);
  f.cgroup_limit = 200ull << 20;  // a small limit keeps a quarter back
  f.cgroup_usage = 0;
  EXPECT_EQ(DefaultExpertRam(f), 150ull << 20);
  // From files laid out as the kernel does (v1 here).
  const auto dir = std::filesystem::temp_directory_path() /
                   absl::StrCat("moesplit_budget_", getpid());
  std::filesystem::create_directories(dir / "proc/self");
  std::filesystem::create_directories(dir / "cg/memory/pod/abc");
  auto write = [](const std::filesystem::path& p, const std::string& text) {
    FILE* fp = std::fopen(p.c_str(), "w");
    std::fputs(text.c_str(), fp);
    std::fclose(fp);
  };
  write(dir / "proc/meminfo", "MemAvailable: 33554432 kB\n");
  write(dir / "proc/self/cgroup", cg);
  write(dir / "cg/memory/pod/abc/memory.limit_in_bytes", "8589934592\n");
  write(dir / "cg/memory/pod/abc/memory.usage_in_bytes", "1073741824\n");
  const MemoryFacts r = ReadMemoryFacts((dir / "proc").string(), (dir / "cg").string());
  EXPECT_EQ(r.mem_available, 32ull << 30);
  EXPECT_EQ(r.cgroup_limit, 8ull << 30);
  EXPECT_EQ(r.cgroup_usage, 1ull << 30);
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace moesplit::worker
