#include "common/model/kv_blocks.h"

#include <algorithm>
#include <random>
#include <set>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace moesplit::model {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

KvBlockAllocator Make(int64_t blocks, int64_t positions = 16, uint64_t bpp = 100) {
  absl::StatusOr<KvBlockAllocator> a = KvBlockAllocator::Create({blocks, positions, bpp});
  EXPECT_TRUE(a.ok()) << a.status();
  return *a;
}

TEST(KvBlocksTest, AllocatesOnAppendAndFreesWholeSequences) {
  KvBlockAllocator a = Make(8);
  EXPECT_EQ(a.capacity_bytes(), 8u * 16 * 100);
  ASSERT_TRUE(a.Append(7, 1).ok());
  EXPECT_THAT(a.BlockTable(7), ElementsAre(0));
  ASSERT_TRUE(a.Append(7, 15).ok());  // fills block 0 exactly
  EXPECT_THAT(a.BlockTable(7), ElementsAre(0));
  ASSERT_TRUE(a.Append(9, 20).ok());  // a second sequence: two blocks
  EXPECT_THAT(a.BlockTable(9), ElementsAre(1, 2));
  ASSERT_TRUE(a.Append(7, 1).ok());
  EXPECT_THAT(a.BlockTable(7), ElementsAre(0, 3));
  EXPECT_EQ(a.Length(7), 17);
  EXPECT_EQ(a.used_blocks(), 4);
  EXPECT_EQ(a.used_bytes(), 4u * 1600);
  ASSERT_TRUE(a.Free(7).ok());
  EXPECT_EQ(a.used_blocks(), 2);
  EXPECT_EQ(a.Length(7), 0);
  EXPECT_TRUE(a.BlockTable(7).empty());
  // Freed blocks are reused, the sequence's first block first.
  ASSERT_TRUE(a.Append(11, 32).ok());
  EXPECT_THAT(a.BlockTable(11), ElementsAre(0, 3));
  EXPECT_EQ(a.n_sequences(), 2);
}

TEST(KvBlocksTest, FullIsResourceExhaustedAndChangesNothing) {
  KvBlockAllocator a = Make(4);
  ASSERT_TRUE(a.Append(1, 40).ok());  // 3 blocks
  EXPECT_TRUE(a.CanAppend(1, 24));    // 64 positions = 4 blocks
  EXPECT_FALSE(a.CanAppend(1, 25));
  absl::Status s = a.Append(1, 25);
  EXPECT_EQ(s.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(s.message(), HasSubstr("sequence 1 at 40 positions needs 25 more"));
  EXPECT_THAT(s.message(), HasSubstr("2 new blocks of 16 positions; 1 of 4 blocks free"));
  EXPECT_THAT(s.message(), HasSubstr("4800 of 6400 bytes used"));
  EXPECT_EQ(a.Length(1), 40);
  EXPECT_EQ(a.used_blocks(), 3);
  s = a.Append(2, 17);  // a new sequence that does not fit is not created
  EXPECT_EQ(s.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(a.n_sequences(), 1);
  EXPECT_TRUE(a.Append(2, 16).ok());
  EXPECT_EQ(a.free_blocks(), 0);
  EXPECT_EQ(a.used_bytes(), a.capacity_bytes());
}

TEST(KvBlocksTest, TruncateReturnsWholeBlocks) {
  KvBlockAllocator a = Make(4, 8);
  ASSERT_TRUE(a.Append(3, 20).ok());
  EXPECT_THAT(a.BlockTable(3), ElementsAre(0, 1, 2));
  ASSERT_TRUE(a.Truncate(3, 9).ok());
  EXPECT_THAT(a.BlockTable(3), ElementsAre(0, 1));
  EXPECT_EQ(a.Length(3), 9);
  ASSERT_TRUE(a.Truncate(3, 0).ok());
  EXPECT_TRUE(a.BlockTable(3).empty());
  EXPECT_EQ(a.free_blocks(), 4);
  EXPECT_EQ(a.Truncate(3, 1).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(a.Truncate(5, 0).code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(a.Free(5).code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(a.Append(3, -1).code(), absl::StatusCode::kInvalidArgument);
}

TEST(KvBlocksTest, RandomWorkloadKeepsBlocksDisjoint) {
  KvBlockAllocator a = Make(64, 16);
  std::mt19937 rng(5);
  for (int i = 0; i < 3000; ++i) {
    const uint64_t seq = rng() % 10;
    const int op = rng() % 10;
    if (op < 7) {
      const int64_t n = rng() % 40;
      const bool can = a.CanAppend(seq, n);
      const absl::Status s = a.Append(seq, n);
      ASSERT_EQ(s.ok(), can) << s;
      if (!s.ok()) ASSERT_EQ(s.code(), absl::StatusCode::kResourceExhausted);
    } else if (op < 9) {
      (void)a.Free(seq);
    } else if (a.Length(seq) > 0) {
      ASSERT_TRUE(a.Truncate(seq, rng() % a.Length(seq)).ok());
    }
    std::set<int32_t> seen;
    int64_t used = 0;
    for (uint64_t q = 0; q < 10; ++q) {
      absl::Span<const int32_t> t = a.BlockTable(q);
      ASSERT_EQ(static_cast<int64_t>(t.size()), (a.Length(q) + 15) / 16);
      for (int32_t b : t) {
        ASSERT_TRUE(b >= 0 && b < 64);
        ASSERT_TRUE(seen.insert(b).second) << "block " << b << " owned twice";
      }
      used += t.size();
    }
    ASSERT_EQ(used, a.used_blocks());
  }
}

TEST(KvBlocksTest, FromPlanBytesAndBadOptions) {
  // The plan's q8_0 KV for Qwen3-30B-A3B: 52,224 bytes per position, 64K.
  absl::StatusOr<KvBlockAllocator> a =
      KvBlockAllocator::ForBytes(uint64_t{52224} * 65536, 32, 52224);
  ASSERT_TRUE(a.ok());
  EXPECT_EQ(a->n_blocks(), 2048);
  EXPECT_EQ(a->capacity_bytes(), uint64_t{52224} * 65536);
  EXPECT_FALSE(KvBlockAllocator::Create({0, 16, 100}).ok());
  EXPECT_FALSE(KvBlockAllocator::Create({4, 0, 100}).ok());
  EXPECT_THAT(KvBlockAllocator::Create({4, 16, 0}).status().message(),
              HasSubstr("bytes_per_position"));
  EXPECT_FALSE(KvBlockAllocator::ForBytes(100, 16, 100).ok());  // not one block
}

}  // namespace
}  // namespace moesplit::model
