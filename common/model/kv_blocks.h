// Paged KV cache bookkeeping: a fixed pool of blocks of `block_positions`
// positions each, handed to sequences as they grow (vLLM's PagedAttention
// layout). Each sequence has a block table: its position p lives in block
// table[p / block_positions] at offset p % block_positions. The allocator
// only does the accounting; the KV memory itself (one region of
// n_blocks x block_bytes per layer, on the GPU or the host) belongs to the
// backend.
//
// Blocks are taken from a LIFO free list that starts in ascending order, so
// a fresh allocator hands out 0, 1, 2, ... (deterministic).
//
// Thread-safety: not thread-safe (the scheduler owns it).
#pragma once

#include <cstdint>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"

namespace moesplit::model {

struct KvBlockOptions {
  int64_t n_blocks = 0;               // >= 1
  int64_t block_positions = 16;       // >= 1
  uint64_t bytes_per_position = 0;    // all layers, K and V (the plan's)
};

class KvBlockAllocator {
 public:
  // InvalidArgument for n_blocks or block_positions < 1, zero
  // bytes_per_position, or a capacity over 2^64 bytes.
  static absl::StatusOr<KvBlockAllocator> Create(const KvBlockOptions& options);
  // As many blocks as `capacity_bytes` holds (e.g. the plan's KV bytes).
  static absl::StatusOr<KvBlockAllocator> ForBytes(uint64_t capacity_bytes,
                                                   int64_t block_positions,
                                                   uint64_t bytes_per_position);

  // Grows `seq` (created when new) by n >= 0 positions, taking blocks as
  // needed. ResourceExhausted when the free blocks do not suffice, saying
  // how many positions and blocks are missing; InvalidArgument for n < 0.
  // On error nothing changes.
  absl::Status Append(uint64_t seq, int64_t n);
  // Keeps the first n positions of `seq`, returning whole blocks past them.
  // NotFound for an unknown sequence, InvalidArgument when n > Length(seq).
  absl::Status Truncate(uint64_t seq, int64_t n);
  // Returns every block of `seq` and forgets it. NotFound when unknown.
  absl::Status Free(uint64_t seq);

  // Whether Append(seq, n) would succeed.
  bool CanAppend(uint64_t seq, int64_t n) const;
  // Blocks of `seq` in position order (empty for an unknown sequence).
  absl::Span<const int32_t> BlockTable(uint64_t seq) const;
  int64_t Length(uint64_t seq) const;  // 0 for an unknown sequence
  int64_t n_sequences() const { return static_cast<int64_t>(seqs_.size()); }

  int64_t block_positions() const { return options_.block_positions; }
  uint64_t block_bytes() const { return options_.bytes_per_position * options_.block_positions; }
  int64_t n_blocks() const { return options_.n_blocks; }
  int64_t free_blocks() const { return static_cast<int64_t>(free_.size()); }
  int64_t used_blocks() const { return n_blocks() - free_blocks(); }
  uint64_t used_bytes() const { return static_cast<uint64_t>(used_blocks()) * block_bytes(); }
  uint64_t capacity_bytes() const { return static_cast<uint64_t>(n_blocks()) * block_bytes(); }

 private:
  struct Sequence {
    int64_t length = 0;
    std::vector<int32_t> blocks;
  };
  explicit KvBlockAllocator(const KvBlockOptions& options);
  int64_t BlocksFor(int64_t positions) const {
    return (positions + options_.block_positions - 1) / options_.block_positions;
  }

  KvBlockOptions options_;
  std::vector<int32_t> free_;  // stack; back() is the next block handed out
  absl::flat_hash_map<uint64_t, Sequence> seqs_;
};

}  // namespace moesplit::model
