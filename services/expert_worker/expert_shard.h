// ExpertShard: the routed experts an expert-worker owns, copied out of the
// GGUF into memory the worker allocates itself (an ExpertArena: NUMA-bound,
// mlock'ed, huge pages; shared segments or private memory, see
// ExpertMemory), and
// the compute over them.
//
// The shard's experts are split contiguously over the NUMA nodes in use;
// each node has its own thread pool pinned to that node's CPUs and computes
// only its experts, so weights are read by threads of their own node. A call
// is split by node, the parts run concurrently and their partials are summed
// in node order (with one node the call goes straight through, bit-identical
// to the in-process reference).
//
// When the shard is larger than `expert_ram` it is not copied: each node
// part holds an ExpertTier (expert_tier.h) instead, RAM slots over the file
// read with direct I/O, its share of the budget in proportion to its
// experts; the results are the same bits.
//
// Thread-safety: Compute() may be called from several connection threads;
// calls are serialised internally (the pools are shared).
#pragma once

#include <chrono>
#include <memory>
#include <set>
#include <mutex>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "common/base/thread_pool.h"
#include "common/model/expert.h"
#include "common/transport/expert_transport.h"
#include "services/expert_worker/expert_reader.h"
#include "services/expert_worker/expert_tier.h"
#include "services/expert_worker/numa_arena.h"
#include "services/expert_worker/shard_spec.h"

namespace moesplit::worker {

struct ShardOptions {
  std::string model_path;
  ShardSpec shard;
  int threads = 0;          // 0: all online CPUs
  NumaPolicy numa;
  std::string shm_prefix;   // the --listen-shm name ("" for gRPC only)
  // With a shm_prefix: shared segments "<prefix>.experts.<i>" or private
  // memory (numa_arena.h); without one, always private.
  ExpertMemory expert_memory = ExpertMemory::kAuto;
  int max_tokens = 512;     // largest call accepted
  std::string worker_id;
  // RAM for the experts: the shard is copied whole when it fits, else held in
  // tiers of this many bytes in all. 0: DefaultExpertRam() (memory_budget.h).
  uint64_t expert_ram = 0;
  int io_threads = 16;                   // the tiers' read queue depth
  std::shared_ptr<ExpertReader> reader;  // the tiers' reader; nullptr: direct I/O
};

class ExpertShard final : public model::ExpertBackend {
 public:
  static absl::StatusOr<std::unique_ptr<ExpertShard>> Load(const ShardOptions& options);
  ~ExpertShard() override;

  absl::Status ComputeInto(const model::ExpertCallView& call, float* partial,
                           uint64_t* worker_ns) override;
  // A prediction that `experts` of `layer` will be in a call soon (the
  // dense side's next-layer prediction): to the node parts' tiers, which
  // start reading them (expert_tier.h); nothing when !tiered(). Returns at
  // once. (Not yet carried by the transports: see docs/cli.md.)
  void Hint(int layer, absl::Span<const int32_t> experts);

  const transport::WorkerDescription& description() const { return description_; }
  // Whether the experts are in tiers (the shard did not fit in expert_ram).
  bool tiered() const { return arena_ == nullptr; }
  // REQUIRES: !tiered().
  const ExpertArena& arena() const { return *arena_; }
  // The tiers' counters summed over the node parts (zeros when !tiered()).
  TierStats tier_stats() const;
  // Bytes of the experts in the shard as the worker holds them (the copy's
  // size, whether or not it was made).
  uint64_t shard_bytes() const { return shard_bytes_; }
  // Non-empty when the expert memory could not be locked.
  const std::string& lock_warning() const { return lock_warning_; }
  double load_seconds() const { return load_seconds_; }

 private:
  struct NodePart;
  ExpertShard() = default;
  // Load's second half when the shard does not fit in `budget`.
  static absl::StatusOr<std::unique_ptr<ExpertShard>> LoadTiered(
      std::unique_ptr<ExpertShard> s, std::shared_ptr<const model::Model> m,
      const ShardSpec& shard, const std::vector<int>& nodes, uint64_t budget, int total_threads,
      const ShardOptions& options, std::chrono::steady_clock::time_point start);
  // Fills description_ (resident[i]: node part i's bytes of expert memory).
  void Describe(const model::Model& m, const ShardSpec& shard, const std::vector<int>& nodes,
                const std::vector<uint64_t>& resident, const std::set<std::string>& formats,
                const ShardOptions& options);

  transport::WorkerDescription description_;
  std::unique_ptr<ExpertArena> arena_;
  std::vector<std::unique_ptr<NodePart>> parts_;
  std::unique_ptr<ThreadPool> drivers_;  // one thread per node part (> 1 node)
  std::mutex mu_;                        // serialises Compute
  std::string lock_warning_;
  double load_seconds_ = 0;
  uint64_t shard_bytes_ = 0;
};

}  // namespace moesplit::worker
