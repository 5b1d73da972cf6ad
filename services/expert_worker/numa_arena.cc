#include "services/expert_worker/numa_arena.h"

#include <fcntl.h>
#include <numa.h>
#include <pthread.h>
#include <sched.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

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
      r.shm_name = absl::StrFormat("/%s.experts.%d", shm_prefix, i);
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
