// ExpertArena: the memory an expert-worker holds its routed experts in.
//
// One region per NUMA node in use, each either anonymous memory or — when the
// worker serves shared memory on this host — a named POSIX shared-memory
// segment ("/NAME.experts.<node>", mode 0600) that the dense service may map
// read-only. Each region is bound to its node (mbind through libnuma),
// advised for transparent huge pages, and mlock'ed; when RLIMIT_MEMLOCK is
// too low the arena warns once and carries on unlocked.
//
// Ownership: the arena owns its mappings (unmapped, and segments unlinked,
// on destruction). Not thread-safe while being filled; read-only afterwards.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace moesplit::worker {

struct NumaPolicy {
  enum class Mode { kAuto, kOff, kNode };
  Mode mode = Mode::kAuto;
  int node = 0;  // for kNode
};

// "auto" | "off" | "<node>"; InvalidArgument otherwise.
absl::StatusOr<NumaPolicy> ParseNumaPolicy(const std::string& s);

struct ArenaRegion {
  int node = -1;            // -1: no NUMA binding
  uint8_t* data = nullptr;
  uint64_t size = 0;
  std::string shm_name;     // empty for anonymous memory
  bool locked = false;      // mlock succeeded
  bool huge_pages = false;  // MADV_HUGEPAGE accepted
};

class ExpertArena {
 public:
  // Creates one region per node with the given byte sizes. `nodes[i]` is the
  // NUMA node of region i (-1 for unbound). With a non-empty `shm_prefix`
  // regions are shared segments "<prefix>.experts.<i>".
  static absl::StatusOr<std::unique_ptr<ExpertArena>> Create(
      const std::vector<int>& nodes, const std::vector<uint64_t>& sizes,
      const std::string& shm_prefix);
  ~ExpertArena();

  const std::vector<ArenaRegion>& regions() const { return regions_; }
  ArenaRegion& region(int i) { return regions_[i]; }
  // Locks every region (after it is filled, so the copy faults pages in on
  // the right node first). Returns a warning text, empty when all locked.
  std::string LockAll();
  uint64_t total_bytes() const;

 private:
  ExpertArena() = default;
  std::vector<ArenaRegion> regions_;
};

// NUMA nodes usable for `policy`: {-1} when NUMA is off or unavailable.
std::vector<int> NumaNodesFor(const NumaPolicy& policy);
// CPUs of `node` (all CPUs for -1).
std::vector<int> CpusOfNode(int node);
// Pins the calling thread to `cpus` (best effort).
void PinCurrentThread(const std::vector<int>& cpus);

}  // namespace moesplit::worker
