#include "services/expert_worker/shard_spec.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "services/expert_worker/numa_arena.h"

namespace moesplit::worker {
namespace {

using ::testing::HasSubstr;

TEST(ShardSpecTest, ParsesAndResolves) {
  struct Case {
    std::string text;
    int lb, le, eb, ee;
  };
  for (const Case& c : std::vector<Case>{{"", 0, 48, 0, 128},
                                         {"all", 0, 48, 0, 128},
                                         {"layers=0-23", 0, 24, 0, 128},
                                         {"experts=64-127", 0, 48, 64, 128},
                                         {"layers=5,experts=3-4", 5, 6, 3, 5},
                                         {"experts=0-63,layers=24-47", 24, 48, 0, 64}}) {
    auto spec = ParseShardSpec(c.text);
    ASSERT_TRUE(spec.ok()) << c.text << ": " << spec.status();
    auto r = ResolveShard(*spec, 48, 128);
    ASSERT_TRUE(r.ok()) << c.text << ": " << r.status();
    EXPECT_EQ(r->layer_begin, c.lb) << c.text;
    EXPECT_EQ(r->layer_end, c.le) << c.text;
    EXPECT_EQ(r->expert_begin, c.eb) << c.text;
    EXPECT_EQ(r->expert_end, c.ee) << c.text;
  }
}

TEST(ShardSpecTest, BadSpecsNameTheProblem) {
  struct Case {
    std::string text, message;
  };
  for (const Case& c : std::vector<Case>{{"layers", "expected layers=A-B"},
                                         {"layers=3-1", "expected A-B with 0 <= A <= B"},
                                         {"layers=a-b", "layers=a-b"},
                                         {"rows=1-2", "unknown key 'rows'"},
                                         {"experts=-1", "experts=-1"}}) {
    auto spec = ParseShardSpec(c.text);
    ASSERT_FALSE(spec.ok()) << c.text;
    EXPECT_EQ(spec.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(std::string(spec.status().message()), HasSubstr(c.message)) << c.text;
  }
  auto out_of_range = ResolveShard(*ParseShardSpec("layers=40-50"), 48, 128);
  EXPECT_THAT(std::string(out_of_range.status().message()),
              HasSubstr("layers 40-50 outside the model's layers 0-47"));
  auto experts = ResolveShard(*ParseShardSpec("experts=100-200"), 48, 128);
  EXPECT_THAT(std::string(experts.status().message()), HasSubstr("experts 100-200"));
}

TEST(ShardSpecTest, LayerShardsCoverEveryLayerOnce) {
  for (int n : {1, 2, 3, 5}) {
    int next = 0;
    for (int i = 0; i < n; ++i) {
      auto r = ResolveShard(*ParseShardSpec(LayerShardText(i, n, 7)), 7, 8);
      ASSERT_TRUE(r.ok());
      EXPECT_EQ(r->layer_begin, next) << n << " " << i;
      next = r->layer_end;
    }
    EXPECT_EQ(next, 7);
  }
}

TEST(NumaPolicyTest, Parses) {
  EXPECT_EQ(ParseNumaPolicy("auto")->mode, NumaPolicy::Mode::kAuto);
  EXPECT_EQ(ParseNumaPolicy("off")->mode, NumaPolicy::Mode::kOff);
  EXPECT_EQ(ParseNumaPolicy("1")->node, 1);
  EXPECT_FALSE(ParseNumaPolicy("everywhere").ok());
  EXPECT_EQ(NumaNodesFor(*ParseNumaPolicy("off")), std::vector<int>{-1});
  EXPECT_FALSE(NumaNodesFor(*ParseNumaPolicy("auto")).empty());
  EXPECT_FALSE(CpusOfNode(-1).empty());
}

}  // namespace
}  // namespace moesplit::worker
