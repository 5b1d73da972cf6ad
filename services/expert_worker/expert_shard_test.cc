#include "services/expert_worker/expert_shard.h"

#include <unistd.h>

#include <cmath>
#include <cstring>
#include <filesystem>

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

TEST(ExpertShardTest, SharedSegmentsExistWhileLoadedAndGoAfter) {
  const std::string prefix = absl::StrCat("moesplit-shard-test-", getpid());
  const std::string seg = "/dev/shm/" + prefix + ".experts.0";
  {
    ShardOptions opt;
    opt.model_path = kModel;
    opt.shm_prefix = prefix;
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
