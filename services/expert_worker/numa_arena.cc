#include "services/expert_worker/numa_arena.h"

#include <fcntl.h>
#include <numa.h>
#include <pthread.h>
#include <sched.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/transport/shm_segments.h"

namespace moesplit::worker {

absl::StatusOr<NumaPolicy> ParseNumaPolicy(const std::string& s) {
  NumaPolicy p;
  if (s == "auto") return p;
  if (s == "off") {
    p.mode = NumaPolicy::Mode::kOff;
    return p;
  }
  int node;
  if (absl::SimpleAtoi(s, &node) && node >= 0) {
    p.mode = NumaPolicy::Mode::kNode;
    p.node = node;
    return p;
  }
  return absl::InvalidArgumentError(
      absl::StrCat("--numa must be auto, off or a node number, got '", s, "'"));
}

absl::StatusOr<ExpertMemory> ParseExpertMemory(const std::string& s) {
  if (s == "auto") return ExpertMemory::kAuto;
  if (s == "shared") return ExpertMemory::kShared;
  if (s == "private") return ExpertMemory::kPrivate;
  return absl::InvalidArgumentError(
      absl::StrCat("--expert-memory must be auto, shared or private, got '", s, "'"));
}

bool SharedMemoryHugePages(const std::string& shmem_enabled_text) {
  const size_t open = shmem_enabled_text.find('[');
  const size_t close = shmem_enabled_text.find(']', open);
  if (open == std::string::npos || close == std::string::npos) return false;
  const std::string selected = shmem_enabled_text.substr(open + 1, close - open - 1);
  return selected == "always" || selected == "within_size" || selected == "advise" ||
         selected == "force";
}

bool SharedMemoryHugePages() {
  std::ifstream in("/sys/kernel/mm/transparent_hugepage/shmem_enabled");
  std::string text;
  if (!in || !std::getline(in, text)) return false;
  return SharedMemoryHugePages(text);
}

std::vector<int> NumaNodesFor(const NumaPolicy& policy) {
  if (policy.mode == NumaPolicy::Mode::kOff || numa_available() < 0) return {-1};
  if (policy.mode == NumaPolicy::Mode::kNode) return {policy.node};
  std::vector<int> nodes;
  const int max = numa_max_node();
  for (int n = 0; n <= max; ++n) {
    if (numa_bitmask_isbitset(numa_all_nodes_ptr, n)) nodes.push_back(n);
  }
  if (nodes.empty()) nodes.push_back(-1);
  return nodes;
}

std::vector<int> CpusOfNode(int node) {
  std::vector<int> cpus;
  const int n_cpus = static_cast<int>(sysconf(_SC_NPROCESSORS_ONLN));
  if (node < 0 || numa_available() < 0) {
    for (int c = 0; c < n_cpus; ++c) cpus.push_back(c);
    return cpus;
  }
  struct bitmask* mask = numa_allocate_cpumask();
  if (numa_node_to_cpus(node, mask) == 0) {
    for (int c = 0; c < static_cast<int>(mask->size) && c < n_cpus * 4; ++c) {
      if (numa_bitmask_isbitset(mask, c)) cpus.push_back(c);
    }
  }
  numa_free_cpumask(mask);
  return cpus;
}

void PinCurrentThread(const std::vector<int>& cpus) {
  if (cpus.empty()) return;
  cpu_set_t set;
  CPU_ZERO(&set);
  for (int c : cpus) {
    if (c < CPU_SETSIZE) CPU_SET(c, &set);
  }
  pthread_setaffinity_np(pthread_self(), sizeof(set), &set);
}

absl::StatusOr<std::unique_ptr<ExpertArena>> ExpertArena::Create(
    const std::vector<int>& nodes, const std::vector<uint64_t>& sizes,
    const std::string& shm_prefix) {
  std::unique_ptr<ExpertArena> arena(new ExpertArena());
  const uint64_t page = 2ull << 20;  // round to huge pages
  for (size_t i = 0; i < nodes.size(); ++i) {
    ArenaRegion r;
    r.node = nodes[i];
    r.size = std::max<uint64_t>(page, (sizes[i] + page - 1) / page * page);
    void* p = MAP_FAILED;
    if (!shm_prefix.empty()) {
      r.shm_name = "/" + transport::ExpertSegmentName(shm_prefix, static_cast<int>(i));
      shm_unlink(r.shm_name.c_str());
      const int fd = shm_open(r.shm_name.c_str(), O_CREAT | O_EXCL | O_RDWR, 0600);
      if (fd < 0 || ftruncate(fd, static_cast<off_t>(r.size)) != 0) {
        const int err = errno;
        if (fd >= 0) close(fd);
        return absl::ResourceExhaustedError(absl::StrCat(
            "cannot create expert segment ", r.shm_name, " of ", r.size, " bytes: ",
            std::strerror(err), " (is /dev/shm large enough? docker: shm_size)"));
      }
      p = mmap(nullptr, r.size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
      close(fd);
    } else {
      p = mmap(nullptr, r.size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    }
    if (p == MAP_FAILED) {
      return absl::ResourceExhaustedError(
          absl::StrCat("cannot map ", r.size, " bytes of expert memory: ", std::strerror(errno)));
    }
    r.data = static_cast<uint8_t*>(p);
    r.huge_pages = madvise(p, r.size, MADV_HUGEPAGE) == 0;
    if (r.node >= 0) numa_tonode_memory(p, r.size, r.node);
    arena->regions_.push_back(r);
  }
  return arena;
}

std::string ExpertArena::LockAll() {
  std::string warning;
  for (auto& r : regions_) {
    if (r.locked) continue;
    if (mlock(r.data, r.size) == 0) {
      r.locked = true;
    } else if (warning.empty()) {
      struct rlimit lim;
      getrlimit(RLIMIT_MEMLOCK, &lim);
      warning = absl::StrFormat(
          "cannot mlock %d bytes of expert memory (%s; RLIMIT_MEMLOCK is %d bytes): experts may "
          "be swapped out. Raise it with `ulimit -l unlimited` or docker's `ulimits: memlock: -1`",
          r.size, std::strerror(errno), lim.rlim_cur);
    }
  }
  return warning;
}

uint64_t SmapsHugePageBytes(std::istream& smaps,
                            const std::vector<std::pair<uintptr_t, uint64_t>>& ranges) {
  uint64_t total = 0;
  bool inside = false;  // the current mapping starts within a range
  std::string line;
  while (std::getline(smaps, line)) {
    unsigned long long lo = 0, hi = 0;
    if (std::sscanf(line.c_str(), "%llx-%llx ", &lo, &hi) == 2) {  // a mapping's header
      inside = false;
      for (const auto& [base, size] : ranges) {
        if (lo >= base && lo < base + size) inside = true;
      }
      continue;
    }
    if (!inside) continue;
    unsigned long long kb = 0;
    if (std::sscanf(line.c_str(), "AnonHugePages: %llu kB", &kb) == 1 ||
        std::sscanf(line.c_str(), "ShmemPmdMapped: %llu kB", &kb) == 1) {
      total += kb * 1024;
    }
  }
  return total;
}

uint64_t ExpertArena::HugePageBytes() const {
  std::ifstream in("/proc/self/smaps");
  if (!in) return 0;
  std::vector<std::pair<uintptr_t, uint64_t>> ranges;
  for (const ArenaRegion& r : regions_) ranges.emplace_back(reinterpret_cast<uintptr_t>(r.data), r.size);
  return SmapsHugePageBytes(in, ranges);
}

uint64_t ExpertArena::total_bytes() const {
  uint64_t t = 0;
  for (const auto& r : regions_) t += r.size;
  return t;
}

ExpertArena::~ExpertArena() {
  for (auto& r : regions_) {
    if (r.data != nullptr) munmap(r.data, r.size);
    if (!r.shm_name.empty()) shm_unlink(r.shm_name.c_str());
  }
}

}  // namespace moesplit::worker
