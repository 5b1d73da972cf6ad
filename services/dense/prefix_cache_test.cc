// The block store alone: longest-prefix lookup over the hash chain, the
// state rule for recurrent models, the two tiers' budgets and LRU order, and
// several threads inserting, looking up and reading blocks of shared
// prefixes at once while blocks are evicted (clean under ASan + UBSan and
// TSan: tests/soak/build_asan.sh with SOAK_TARGETS=prefix_cache_test).
#include "services/dense/prefix_cache.h"

#include <atomic>
#include <thread>

#include "gtest/gtest.h"

namespace moesplit::dense {
namespace {

constexpr int kB = 4;

// A block's payload derived from its tokens and position, so that a reader
// can check it got the right block.
std::vector<uint8_t> Payload(absl::Span<const int32_t> tokens, int64_t pos, size_t bytes) {
  std::vector<uint8_t> out(bytes);
  uint32_t h = static_cast<uint32_t>(pos) * 2654435761u;
  for (int32_t t : tokens) h = h * 31 + static_cast<uint32_t>(t);
  for (size_t i = 0; i < bytes; ++i) out[i] = static_cast<uint8_t>(h + i);
  return out;
}

// Inserts every whole block of `tokens` (states on the blocks in `with_state`
// or all when empty and `states`).
void InsertAll(PrefixCache& c, const std::vector<int32_t>& tokens, size_t bytes,
               bool states = false) {
  uint64_t parent = PrefixCache::kRootKey;
  for (size_t pos = 0; pos + kB <= tokens.size(); pos += kB) {
    auto span = absl::MakeConstSpan(tokens).subspan(pos, kB);
    parent = c.Insert(parent, span, Payload(span, pos, bytes),
                      states ? std::vector<uint8_t>(8, 1) : std::vector<uint8_t>());
  }
}

std::vector<int32_t> Seq(int start, int n) {
  std::vector<int32_t> v;
  for (int i = 0; i < n; ++i) v.push_back(start + i);
  return v;
}

PrefixCacheOptions Opts(uint64_t primary, uint64_t host = 0) {
  PrefixCacheOptions o;
  o.block_tokens = kB;
  o.primary_bytes = primary;
  o.host_bytes = host;
  return o;
}

TEST(PrefixCacheTest, FindsTheLongestCachedPrefixUpToTheLimit) {
  PrefixCache c(Opts(1 << 20));
  const auto a = Seq(10, 13);  // three whole blocks and one token
  InsertAll(c, a, 16);
  EXPECT_EQ(c.stats().inserted, 3u);
  auto m = c.Lookup(a, 100, false);
  EXPECT_EQ(m.tokens, 12);
  ASSERT_EQ(m.blocks.size(), 3u);
  for (size_t i = 0; i < 3; ++i) {
    auto span = absl::MakeConstSpan(a).subspan(i * kB, kB);
    EXPECT_EQ(m.blocks[i]->kv, Payload(span, i * kB, 16)) << i;
  }
  EXPECT_EQ(c.Lookup(a, 11, false).tokens, 8);  // leaves a token to evaluate
  // Same later tokens after a different first block: nothing (the key is a chain).
  auto b = a;
  b[0] = 999;
  EXPECT_EQ(c.Lookup(b, 100, false).tokens, 0);
  // A prompt that diverges inside block 2 reuses blocks 0 and 1.
  auto d = a;
  d[9] = 999;
  EXPECT_EQ(c.Lookup(d, 100, false).tokens, 8);
  const PrefixCacheStats s = c.stats();
  EXPECT_EQ(s.lookups, 4u);
  EXPECT_EQ(s.hits, 3u);
  EXPECT_EQ(s.misses, 1u);
  EXPECT_EQ(s.reused_tokens, 12u + 8u + 8u);
  EXPECT_FALSE(c.Wants(m.blocks[0]->key, false));
  EXPECT_TRUE(c.Wants(m.blocks[0]->key, true));  // it has no state yet
}

TEST(PrefixCacheTest, RecurrentModelsResumeOnlyWhereAStateIsKept) {
  PrefixCache c(Opts(1 << 20));
  const auto a = Seq(1, 16);
  uint64_t parent = PrefixCache::kRootKey;
  for (int pos = 0; pos < 16; pos += kB) {
    auto span = absl::MakeConstSpan(a).subspan(pos, kB);
    // A state after blocks 1 only.
    parent = c.Insert(parent, span, Payload(span, pos, 8),
                      pos == 4 ? std::vector<uint8_t>(8, 7) : std::vector<uint8_t>());
  }
  EXPECT_EQ(c.Lookup(a, 16, true).tokens, 8);
  EXPECT_EQ(c.Lookup(a, 16, false).tokens, 16);
  EXPECT_EQ(c.Lookup(a, 7, true).tokens, 0);
  // Adding a state to a cached block replaces it; holders keep the old one.
  auto held = c.Lookup(a, 16, false);
  auto last = absl::MakeConstSpan(a).subspan(12, kB);
  c.Insert(held.blocks[2]->key, last, Payload(last, 12, 8), std::vector<uint8_t>(8, 9));
  EXPECT_EQ(c.Lookup(a, 16, true).tokens, 16);
  EXPECT_TRUE(held.blocks[3]->state.empty());
}

TEST(PrefixCacheTest, EvictionDemotesToTheHostTierAndHitsComeBack) {
  // Blocks of 64 + 16 bytes: the primary tier holds 4, the host tier 6.
  const uint64_t block = 64 + kB * sizeof(int32_t);
  PrefixCache c(Opts(4 * block, 6 * block));
  const auto a = Seq(100, 8), b = Seq(200, 8), d = Seq(300, 8);
  InsertAll(c, a, 64);
  InsertAll(c, b, 64);
  EXPECT_EQ(c.stats().primary_blocks, 4);
  InsertAll(c, d, 64);  // a's blocks go to the host tier
  PrefixCacheStats s = c.stats();
  EXPECT_EQ(s.primary_blocks, 4);
  EXPECT_EQ(s.host_blocks, 2);
  EXPECT_EQ(s.demoted, 2u);
  EXPECT_EQ(s.primary_bytes, 4 * block);
  EXPECT_EQ(s.host_bytes, 2 * block);
  auto m = c.Lookup(a, 8, false);  // back from the host tier, unchanged
  EXPECT_EQ(m.tokens, 8);
  EXPECT_EQ(m.host_blocks, 2);
  EXPECT_EQ(m.blocks[1]->kv, Payload(absl::MakeConstSpan(a).subspan(4, kB), 4, 64));
  s = c.stats();
  EXPECT_EQ(s.host_hits, 2u);
  EXPECT_EQ(s.primary_blocks, 4);  // b went down instead
  EXPECT_EQ(s.host_blocks, 2);
  EXPECT_EQ(c.Lookup(b, 8, false).host_blocks, 2);
  // Past both budgets the least recent leaves go first: a chain never loses
  // its head while its tail stays.
  for (int i = 0; i < 6; ++i) InsertAll(c, Seq(1000 + 100 * i, 8), 64);
  s = c.stats();
  EXPECT_EQ(s.primary_blocks + s.host_blocks, 10);
  EXPECT_GT(s.evicted, 0u);
  for (int i = 0; i < 6; ++i) {
    const auto seq = Seq(1000 + 100 * i, 8);
    const int64_t got = c.Lookup(seq, 8, false).tokens;
    EXPECT_TRUE(got == 8 || got == 4 || got == 0) << i;
  }
}

TEST(PrefixCacheTest, NoHostTierDropsAndOversizedBlocksAreNotKept) {
  const uint64_t block = 64 + kB * sizeof(int32_t);
  PrefixCache c(Opts(2 * block));
  InsertAll(c, Seq(1, 8), 64);
  InsertAll(c, Seq(50, 8), 64);
  PrefixCacheStats s = c.stats();
  EXPECT_EQ(s.primary_blocks, 2);
  EXPECT_EQ(s.host_blocks, 0);
  EXPECT_EQ(s.evicted, 2u);
  EXPECT_EQ(c.Lookup(Seq(50, 8), 8, false).tokens, 8);
  EXPECT_EQ(c.Lookup(Seq(1, 8), 8, false).tokens, 0);
  PrefixCache tiny(Opts(10));
  InsertAll(tiny, Seq(1, 4), 64);
  EXPECT_EQ(tiny.stats().inserted, 0u);
  EXPECT_EQ(tiny.Lookup(Seq(1, 4), 4, false).tokens, 0);
}

// A device for the device tier: rows "in device memory" are a copy the test
// can see, counted while alive; copies to the host can be made to fail.
struct FakeDevice {
  std::atomic<int64_t> live{0};
  std::atomic<bool> fail_to_host{false};
  std::atomic<int> uploads{0};
};

class FakeRows final : public DeviceRows {
 public:
  FakeRows(FakeDevice* d, std::vector<uint8_t> rows) : d_(d), rows_(std::move(rows)) { ++d_->live; }
  ~FakeRows() override { --d_->live; }
  uint64_t bytes() const override { return rows_.size(); }
  absl::StatusOr<std::vector<uint8_t>> ToHost() const override {
    if (d_->fail_to_host) return absl::InternalError("copy failed");
    return rows_;
  }

 private:
  FakeDevice* d_;
  std::vector<uint8_t> rows_;
};

// InsertAll with the K/V rows "on the device".
void InsertAllOnDevice(PrefixCache& c, FakeDevice& d, const std::vector<int32_t>& tokens,
                       size_t bytes) {
  uint64_t parent = PrefixCache::kRootKey;
  for (size_t pos = 0; pos + kB <= tokens.size(); pos += kB) {
    auto span = absl::MakeConstSpan(tokens).subspan(pos, kB);
    parent = c.Insert(parent, span, {}, {},
                      std::make_shared<FakeRows>(&d, Payload(span, pos, bytes)));
  }
}

// A block's rows wherever they are.
std::vector<uint8_t> Rows(const PrefixCache::Block& b) {
  return b.device_kv != nullptr ? *b.device_kv->ToHost() : b.kv;
}

TEST(PrefixCacheTest, TheDeviceTierDemotesToTheHostAndHitsGoBackUp) {
  // Blocks of 64 + 16 bytes: the device tier holds 2, the primary 2, the host 4.
  const uint64_t block = 64 + kB * sizeof(int32_t);
  FakeDevice d;
  PrefixCacheOptions o = Opts(2 * block, 4 * block);
  o.device_bytes = 2 * block;
  o.upload = [&d](absl::Span<const uint8_t> kv) -> absl::StatusOr<DeviceRowsRef> {
    ++d.uploads;
    return std::make_shared<FakeRows>(&d, std::vector<uint8_t>(kv.begin(), kv.end()));
  };
  PrefixCache c(o);
  const auto a = Seq(100, 8), b = Seq(200, 8), e = Seq(300, 8);
  InsertAllOnDevice(c, d, a, 64);
  PrefixCacheStats s = c.stats();
  EXPECT_EQ(s.device_blocks, 2);
  EXPECT_EQ(s.device_bytes, 2 * block);
  EXPECT_EQ(s.primary_blocks, 0);
  InsertAllOnDevice(c, d, b, 64);  // a's blocks copied down to the primary tier
  s = c.stats();
  EXPECT_EQ(s.device_blocks, 2);
  EXPECT_EQ(s.primary_blocks, 2);
  EXPECT_EQ(s.device_demoted, 2u);
  EXPECT_EQ(d.live.load(), 2);  // a's device rows freed
  InsertAllOnDevice(c, d, e, 64);  // b down, a on to the host tier
  s = c.stats();
  EXPECT_EQ(s.host_blocks, 2);
  EXPECT_EQ(s.demoted, 2u);
  // A hit on the host tier: back up to the device, the rows unchanged.
  auto m = c.Lookup(a, 8, false);
  EXPECT_EQ(m.tokens, 8);
  EXPECT_EQ(m.host_blocks, 2);
  EXPECT_EQ(m.device_blocks, 2);
  for (size_t i = 0; i < 2; ++i) {
    ASSERT_NE(m.blocks[i]->device_kv, nullptr) << i;
    EXPECT_TRUE(m.blocks[i]->kv.empty());
    EXPECT_EQ(Rows(*m.blocks[i]), Payload(absl::MakeConstSpan(a).subspan(i * kB, kB), i * kB, 64));
  }
  s = c.stats();
  EXPECT_EQ(s.uploaded, 2u);
  EXPECT_EQ(d.uploads.load(), 2);
  EXPECT_EQ(s.device_blocks, 2);
  EXPECT_LE(s.device_bytes, o.device_bytes);
  EXPECT_LE(s.primary_bytes, o.primary_bytes);
  EXPECT_LE(s.host_bytes, o.host_bytes);
  // A hit on the device tier copies nothing.
  m = c.Lookup(a, 8, false);
  EXPECT_EQ(m.device_blocks, 2);
  EXPECT_EQ(m.host_blocks, 0);
  EXPECT_EQ(c.stats().device_hits, 2u);
  EXPECT_EQ(d.uploads.load(), 2);
  // Every sequence is still whole somewhere, with its own rows.
  for (const auto& seq : {b, e}) {
    auto got = c.Lookup(seq, 8, false);
    ASSERT_EQ(got.tokens, 8);
    for (size_t i = 0; i < 2; ++i) {
      EXPECT_EQ(Rows(*got.blocks[i]),
                Payload(absl::MakeConstSpan(seq).subspan(i * kB, kB), i * kB, 64));
    }
  }
  m.blocks.clear();
}

TEST(PrefixCacheTest, DeviceRowsThatCannotComeDownAreDroppedAndBigOnesStayOnTheHost) {
  const uint64_t block = 64 + kB * sizeof(int32_t);
  FakeDevice d;
  PrefixCacheOptions o = Opts(8 * block);
  o.device_bytes = 2 * block;
  PrefixCache c(o);
  InsertAllOnDevice(c, d, Seq(1, 8), 64);
  d.fail_to_host = true;
  InsertAllOnDevice(c, d, Seq(50, 8), 64);  // the first two cannot be copied down
  PrefixCacheStats s = c.stats();
  EXPECT_EQ(s.device_blocks, 2);
  EXPECT_EQ(s.primary_blocks, 0);
  EXPECT_EQ(s.evicted, 2u);
  EXPECT_EQ(d.live.load(), 2);
  EXPECT_EQ(c.Lookup(Seq(1, 8), 8, false).tokens, 0);
  EXPECT_EQ(c.Lookup(Seq(50, 8), 8, false).tokens, 8);
  // Without an upload function, a hit stays where it is.
  d.fail_to_host = false;
  InsertAllOnDevice(c, d, Seq(90, 8), 64);
  auto m = c.Lookup(Seq(50, 8), 8, false);
  EXPECT_EQ(m.tokens, 8);
  EXPECT_EQ(m.device_blocks, 0);
  EXPECT_EQ(m.blocks[0]->kv, Payload(Seq(50, 4), 0, 64));
  // Rows larger than the device tier are kept in host memory.
  const auto big = Seq(500, 4);
  c.Insert(PrefixCache::kRootKey, big, {}, {}, std::make_shared<FakeRows>(&d, Payload(big, 0, 3 * 64)));
  m = c.Lookup(big, 4, false);
  ASSERT_EQ(m.tokens, 4);
  EXPECT_EQ(m.blocks[0]->device_kv, nullptr);
  EXPECT_EQ(m.blocks[0]->kv, Payload(big, 0, 3 * 64));
}

// Several sequences sharing prefixes at once, under budgets small enough
// that blocks are evicted while other threads hold and read them.
TEST(PrefixCacheTest, ConcurrentSequencesShareBlocksSafely) {
  const uint64_t block = 256 + kB * sizeof(int32_t);
  PrefixCache c(Opts(4 * block, 3 * block));
  constexpr int kThreads = 6;
  std::atomic<int> bad{0};
  std::atomic<int64_t> reused{0};
  std::vector<std::thread> ts;
  for (int t = 0; t < kThreads; ++t) {
    ts.emplace_back([&, t] {
      for (int round = 0; round < 300; ++round) {
        // Four conversations; each turn extends its shared system prompt.
        const int conv = (round + t) % 4;
        std::vector<int32_t> tokens = Seq(0, 8);               // shared by all
        for (int i = 0; i < 4 + round % 12; ++i) tokens.push_back(1000 * conv + i);
        auto m = c.Lookup(tokens, static_cast<int64_t>(tokens.size()) - 1, false);
        reused += m.tokens;
        for (size_t i = 0; i < m.blocks.size(); ++i) {
          auto span = absl::MakeConstSpan(tokens).subspan(i * kB, kB);
          if (m.blocks[i]->kv != Payload(span, i * kB, 256)) ++bad;
        }
        InsertAll(c, tokens, 256);
      }
    });
  }
  for (auto& th : ts) th.join();
  EXPECT_EQ(bad.load(), 0);
  EXPECT_GT(reused.load(), 0);
  const PrefixCacheStats s = c.stats();
  EXPECT_LE(s.primary_bytes, 4 * block);
  EXPECT_LE(s.host_bytes, 3 * block);
  EXPECT_EQ(s.hits + s.misses, s.lookups);
  EXPECT_GT(s.evicted, 0u);
}

}  // namespace
}  // namespace moesplit::dense
