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
// primary_bytes), or on a GPU runner with a device tier (device_bytes, the
// --cache-device budget) the device tier: their K/V rows stay in device
// memory (SequenceRunner::ExportKvDevice, a device-to-device copy) and a hit
// imports them with another device-to-device copy instead of a transfer
// from the host. When the device tier is over budget its least recently
// used block is copied to the host (DeviceRows::ToHost) and moves to the
// primary tier. When the primary tier is over budget its least recently
// used block moves to the host tier (budget host_bytes, the --cache-ram
// pool; 0 = no host tier: dropped instead); the host tier drops its least
// recently used blocks. A hit on a host-tier block brings it back to the
// primary tier (PrefixCacheStats::host_hits) instead of being recomputed,
// and with a device tier (and options.upload) every hit block not on the
// device goes up to it (PrefixCacheStats::uploaded), so that the prefixes
// in use stay in device memory. The primary and host tiers hold their
// blocks in host memory (on the CPU that is the runner's memory; without a
// device tier the GPU runner's blocks are device->host copies in the KV
// cache's own type). A tier's bytes are its blocks' whole size (a device
// block's recurrent state, kept in host memory, included).
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
#include <functional>
#include <list>
#include <memory>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"

namespace moesplit::dense {

inline constexpr int kDefaultBlockTokens = 64;

// A block's K/V rows held in a device's memory (a GPU runner's:
// SequenceRunner::ExportKvDevice), opaque to the cache. Thread-safe.
class DeviceRows {
 public:
  virtual ~DeviceRows() = default;
  virtual uint64_t bytes() const = 0;
  // The same rows in host memory (the other tiers' form: what
  // SequenceRunner::ExportKv would have given).
  virtual absl::StatusOr<std::vector<uint8_t>> ToHost() const = 0;
};
using DeviceRowsRef = std::shared_ptr<const DeviceRows>;

struct PrefixCacheOptions {
  int block_tokens = kDefaultBlockTokens;
  uint64_t device_bytes = 0;   // device tier budget (--cache-device); 0 = no device tier
  uint64_t primary_bytes = 0;  // primary tier budget
  uint64_t host_bytes = 0;     // host tier budget (--cache-ram); 0 = no host tier
  // With a device tier: host rows to device rows (SequenceRunner::UploadKv),
  // called by Lookup for the hit blocks not on the device; null = never.
  // An error leaves the block where it is.
  std::function<absl::StatusOr<DeviceRowsRef>(absl::Span<const uint8_t>)> upload;
};

// Cumulative counts and the tiers' contents now.
struct PrefixCacheStats {
  uint64_t lookups = 0;
  uint64_t hits = 0;           // lookups that reused at least one block
  uint64_t misses = 0;         // lookups that reused none
  uint64_t reused_tokens = 0;  // tokens handed out by lookups
  uint64_t host_hits = 0;      // blocks brought back from the host tier by a lookup
  uint64_t device_hits = 0;    // blocks a lookup found in the device tier
  uint64_t uploaded = 0;       // blocks a lookup brought up to the device tier
  uint64_t inserted = 0;       // blocks inserted
  uint64_t device_demoted = 0; // blocks copied from the device to the primary tier
  uint64_t demoted = 0;        // blocks moved from the primary to the host tier
  uint64_t evicted = 0;        // blocks dropped from the cache
  uint64_t device_bytes = 0, primary_bytes = 0, host_bytes = 0;
  int64_t device_blocks = 0, primary_blocks = 0, host_blocks = 0;
};

class PrefixCache {
 public:
  static constexpr uint64_t kRootKey = 0x6d6f6573706c6974ull;  // the parent of a first block

  struct Block {
    uint64_t key = 0, parent = 0;
    std::vector<int32_t> tokens;  // block_tokens tokens
    // The runner's K/V rows of these positions: in host memory (kv), or in
    // device memory (device_kv, then kv is empty) for a device-tier block.
    std::vector<uint8_t> kv;
    DeviceRowsRef device_kv;
    std::vector<uint8_t> state;   // the recurrent state after them; empty = none
    uint64_t bytes() const {
      return kv.size() + (device_kv != nullptr ? device_kv->bytes() : 0) + state.size() +
             tokens.size() * sizeof(int32_t);
    }
  };
  using BlockRef = std::shared_ptr<const Block>;

  // The cached start of a sequence: blocks[i] covers positions [i*B, (i+1)*B).
  struct Match {
    std::vector<BlockRef> blocks;
    int64_t tokens = 0;      // blocks.size() * block_tokens
    int host_blocks = 0;     // of them, brought back from the host tier
    int device_blocks = 0;   // of them, on the device (found there or uploaded)
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
  // the blocks, brings host-tier ones back to the primary tier and, with a
  // device tier and options.upload, the ones not on the device up to it.
  Match Lookup(absl::Span<const int32_t> tokens, int64_t max_tokens, bool need_state);

  // Whether Insert(key, with state?) would add anything: the block is
  // absent, or present without a state and `with_state`. Lets a caller skip
  // exporting a block that is cached already.
  bool Wants(uint64_t key, bool with_state) const;

  // Adds the block after `parent` (kRootKey for a sequence's first block)
  // and returns its key: its K/V rows in host memory (kv), or with
  // device_kv in device memory (kv empty), which go to the device tier (to
  // the host, by ToHost, when they are larger than its budget). Present
  // already: refreshes it and adds the state if it had none.
  // REQUIRES: tokens.size() == block_tokens().
  uint64_t Insert(uint64_t parent, absl::Span<const int32_t> tokens, std::vector<uint8_t> kv,
                  std::vector<uint8_t> state, DeviceRowsRef device_kv = nullptr);

  PrefixCacheStats stats() const;

 private:
  enum class Tier { kDevice, kPrimary, kHost };
  struct Entry {
    BlockRef block;
    Tier tier = Tier::kPrimary;
    std::list<uint64_t>::iterator lru;  // in lru_[tier]; front = most recent
    int children = 0;                   // cached blocks whose parent this is
  };
  // All REQUIRE mu_ held.
  void Touch(uint64_t key);           // the block and its ancestors become most recent
  void MoveTo(Entry& e, Tier tier);   // front of the tier's list
  // The block (which becomes the entry's) in the tier.
  void Place(Entry& e, BlockRef block, Tier tier);
  void Drop(uint64_t key);
  void Enforce();                     // the budgets
  static int Index(Tier t) { return static_cast<int>(t); }
  std::list<uint64_t>& Lru(Tier t) { return lru_[Index(t)]; }
  uint64_t& TierBytes(Tier t) {
    uint64_t* bytes[] = {&stats_.device_bytes, &stats_.primary_bytes, &stats_.host_bytes};
    return *bytes[Index(t)];
  }
  int64_t& TierBlocks(Tier t) {
    int64_t* blocks[] = {&stats_.device_blocks, &stats_.primary_blocks, &stats_.host_blocks};
    return *blocks[Index(t)];
  }
  uint64_t Budget(Tier t) const {
    const uint64_t budgets[] = {options_.device_bytes, options_.primary_bytes,
                                options_.host_bytes};
    return budgets[Index(t)];
  }

  const PrefixCacheOptions options_;
  mutable std::mutex mu_;
  std::unordered_map<uint64_t, Entry> blocks_;  // guarded by mu_
  std::list<uint64_t> lru_[3];                  // guarded by mu_
  PrefixCacheStats stats_;                      // guarded by mu_
};

}  // namespace moesplit::dense
