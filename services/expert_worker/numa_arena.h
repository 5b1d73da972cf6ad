// ExpertArena: the memory an expert-worker holds its routed experts in.
//
// One region per NUMA node in use, each either private anonymous memory or a
// named POSIX shared-memory segment ("/NAME.experts.<node>", mode 0600) that
// the dense service may map read-only. Each region is bound to its node (mbind
// through libnuma), advised for transparent huge pages, and mlock'ed; when
// RLIMIT_MEMLOCK is too low the arena warns once and carries on unlocked.
//
// Huge pages matter: decode reads ~8 scattered experts per layer, and on
// 4 KiB pages every 4 KiB of weights is a TLB miss: the worker measured
// faster on 2 MiB pages (moesplit bench, worker alone; the numbers are in
// tests/bench/README.md). Linux backs
// private memory with huge pages whenever transparent huge pages are
// "always" or "madvise", but shared memory only when
// /sys/kernel/mm/transparent_hugepage/shmem_enabled allows it (Debian's
// default is "never"). Hence ExpertMemory::kAuto below.
//
// Ownership: the arena owns its mappings (unmapped, and segments unlinked,
// on destruction). Not thread-safe while being filled; read-only afterwards.
#pragma once

#include <cstdint>
#include <istream>
#include <memory>
#include <string>
#include <utility>
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

// Where a worker serving shared memory keeps its experts.
//   kShared:  named shared segments (what a dense service needs to map them);
//   kPrivate: private anonymous memory;
//   kAuto:    shared when the kernel gives shared memory huge pages
//             (SharedMemoryHugePages()), private otherwise.
// Workers that serve gRPC only always use private memory.
enum class ExpertMemory { kAuto, kShared, kPrivate };

// "auto" | "shared" | "private"; InvalidArgument otherwise.
absl::StatusOr<ExpertMemory> ParseExpertMemory(const std::string& s);

// Whether madvise(MADV_HUGEPAGE) on a shared-memory mapping gets huge pages:
// the selected value of `shmem_enabled_text` (the contents of
// /sys/kernel/mm/transparent_hugepage/shmem_enabled, e.g.
// "always within_size advise [never] deny force") is always, within_size,
// advise or force.
bool SharedMemoryHugePages(const std::string& shmem_enabled_text);
// The same for this machine (false when the file cannot be read).
bool SharedMemoryHugePages();

// Sums the AnonHugePages and ShmemPmdMapped of the mappings in `smaps` (the
// format of /proc/PID/smaps) that start inside one of the (address, size)
// ranges.
uint64_t SmapsHugePageBytes(std::istream& smaps,
                            const std::vector<std::pair<uintptr_t, uint64_t>>& ranges);

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
  // Bytes of the regions the kernel has mapped with huge pages right now
  // (from /proc/self/smaps: AnonHugePages + ShmemPmdMapped); 0 when it
  // cannot be read.
  uint64_t HugePageBytes() const;

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
