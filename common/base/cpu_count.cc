#include "common/base/cpu_count.h"

#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <fstream>
#include <sstream>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"

namespace moesplit {
namespace {

// The whole file, or "" when it cannot be read.
std::string ReadSmallFile(const std::string& path) {
  std::ifstream in(path);
  if (!in) return "";
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// Whole CPUs of quota/period (at least 1), 0 for "no limit" or bad values.
int CpusOfQuota(int64_t quota, int64_t period) {
  if (quota <= 0 || period <= 0) return 0;
  return static_cast<int>(std::max<int64_t>(1, quota / period));
}

// The cgroup paths (relative to the hierarchy's mount point) from the
// process's cgroup up to the root: "a/b" -> {"a/b", "a", ""}.
std::vector<std::string> SelfAndAncestors(absl::string_view path) {
  std::vector<std::string> out;
  std::string p(absl::StripSuffix(absl::StripPrefix(path, "/"), "/"));
  // A path outside our view of the hierarchy (another cgroup namespace).
  if (p.find("..") != std::string::npos) p.clear();
  for (;;) {
    out.push_back(p);
    if (p.empty()) break;
    const size_t slash = p.rfind('/');
    p = slash == std::string::npos ? "" : p.substr(0, slash);
  }
  return out;
}

// The tightest limit (> 0) of the files `leaf` under each of `dirs`, read
// with `cpus_of`; 0 when none.
template <typename F>
int TightestLimit(const std::string& base, const std::vector<std::string>& dirs, F cpus_of) {
  int best = 0;
  for (const std::string& d : dirs) {
    const int c = cpus_of(d.empty() ? base : base + "/" + d);
    if (c > 0 && (best == 0 || c < best)) best = c;
  }
  return best;
}

// cgroup v1: cpu.cfs_quota_us (-1: none) over cpu.cfs_period_us in `dir`.
int CpusOfCfsQuota(const std::string& dir) {
  int64_t quota = 0, period = 0;
  if (!absl::SimpleAtoi(absl::StripAsciiWhitespace(ReadSmallFile(dir + "/cpu.cfs_quota_us")),
                        &quota) ||
      !absl::SimpleAtoi(absl::StripAsciiWhitespace(ReadSmallFile(dir + "/cpu.cfs_period_us")),
                        &period)) {
    return 0;
  }
  return CpusOfQuota(quota, period);
}

}  // namespace

int AffinityCpuCount() {
  // Masks larger than cpu_set_t (more than 1024 CPUs) need CPU_ALLOC.
  for (int n = 1024; n <= (1 << 16); n *= 2) {
    cpu_set_t* set = CPU_ALLOC(n);
    if (set == nullptr) return 0;
    const size_t size = CPU_ALLOC_SIZE(n);
    CPU_ZERO_S(size, set);
    if (sched_getaffinity(0, size, set) == 0) {
      const int count = CPU_COUNT_S(size, set);
      CPU_FREE(set);
      return count;
    }
    CPU_FREE(set);
    if (errno != EINVAL) return 0;
  }
  return 0;
}

int CpusOfCpuMax(absl::string_view cpu_max) {
  std::vector<absl::string_view> parts =
      absl::StrSplit(absl::StripAsciiWhitespace(cpu_max), ' ', absl::SkipEmpty());
  if (parts.empty() || parts[0] == "max") return 0;
  int64_t quota = 0, period = 100000;
  if (!absl::SimpleAtoi(parts[0], &quota)) return 0;
  if (parts.size() > 1 && !absl::SimpleAtoi(parts[1], &period)) return 0;
  return CpusOfQuota(quota, period);
}

int CgroupCpuLimit(const CgroupFiles& files) {
  // /proc/self/cgroup: "0::/path" (v2), "N:cpu,cpuacct:/path" (v1).
  std::string v2_path, v1_path;
  bool v2 = false, v1 = false;
  for (absl::string_view line : absl::StrSplit(ReadSmallFile(files.proc_self_cgroup), '\n')) {
    std::vector<absl::string_view> f = absl::StrSplit(line, absl::MaxSplits(':', 2));
    if (f.size() != 3) continue;
    if (f[0] == "0" && f[1].empty()) {
      v2 = true;
      v2_path = std::string(f[2]);
    }
    for (absl::string_view c : absl::StrSplit(f[1], ',')) {
      if (c == "cpu") {
        v1 = true;
        v1_path = std::string(f[2]);
      }
    }
  }
  int limit = 0;
  if (v2) {
    limit = TightestLimit(files.cgroup_root, SelfAndAncestors(v2_path), [](const std::string& d) {
      return CpusOfCpuMax(ReadSmallFile(d + "/cpu.max"));
    });
  }
  if (limit == 0 && v1) {
    for (const char* mount : {"/cpu", "/cpu,cpuacct", "/cpuacct,cpu"}) {
      limit = TightestLimit(files.cgroup_root + mount, SelfAndAncestors(v1_path), CpusOfCfsQuota);
      if (limit > 0) break;
    }
  }
  return limit;
}

int AvailableCpuCount() {
  int n = AffinityCpuCount();
  if (n <= 0) n = static_cast<int>(sysconf(_SC_NPROCESSORS_ONLN));
  const int quota = CgroupCpuLimit(CgroupFiles{});
  if (quota > 0) n = std::min(n, quota);
  return std::max(1, n);
}

}  // namespace moesplit
