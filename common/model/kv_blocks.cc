#include "common/model/kv_blocks.h"

#include "absl/strings/str_cat.h"

namespace moesplit::model {

absl::StatusOr<KvBlockAllocator> KvBlockAllocator::Create(const KvBlockOptions& o) {
  if (o.n_blocks < 1 || o.n_blocks > INT32_MAX) {
    return absl::InvalidArgumentError(
        absl::StrCat("KV blocks: n_blocks ", o.n_blocks, " outside [1, 2^31)"));
  }
  if (o.block_positions < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("KV blocks: block_positions ", o.block_positions, " < 1"));
  }
  if (o.bytes_per_position == 0) {
    return absl::InvalidArgumentError("KV blocks: bytes_per_position is 0");
  }
  const unsigned __int128 cap = static_cast<unsigned __int128>(o.n_blocks) *
                                o.block_positions * o.bytes_per_position;
  if (cap > UINT64_MAX) return absl::InvalidArgumentError("KV blocks: capacity over 2^64 bytes");
  return KvBlockAllocator(o);
}

absl::StatusOr<KvBlockAllocator> KvBlockAllocator::ForBytes(uint64_t capacity_bytes,
                                                            int64_t block_positions,
                                                            uint64_t bytes_per_position) {
  KvBlockOptions o;
  o.block_positions = block_positions;
  o.bytes_per_position = bytes_per_position;
  if (block_positions >= 1 && bytes_per_position > 0) {
    o.n_blocks = static_cast<int64_t>(capacity_bytes / (bytes_per_position *
                                                        static_cast<uint64_t>(block_positions)));
  }
  return Create(o);
}

KvBlockAllocator::KvBlockAllocator(const KvBlockOptions& o) : options_(o) {
  free_.reserve(o.n_blocks);
  for (int64_t b = o.n_blocks - 1; b >= 0; --b) free_.push_back(static_cast<int32_t>(b));
}

bool KvBlockAllocator::CanAppend(uint64_t seq, int64_t n) const {
  if (n < 0) return false;
  auto it = seqs_.find(seq);
  const int64_t len = it == seqs_.end() ? 0 : it->second.length;
  const int64_t have = it == seqs_.end() ? 0 : static_cast<int64_t>(it->second.blocks.size());
  return BlocksFor(len + n) - have <= free_blocks();
}

absl::Status KvBlockAllocator::Append(uint64_t seq, int64_t n) {
  if (n < 0) return absl::InvalidArgumentError(absl::StrCat("KV blocks: append of ", n, " positions"));
  auto it = seqs_.find(seq);
  const int64_t len = it == seqs_.end() ? 0 : it->second.length;
  const int64_t have = it == seqs_.end() ? 0 : static_cast<int64_t>(it->second.blocks.size());
  const int64_t need = BlocksFor(len + n) - have;
  if (need > free_blocks()) {
    const int64_t missing = need - free_blocks();
    return absl::ResourceExhaustedError(absl::StrCat(
        "KV cache full: sequence ", seq, " at ", len, " positions needs ", n,
        " more, ", need, " new block", need == 1 ? "" : "s", " of ", options_.block_positions,
        " positions; ", free_blocks(), " of ", n_blocks(), " blocks free (", missing,
        " short, ", used_bytes(), " of ", capacity_bytes(), " bytes used)"));
  }
  Sequence& s = seqs_[seq];
  for (int64_t i = 0; i < need; ++i) {
    s.blocks.push_back(free_.back());
    free_.pop_back();
  }
  s.length = len + n;
  return absl::OkStatus();
}

absl::Status KvBlockAllocator::Truncate(uint64_t seq, int64_t n) {
  auto it = seqs_.find(seq);
  if (it == seqs_.end()) return absl::NotFoundError(absl::StrCat("KV blocks: no sequence ", seq));
  Sequence& s = it->second;
  if (n < 0 || n > s.length) {
    return absl::InvalidArgumentError(absl::StrCat("KV blocks: cannot truncate sequence ", seq,
                                                   " of ", s.length, " positions to ", n));
  }
  const int64_t keep = BlocksFor(n);
  while (static_cast<int64_t>(s.blocks.size()) > keep) {
    free_.push_back(s.blocks.back());
    s.blocks.pop_back();
  }
  s.length = n;
  return absl::OkStatus();
}

absl::Status KvBlockAllocator::Free(uint64_t seq) {
  auto it = seqs_.find(seq);
  if (it == seqs_.end()) return absl::NotFoundError(absl::StrCat("KV blocks: no sequence ", seq));
  std::vector<int32_t>& b = it->second.blocks;
  for (auto r = b.rbegin(); r != b.rend(); ++r) free_.push_back(*r);
  seqs_.erase(it);
  return absl::OkStatus();
}

absl::Span<const int32_t> KvBlockAllocator::BlockTable(uint64_t seq) const {
  auto it = seqs_.find(seq);
  if (it == seqs_.end()) return {};
  return it->second.blocks;
}

int64_t KvBlockAllocator::Length(uint64_t seq) const {
  auto it = seqs_.find(seq);
  return it == seqs_.end() ? 0 : it->second.length;
}

}  // namespace moesplit::model
