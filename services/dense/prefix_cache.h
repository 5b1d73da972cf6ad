// PrefixCache: the dense engine's automatic prefix cache, shared by every
// request and sequence. Chat clients resend the whole conversation each
// turn; a sequence that starts with tokens another sequence already
// evaluated copies their state instead of recomputing it.
//
// Blocks. A sequence's positions are cut into blocks of block_tokens tokens
// (kDefaultBlockTokens = 64: a follow-up turn recomputes at most 63 tokens
// of what is cached, and the bookkeeping is a few hundred bytes per block
// against the block's tens or hundreds of KiB of K/V). Block i of a
// sequence is keyed by the hash chain
//     key_0 = ChainKey(kRootKey, tokens[0, B)),
//     key_i = ChainKey(key_{i-1}, tokens[i*B, (i+1)*B)),
// so its key depends on every token before it; a lookup also compares each
// block's tokens and parent key, so a hash collision can never hand a
// sequence another prefix's state. A block holds, opaque to the cache:
//   - kv: the attention layers' K/V rows of its positions in the runner's
//     own format (SequenceRunner::ExportKv; importing is a copy), and
//   - state (optional): the recurrent layers' conv + recurrent state after
//     its last position (SequenceRunner::ExportRecurrent), for models with
//     gated-DeltaNet layers. A prefix of such a model can resume only at a
//     block that carries a state.
//
// Tiers and eviction. Inserted blocks enter the primary tier (budget
// primary_bytes). When it is over budget its least recently used block
// moves to the host tier (budget host_bytes, the --cache-ram pool; 0 = no
// host tier: dropped instead); the host tier drops its least recently used
// blocks. A hit on a host-tier block brings it back to the primary tier
// (PrefixCacheStats::host_hits) instead of being recomputed. Both tiers
// hold their blocks in host memory today (on the CPU that is the runner's
// memory; the GPU runner's blocks are device->host copies in the KV
// cache's own type), so a move between tiers is bookkeeping: the split
// bounds the pool and is where a device-memory primary tier plugs in.
// Recency: using or inserting a block also refreshes its ancestors, so an
// ancestor is always more recent than its descendants and eviction takes
// leaves first (a chain is never cut in the middle while its tail stays).
// A block larger than the primary budget is not inserted.
//
// Sharing. Blocks are immutable once inserted and handed out as
// shared_ptr<const Block>: a sequence copying a looked-up block into its
// state holds a reference, so another thread's eviction only unlinks the
// block (its memory goes with the last reference). The bytes of a block
// evicted while held are no longer counted in the tiers.
//
// Thread-safe: every method may be called from any thread.
#pragma once

#include <cstdint>
#include <list>
#include <memory>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "absl/types/span.h"

namespace moesplit::dense {

inline constexpr int kDefaultBlockTokens = 64;

struct PrefixCacheOptions {
  int block_tokens = kDefaultBlockTokens;
  uint64_t primary_bytes = 0;  // primary tier budget
  uint64_t host_bytes = 0;     // host tier budget (--cache-ram); 0 = no host tier
};

// Cumulative counts and the tiers' contents now.
struct PrefixCacheStats {
  uint64_t lookups = 0;
  uint64_t hits = 0;           // lookups that reused at least one block
  uint64_t misses = 0;         // lookups that reused none
  uint64_t reused_tokens = 0;  // tokens handed out by lookups
  uint64_t host_hits = 0;      // blocks brought back from the host tier by a lookup
  uint64_t inserted = 0;       // blocks inserted
  uint64_t demoted = 0;        // blocks moved from the primary to the host tier
  uint64_t evicted = 0;        // blocks dropped from the cache
  uint64_t primary_bytes = 0, host_bytes = 0;
  int64_t primary_blocks = 0, host_blocks = 0;
};

class PrefixCache {
 public:
  static constexpr uint64_t kRootKey = 0x6d6f6573706c6974ull;  // the parent of a first block

  struct Block {
    uint64_t key = 0, parent = 0;
    std::vector<int32_t> tokens;  // block_tokens tokens
    std::vector<uint8_t> kv;      // the runner's K/V rows of these positions
    std::vector<uint8_t> state;   // the recurrent state after them; empty = none
    uint64_t bytes() const { return kv.size() + state.size() + tokens.size() * sizeof(int32_t); }
  };
  using BlockRef = std::shared_ptr<const Block>;

  // The cached start of a sequence: blocks[i] covers positions [i*B, (i+1)*B).
  struct Match {
    std::vector<BlockRef> blocks;
    int64_t tokens = 0;      // blocks.size() * block_tokens
    int host_blocks = 0;     // of them, brought back from the host tier
  };

  // REQUIRES: options.block_tokens >= 1.
  explicit PrefixCache(const PrefixCacheOptions& options);

  int block_tokens() const { return options_.block_tokens; }
  const PrefixCacheOptions& options() const { return options_; }

  // The chain key of a block of `tokens` after the block keyed `parent`.
  static uint64_t ChainKey(uint64_t parent, absl::Span<const int32_t> tokens);

  // The longest run of cached blocks that starts `tokens`, covering at most
  // max_tokens tokens; with need_state cut back to its last block carrying
  // a state (none when no block does). Counts a hit or a miss, refreshes
  // the blocks and brings host-tier ones back to the primary tier.
  Match Lookup(absl::Span<const int32_t> tokens, int64_t max_tokens, bool need_state);

  // Whether Insert(key, with state?) would add anything: the block is
  // absent, or present without a state and `with_state`. Lets a caller skip
  // exporting a block that is cached already.
  bool Wants(uint64_t key, bool with_state) const;

  // Adds the block after `parent` (kRootKey for a sequence's first block)
  // and returns its key. Present already: refreshes it and adds the state
  // if it had none. REQUIRES: tokens.size() == block_tokens().
  uint64_t Insert(uint64_t parent, absl::Span<const int32_t> tokens, std::vector<uint8_t> kv,
                  std::vector<uint8_t> state);

  PrefixCacheStats stats() const;

 private:
  enum class Tier { kPrimary, kHost };
  struct Entry {
    BlockRef block;
    Tier tier = Tier::kPrimary;
    std::list<uint64_t>::iterator lru;  // in lru_[tier]; front = most recent
    int children = 0;                   // cached blocks whose parent this is
  };
  // All REQUIRE mu_ held.
  void Touch(uint64_t key);           // the block and its ancestors become most recent
  void MoveTo(Entry& e, Tier tier);   // front of the tier's list
  void Drop(uint64_t key);
  void Enforce();                     // the budgets
  std::list<uint64_t>& Lru(Tier t) { return lru_[t == Tier::kPrimary ? 0 : 1]; }
  uint64_t& TierBytes(Tier t) { return t == Tier::kPrimary ? stats_.primary_bytes : stats_.host_bytes; }
  int64_t& TierBlocks(Tier t) {
    return t == Tier::kPrimary ? stats_.primary_blocks : stats_.host_blocks;
  }

  const PrefixCacheOptions options_;
  mutable std::mutex mu_;
  std::unordered_map<uint64_t, Entry> blocks_;  // guarded by mu_
  std::list<uint64_t> lru_[2];                  // guarded by mu_
  PrefixCacheStats stats_;                      // guarded by mu_
};

}  // namespace moesplit::dense
