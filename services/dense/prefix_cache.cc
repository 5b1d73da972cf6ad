#include "services/dense/prefix_cache.h"

#include <algorithm>
#include <utility>

namespace moesplit::dense {
namespace {

// splitmix64's finaliser: every input bit reaches every output bit.
uint64_t Mix(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

// A copy of b's identity and state with these K/V rows.
std::shared_ptr<PrefixCache::Block> WithRows(const PrefixCache::Block& b, std::vector<uint8_t> kv,
                                             DeviceRowsRef device_kv) {
  auto out = std::make_shared<PrefixCache::Block>();
  out->key = b.key;
  out->parent = b.parent;
  out->tokens = b.tokens;
  out->kv = std::move(kv);
  out->device_kv = std::move(device_kv);
  out->state = b.state;
  return out;
}

}  // namespace

PrefixCache::PrefixCache(const PrefixCacheOptions& options) : options_(options) {}

uint64_t PrefixCache::ChainKey(uint64_t parent, absl::Span<const int32_t> tokens) {
  uint64_t h = Mix(parent ^ (0x2545f4914f6cdd1dull * (tokens.size() + 1)));
  for (int32_t t : tokens) h = Mix(h ^ static_cast<uint32_t>(t));
  return h;
}

PrefixCache::Match PrefixCache::Lookup(absl::Span<const int32_t> tokens, int64_t max_tokens,
                                       bool need_state) {
  const int64_t B = options_.block_tokens;
  Match m;
  std::vector<uint64_t> keys;
  std::lock_guard<std::mutex> l(mu_);
  ++stats_.lookups;
  uint64_t parent = kRootKey;
  for (int64_t pos = 0; pos + B <= std::min<int64_t>(max_tokens, tokens.size()); pos += B) {
    const auto block_tokens = tokens.subspan(pos, B);
    const uint64_t key = ChainKey(parent, block_tokens);
    auto it = blocks_.find(key);
    if (it == blocks_.end()) break;
    const Block& b = *it->second.block;
    if (b.parent != parent || !std::equal(b.tokens.begin(), b.tokens.end(),
                                          block_tokens.begin(), block_tokens.end())) {
      break;  // a hash collision: another prefix's block
    }
    m.blocks.push_back(it->second.block);
    keys.push_back(key);
    parent = key;
  }
  if (need_state) {
    while (!m.blocks.empty() && m.blocks.back()->state.empty()) {
      m.blocks.pop_back();
      keys.pop_back();
    }
  }
  m.tokens = static_cast<int64_t>(m.blocks.size()) * B;
  if (m.blocks.empty()) {
    ++stats_.misses;
    return m;
  }
  ++stats_.hits;
  stats_.reused_tokens += m.tokens;
  const bool upload = options_.device_bytes > 0 && options_.upload != nullptr;
  for (size_t i = 0; i < keys.size(); ++i) {
    Entry& e = blocks_.at(keys[i]);
    if (e.tier == Tier::kDevice) {
      ++m.device_blocks;
      ++stats_.device_hits;
      continue;
    }
    if (e.tier == Tier::kHost) {
      MoveTo(e, Tier::kPrimary);
      ++m.host_blocks;
      ++stats_.host_hits;
    }
    if (!upload || e.block->bytes() > options_.device_bytes) continue;
    absl::StatusOr<DeviceRowsRef> rows = options_.upload(e.block->kv);
    if (!rows.ok() || *rows == nullptr) continue;  // stays in host memory
    Place(e, WithRows(*e.block, {}, std::move(*rows)), Tier::kDevice);
    m.blocks[i] = e.block;
    ++m.device_blocks;
    ++stats_.uploaded;
  }
  Touch(keys.back());
  Enforce();
  return m;
}

bool PrefixCache::Wants(uint64_t key, bool with_state) const {
  std::lock_guard<std::mutex> l(mu_);
  auto it = blocks_.find(key);
  return it == blocks_.end() || (with_state && it->second.block->state.empty());
}

uint64_t PrefixCache::Insert(uint64_t parent, absl::Span<const int32_t> tokens,
                             std::vector<uint8_t> kv, std::vector<uint8_t> state,
                             DeviceRowsRef device_kv) {
  const uint64_t key = ChainKey(parent, tokens);
  auto b = std::make_shared<Block>();
  b->key = key;
  b->parent = parent;
  b->tokens.assign(tokens.begin(), tokens.end());
  b->kv = std::move(kv);
  b->device_kv = std::move(device_kv);
  b->state = std::move(state);
  if (b->device_kv != nullptr && b->bytes() > options_.device_bytes) {
    // Larger than the device tier: kept in host memory.
    absl::StatusOr<std::vector<uint8_t>> rows = b->device_kv->ToHost();
    if (!rows.ok()) return key;
    b = WithRows(*b, std::move(*rows), nullptr);
  }
  std::lock_guard<std::mutex> l(mu_);
  auto it = blocks_.find(key);
  if (it != blocks_.end()) {
    Entry& e = it->second;
    if (e.block->parent != parent || e.block->tokens != b->tokens) return key;  // a collision
    if (e.block->state.empty() && !b->state.empty()) {
      // The new state with the rows in the form the entry's tier keeps.
      std::shared_ptr<Block> with = b;
      if ((b->device_kv != nullptr) != (e.tier == Tier::kDevice)) {
        with = WithRows(*e.block, e.block->kv, e.block->device_kv);
        with->state = std::move(b->state);
      }
      // Holders of the old block keep theirs.
      if (with->bytes() <= Budget(e.tier)) Place(e, std::move(with), e.tier);
    }
    Touch(key);
    Enforce();
    return key;
  }
  const Tier tier = b->device_kv != nullptr ? Tier::kDevice : Tier::kPrimary;
  if (b->bytes() > Budget(tier)) return key;
  Entry& e = blocks_[key];
  const uint64_t bytes = b->bytes();
  e.block = std::move(b);
  e.tier = tier;
  Lru(tier).push_front(key);
  e.lru = Lru(tier).begin();
  TierBytes(tier) += bytes;
  ++TierBlocks(tier);
  if (auto p = blocks_.find(parent); p != blocks_.end()) ++p->second.children;
  ++stats_.inserted;
  Touch(key);
  Enforce();
  return key;
}

PrefixCacheStats PrefixCache::stats() const {
  std::lock_guard<std::mutex> l(mu_);
  return stats_;
}

void PrefixCache::Touch(uint64_t key) {
  // Deepest first, so that the ancestors end up in front of it.
  for (auto it = blocks_.find(key); it != blocks_.end(); it = blocks_.find(it->second.block->parent)) {
    Entry& e = it->second;
    auto& list = Lru(e.tier);
    list.splice(list.begin(), list, e.lru);
    if (it->second.block->parent == kRootKey) break;
  }
}

void PrefixCache::MoveTo(Entry& e, Tier tier) { Place(e, e.block, tier); }

void PrefixCache::Place(Entry& e, BlockRef block, Tier tier) {
  TierBytes(e.tier) -= e.block->bytes();
  --TierBlocks(e.tier);
  auto& from = Lru(e.tier);
  auto& to = Lru(tier);
  to.splice(to.begin(), from, e.lru);
  e.tier = tier;
  e.block = std::move(block);
  TierBytes(tier) += e.block->bytes();
  ++TierBlocks(tier);
}

void PrefixCache::Drop(uint64_t key) {
  auto it = blocks_.find(key);
  Entry& e = it->second;
  TierBytes(e.tier) -= e.block->bytes();
  --TierBlocks(e.tier);
  Lru(e.tier).erase(e.lru);
  if (auto p = blocks_.find(e.block->parent); p != blocks_.end()) --p->second.children;
  blocks_.erase(it);  // a holder's reference keeps the memory until it lets go
  ++stats_.evicted;
}

void PrefixCache::Enforce() {
  // The least recently used leaf of a tier (a block with children there only
  // when every block of the tier has some).
  auto victim = [&](Tier t) {
    auto& list = Lru(t);
    for (auto it = list.rbegin(); it != list.rend(); ++it) {
      if (blocks_.at(*it).children == 0) return *it;
    }
    return list.back();
  };
  // The device tier's least recently used blocks go to the host, to the
  // front of the primary tier (its descendants there stay behind it); a
  // block whose copy fails is dropped.
  while (stats_.device_bytes > options_.device_bytes && !Lru(Tier::kDevice).empty()) {
    const uint64_t key = Lru(Tier::kDevice).back();
    Entry& e = blocks_.at(key);
    absl::StatusOr<std::vector<uint8_t>> rows = e.block->device_kv->ToHost();
    if (!rows.ok()) {
      Drop(key);
      continue;
    }
    Place(e, WithRows(*e.block, std::move(*rows), nullptr), Tier::kPrimary);
    ++stats_.device_demoted;
  }
  const bool host = options_.host_bytes > 0;
  while (stats_.primary_bytes > options_.primary_bytes && !Lru(Tier::kPrimary).empty()) {
    const uint64_t key = host ? Lru(Tier::kPrimary).back() : victim(Tier::kPrimary);
    Entry& e = blocks_.at(key);
    if (host && e.block->bytes() <= options_.host_bytes) {
      MoveTo(e, Tier::kHost);
      // The demoted block is the host tier's most recent; its descendants
      // there stay behind it.
      ++stats_.demoted;
    } else {
      Drop(key);
    }
  }
  while (stats_.host_bytes > options_.host_bytes && !Lru(Tier::kHost).empty()) {
    Drop(victim(Tier::kHost));
  }
}

}  // namespace moesplit::dense
