// ExpertTier: an expert-worker's routed experts when they do not all fit in
// its memory budget: RAM holds a fixed set of slots, each one expert of one
// layer (gate, up and down, in the layout the CPU kernels read: packed where
// quant::PackedPreferred, as ExpertShard's full copy); the rest stay in the
// GGUF on disk and are read on a miss through an ExpertReader (direct I/O,
// expert_reader.h) by a pool of I/O threads, so a call's misses are read in
// parallel, one outstanding request per I/O thread (the queue depth).
// ExpertSlotPolicy (slot_policy.h) picks which experts keep their slots.
//
// A call is computed by the same fused kernels (model::InProcessExperts)
// over a store whose expert e is slot e: the call's expert ids are mapped to
// their slots, so the bytes and the arithmetic are those of the all-in-RAM
// shard and the partials are bit-identical. A call whose distinct experts
// exceed the slots is computed in runs of whole tokens that fit (a token's
// result does not depend on what shares its call: batch invariance, so
// this too is bit-identical); a single token whose experts exceed the slots
// fails with RESOURCE_EXHAUSTED.
//
// Errors: a failed read fails the call that needed it with the reader's
// status (UNAVAILABLE / DATA_LOSS naming the file and offset), leaves the
// slot empty and changes nothing else; the next call that needs the
// expert reads it again.
//
// Lookahead: Hint(layer, experts) (the dense side's prediction of a layer's
// experts before its call) starts reading the predicted experts that are
// not resident into free or probation slots (never evicting a protected
// expert for a guess) and returns at once; the call that then needs one
// waits only for the rest of its read. A failed prefetch leaves the slot
// to be read again by the call that needs it. stats() counts prefetches,
// those a call used and those evicted unused (prefetch accuracy).
//
// Page cache: the reader bypasses it, and the GGUF stays mapped only for
// its metadata and small per-expert vectors (biases), never for expert
// bytes.
//
// Thread-safety: ComputeInto may be called from several threads; calls are
// serialised. Hint and stats() may be called at any time, from any thread.
#pragma once

#include <array>
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"
#include "common/base/thread_pool.h"
#include "common/model/expert.h"
#include "common/model/model.h"
#include "services/expert_worker/expert_reader.h"
#include "services/expert_worker/slot_policy.h"

namespace moesplit::worker {

struct TierOptions {
  // Bytes of slots (rounded down to whole slots; at least one slot).
  uint64_t budget_bytes = 0;
  // Concurrent reads (the I/O queue depth).
  int io_threads = 16;
  // nullptr: a DirectFileReader.
  std::shared_ptr<ExpertReader> reader;
};

// Read-latency histogram bucket upper bounds, seconds (+Inf last).
inline constexpr std::array<double, 10> kTierReadBuckets = {
    100e-6, 250e-6, 500e-6, 1e-3, 2.5e-3, 5e-3, 10e-3, 25e-3, 100e-3, 1.0};

struct TierStats {
  int n_slots = 0;
  uint64_t slot_bytes = 0;
  int resident = 0;          // experts in slots now
  uint64_t hits = 0;         // expert uses served from a slot
  uint64_t misses = 0;       // expert uses that needed a read
  uint64_t reads = 0;        // experts read
  uint64_t bytes_read = 0;   // from the file
  uint64_t read_errors = 0;  // failed expert reads
  double read_seconds = 0;   // sum of the reads' latencies
  uint64_t prefetches = 0;       // experts read on a hint
  uint64_t prefetch_used = 0;    // of which a call then used
  uint64_t prefetch_unused = 0;  // of which were evicted before any call used them
  // Reads whose latency fell in each bucket of kTierReadBuckets (non
  // cumulative; the last counts those above the last bound).
  std::array<uint64_t, kTierReadBuckets.size() + 1> read_buckets{};
};

class ExpertTier final : public model::ExpertBackend {
 public:
  // Bytes one slot takes: the largest (gate + up + down of one expert, each
  // 64-byte aligned, packed as the kernels read it) over the layers
  // [layer_begin, layer_end) that have routed experts.
  static uint64_t SlotBytes(const model::Model& m, int layer_begin, int layer_end);

  // Slots for experts [expert_begin, expert_end) of layers [layer_begin,
  // layer_end) of `model` (kept open: its mapping gives each expert's file
  // and offset). InvalidArgument for empty ranges, ResourceExhausted when
  // the budget holds no slot or the slots cannot be allocated. `pool`
  // computes; it must outlive the tier.
  static absl::StatusOr<std::unique_ptr<ExpertTier>> Create(
      std::shared_ptr<const model::Model> model, int layer_begin, int layer_end,
      int expert_begin, int expert_end, ThreadPool* pool, TierOptions options);
  ~ExpertTier() override;

  absl::Status ComputeInto(const model::ExpertCallView& call, float* partial,
                           uint64_t* worker_ns) override;
  // Starts reading `experts` of `layer` (ids outside the tier's ranges are
  // ignored); see Lookahead above. Does not wait for the reads.
  void Hint(int layer, absl::Span<const int32_t> experts);

  int n_slots() const { return n_slots_; }
  uint64_t slot_bytes() const { return slot_bytes_; }
  TierStats stats() const;

 private:
  struct LayerLayout {
    bool has_experts = false;
    uint64_t offset[3] = {0, 0, 0};  // gate, up, down within a slot
    bool pack[3] = {false, false, false};
    std::string path[3];             // the tensor's file
    uint64_t file_offset[3] = {0, 0, 0};  // its expert 0 there
  };
  enum SlotState : uint8_t { kReady, kLoading, kInvalid };
  class IoQueue;

  ExpertTier() = default;
  int Key(int layer, int expert) const {
    return (layer - layer_begin_) * (expert_end_ - expert_begin_) + (expert - expert_begin_);
  }
  // Reads one expert into its slot (on an I/O thread).
  absl::Status Fill(int slot, int layer, int expert, std::vector<uint8_t>* staging);
  // `slot` is about to hold another key: counts an unused prefetch.
  // REQUIRES: mu_ held.
  void Reuse(int slot);
  // Tokens [t0, t1) of `call`, whose distinct experts fit in the slots.
  absl::Status ComputeTokens(const model::ExpertCallView& call, int t0, int t1, float* partial);

  // Constant after Create.
  std::shared_ptr<const model::Model> model_;
  int layer_begin_ = 0, layer_end_ = 0, expert_begin_ = 0, expert_end_ = 0;
  int n_slots_ = 0;
  uint64_t slot_bytes_ = 0;
  std::shared_ptr<uint8_t[]> slots_;
  std::vector<LayerLayout> layout_;  // per layer of the shard
  std::shared_ptr<ExpertReader> reader_;
  std::unique_ptr<model::ExpertStore> shape_;  // the shard's shape, for validation
  std::unique_ptr<model::InProcessExperts> compute_;
  std::unique_ptr<IoQueue> io_;
  int64_t n_ff_ = 0, d_ = 0;
  bool biases_ = false;

  std::mutex call_mu_;  // serialises calls; guards the call scratch and bias vectors
  // Per slot: the biases of the expert it holds (gate, up: n_ff; down: d);
  // lent to each call's store (the buffers never move: Fill writes through
  // the *_ptr_ copies of their addresses).
  std::vector<float> gate_b_, up_b_, down_b_;
  float* gate_b_ptr_ = nullptr;
  float* up_b_ptr_ = nullptr;
  float* down_b_ptr_ = nullptr;
  std::vector<int32_t> slot_ids_;
  std::vector<uint32_t> offsets_;

  mutable std::mutex mu_;  // guards the policy and the slot states
  std::condition_variable cv_;  // a slot left kLoading
  std::unique_ptr<ExpertSlotPolicy> policy_;
  std::vector<SlotState> state_;
  std::vector<uint8_t> prefetched_;  // read on a hint, not used by a call yet
  int prefetches_in_flight_ = 0;

  mutable std::mutex stats_mu_;
  TierStats stats_;  // guarded by stats_mu_ (n_slots, slot_bytes, resident filled on read)
};

}  // namespace moesplit::worker
