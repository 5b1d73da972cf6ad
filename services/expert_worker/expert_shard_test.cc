#include "services/expert_worker/expert_shard.h"

#include <unistd.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "common/model/model.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace moesplit::worker {
namespace {

using ::testing::HasSubstr;

const std::string kModel = std::string(MOESPLIT_FIXTURES_DIR) + "/models/qwen3moe-tiny-q4_k_m.gguf";

model::ExpertCall MakeCall(int layer, int n_tokens, int d, std::vector<int> experts) {
  model::ExpertCall c;
  c.call_id = 42;
  c.layer = layer;
  c.n_tokens = n_tokens;
  c.d = d;
  for (int i = 0; i < n_tokens * d; ++i) c.hidden.push_back(std::cos(0.11f * i));
  c.token_offsets.push_back(0);
  for (int t = 0; t < n_tokens; ++t) {
    for (size_t k = 0; k < experts.size(); ++k) {
      c.expert_ids.push_back(experts[(k + t) % experts.size()]);
      c.weights.push_back(0.3f + 0.2f * k);
    }
    c.token_offsets.push_back(c.expert_ids.size());
  }
  return c;
}

// The shard's result equals the in-process reference over the whole model.
TEST(ExpertShardTest, MatchesInProcessReferenceBitForBit) {
  auto m = model::Model::Open(kModel);
  ASSERT_TRUE(m.ok()) << m.status();
  ThreadPool pool(2);
  model::InProcessExperts reference(model::ExpertStore(*m), &pool);
  ShardOptions opt;
  opt.model_path = kModel;
  opt.shard = *ParseShardSpec("layers=1-2,experts=2-5");
  opt.threads = 2;
  opt.numa = *ParseNumaPolicy("auto");
  auto shard = ExpertShard::Load(opt);
  ASSERT_TRUE(shard.ok()) << shard.status();
  const auto& d = (*shard)->description();
  EXPECT_EQ(d.layer_begin, 1);
  EXPECT_EQ(d.layer_end, 3);
  EXPECT_EQ(d.expert_begin, 2);
  EXPECT_EQ(d.expert_end, 6);
  EXPECT_EQ(d.model_identity, (*m)->file().Identity());
  EXPECT_GT(d.resident_bytes, 0u);
  const int dim = d.d;
  for (int layer : {1, 2}) {
    for (int n : {1, 5}) {
      const auto call = MakeCall(layer, n, dim, {2, 5, 3});
      model::ExpertResult want, got;
      ASSERT_TRUE(reference.Compute(call, &want).ok());
      ASSERT_TRUE((*shard)->Compute(call, &got).ok());
      ASSERT_EQ(want.partial.size(), got.partial.size());
      EXPECT_EQ(0, std::memcmp(want.partial.data(), got.partial.data(), 4 * want.partial.size()))
          << "layer " << layer << " n " << n;
    }
  }
}

// deepseek2's leading dense-FFN layer has no experts: a shard over it loads
// none (a shard of that layer alone loads) and refuses calls for it; its MoE
// layers compute as in-process.
TEST(ExpertShardTest, LoadsNoExpertsForDenseLayers) {
  const std::string ds2 = std::string(MOESPLIT_FIXTURES_DIR) + "/models/deepseek2-tiny-q8_0.gguf";
  auto m = model::Model::Open(ds2);
  ASSERT_TRUE(m.ok()) << m.status();
  ASSERT_EQ((*m)->hparams().layers[0].ffn, model::FfnKind::kDense);
  ShardOptions opt;
  opt.model_path = ds2;
  opt.threads = 1;
  opt.shard = *ParseShardSpec("layers=0-0");
  auto dense_only = ExpertShard::Load(opt);
  ASSERT_TRUE(dense_only.ok()) << dense_only.status();
  const int dim = (*dense_only)->description().d;
  model::ExpertResult r;
  absl::Status s = (*dense_only)->Compute(MakeCall(0, 1, dim, {0}), &r);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_THAT(std::string(s.message()), HasSubstr("no routed experts"));
  opt.shard = *ParseShardSpec("layers=0-1");
  auto with_dense = ExpertShard::Load(opt);
  opt.shard = *ParseShardSpec("layers=1-1");
  auto moe_only = ExpertShard::Load(opt);
  ASSERT_TRUE(with_dense.ok()) << with_dense.status();
  ASSERT_TRUE(moe_only.ok()) << moe_only.status();
  ThreadPool pool(1);
  model::InProcessExperts reference(model::ExpertStore(*m), &pool);
  const auto call = MakeCall(1, 3, dim, {0, 9, 15, 4});
  model::ExpertResult want, got;
  ASSERT_TRUE(reference.Compute(call, &want).ok());
  ASSERT_TRUE((*with_dense)->Compute(call, &got).ok());
  ASSERT_EQ(want.partial.size(), got.partial.size());
  EXPECT_EQ(0, std::memcmp(want.partial.data(), got.partial.data(), 4 * want.partial.size()));
  EXPECT_EQ(reference.Compute(MakeCall(0, 1, dim, {0}), &want).code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(ExpertShardTest, RefusesWorkOutsideItsShard) {
  ShardOptions opt;
  opt.model_path = kModel;
  opt.shard = *ParseShardSpec("layers=0-1,experts=0-3");
  opt.threads = 1;
  auto shard = ExpertShard::Load(opt);
  ASSERT_TRUE(shard.ok()) << shard.status();
  const int dim = (*shard)->description().d;
  model::ExpertResult r;
  absl::Status s = (*shard)->Compute(MakeCall(3, 1, dim, {0}), &r);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(s.message()), HasSubstr("layer 3 is not in this worker's shard"));
  s = (*shard)->Compute(MakeCall(0, 1, dim, {6}), &r);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_THAT(std::string(s.message()), HasSubstr("expert id 6"));
}

// The shard refuses a call longer than the max_tokens it advertises,
// whichever transport brought it.
TEST(ExpertShardTest, RefusesCallsOverItsAdvertisedMaxTokens) {
  ShardOptions opt;
  opt.model_path = kModel;
  opt.shard = *ParseShardSpec("layers=0-1,experts=0-3");
  opt.threads = 1;
  opt.max_tokens = 4;
  auto shard = ExpertShard::Load(opt);
  ASSERT_TRUE(shard.ok()) << shard.status();
  EXPECT_EQ((*shard)->description().max_tokens, 4);
  const int dim = (*shard)->description().d;
  model::ExpertResult r;
  absl::Status s = (*shard)->Compute(MakeCall(0, 5, dim, {0}), &r);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_THAT(std::string(s.message()), HasSubstr("carries 5 tokens"));
  EXPECT_THAT(std::string(s.message()), HasSubstr("max_tokens 4"));
  EXPECT_TRUE((*shard)->Compute(MakeCall(0, 4, dim, {0}), &r).ok());
}

TEST(ExpertShardTest, SharedSegmentsExistWhileLoadedAndGoAfter) {
  const std::string prefix = absl::StrCat("moesplit-shard-test-", getpid());
  const std::string seg = "/dev/shm/" + prefix + ".experts.0";
  {
    ShardOptions opt;
    opt.model_path = kModel;
    opt.shm_prefix = prefix;
    opt.expert_memory = ExpertMemory::kShared;
    opt.threads = 1;
    opt.numa = *ParseNumaPolicy("off");
    auto shard = ExpertShard::Load(opt);
    ASSERT_TRUE(shard.ok()) << shard.status();
    ASSERT_TRUE(std::filesystem::exists(seg));
    EXPECT_EQ(std::filesystem::status(seg).permissions() & std::filesystem::perms::all,
              std::filesystem::perms::owner_read | std::filesystem::perms::owner_write);
    EXPECT_EQ((*shard)->arena().regions()[0].node, -1);
  }
  EXPECT_FALSE(std::filesystem::exists(seg));
}

TEST(ExpertShardTest, PrivateExpertMemoryMakesNoSegmentAndComputesTheSame) {
  const std::string prefix = absl::StrCat("moesplit-shard-private-", getpid());
  const std::string seg = "/dev/shm/" + prefix + ".experts.0";
  ShardOptions opt;
  opt.model_path = kModel;
  opt.threads = 1;
  opt.numa = *ParseNumaPolicy("off");
  auto reference = ExpertShard::Load(opt);  // gRPC only: private
  ASSERT_TRUE(reference.ok()) << reference.status();
  EXPECT_TRUE((*reference)->arena().regions()[0].shm_name.empty());
  opt.shm_prefix = prefix;
  opt.expert_memory = ExpertMemory::kPrivate;
  auto shard = ExpertShard::Load(opt);
  ASSERT_TRUE(shard.ok()) << shard.status();
  EXPECT_FALSE(std::filesystem::exists(seg));
  EXPECT_TRUE((*shard)->arena().regions()[0].shm_name.empty());
  EXPECT_LE((*shard)->arena().HugePageBytes(), (*shard)->arena().total_bytes());
  const int dim = (*shard)->description().d;
  const model::ExpertCall call = MakeCall(1, 3, dim, {0, 2, 5});
  model::ExpertResult a, b;
  ASSERT_TRUE((*shard)->Compute(call, &a).ok());
  ASSERT_TRUE((*reference)->Compute(call, &b).ok());
  EXPECT_EQ(0, std::memcmp(a.partial.data(), b.partial.data(), a.partial.size() * sizeof(float)));

  // auto: shared exactly when this kernel gives shared memory huge pages.
  opt.expert_memory = ExpertMemory::kAuto;
  auto automatic = ExpertShard::Load(opt);
  ASSERT_TRUE(automatic.ok()) << automatic.status();
  EXPECT_EQ(std::filesystem::exists(seg), SharedMemoryHugePages());
  EXPECT_EQ((*automatic)->arena().regions()[0].shm_name.empty(), !SharedMemoryHugePages());
}

TEST(ExpertMemoryTest, ParsesTheFlag) {
  EXPECT_EQ(*ParseExpertMemory("auto"), ExpertMemory::kAuto);
  EXPECT_EQ(*ParseExpertMemory("shared"), ExpertMemory::kShared);
  EXPECT_EQ(*ParseExpertMemory("private"), ExpertMemory::kPrivate);
  const auto bad = ParseExpertMemory("huge");
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(bad.status().message()),
              HasSubstr("--expert-memory must be auto, shared or private, got 'huge'"));
}

TEST(ExpertMemoryTest, ReadsTheSelectedSharedMemoryHugePagePolicy) {
  EXPECT_FALSE(SharedMemoryHugePages("always within_size advise [never] deny force"));
  EXPECT_FALSE(SharedMemoryHugePages("always within_size advise never [deny] force"));
  EXPECT_TRUE(SharedMemoryHugePages("[always] within_size advise never deny force"));
  EXPECT_TRUE(SharedMemoryHugePages("always [within_size] advise never deny force"));
  EXPECT_TRUE(SharedMemoryHugePages("always within_size [advise] never deny force"));
  EXPECT_TRUE(SharedMemoryHugePages("always within_size advise never deny [force]"));
  EXPECT_FALSE(SharedMemoryHugePages(""));
  EXPECT_FALSE(SharedMemoryHugePages("always within_size"));
}

TEST(ExpertMemoryTest, SumsHugePagesOfTheMappingsInTheRanges) {
  std::istringstream smaps(
      "7f0000000000-7f0000400000 rw-s 00000000 00:01 42    /dev/shm/x.experts.0\n"
      "Size:               4096 kB\n"
      "AnonHugePages:         0 kB\n"
      "ShmemPmdMapped:     2048 kB\n"
      "FilePmdMapped:      9999 kB\n"
      "VmFlags: rd wr sh mr mw me ms hg\n"
      "7f0000400000-7f0000800000 rw-p 00000000 00:00 0\n"
      "AnonHugePages:      4096 kB\n"
      "7f1000000000-7f1000200000 rw-p 00000000 00:00 0\n"
      "AnonHugePages:      2048 kB\n");
  // The first two mappings start inside [7f0000000000, +8 MiB); the third
  // does not.
  EXPECT_EQ(SmapsHugePageBytes(smaps, {{0x7f0000000000ull, 8ull << 20}}), 6ull << 20);
  std::istringstream none("");
  EXPECT_EQ(SmapsHugePageBytes(none, {{0x7f0000000000ull, 8ull << 20}}), 0u);
}

TEST(ExpertShardTest, BadModelAndShardAreInvalidArgument) {
  ShardOptions opt;
  opt.model_path = "/nonexistent.gguf";
  EXPECT_EQ(ExpertShard::Load(opt).status().code(), absl::StatusCode::kNotFound);
  opt.model_path = kModel;
  opt.shard = *ParseShardSpec("layers=9");
  auto s = ExpertShard::Load(opt);
  EXPECT_EQ(s.status().code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace moesplit::worker
