// How many CPUs this process may use: the default thread count of every
// thread pool, command and service (`--threads 0`).
//
// AvailableCpuCount() = the CPUs in the process's affinity mask
// (sched_getaffinity: taskset, a cpuset cgroup, Kubernetes' static CPU
// manager), capped by the CPU bandwidth quota of its cgroup (cgroup v2
// `cpu.max` "QUOTA PERIOD" of the process's cgroup and of every ancestor; on
// cgroup v1, `cpu/cpu.cfs_quota_us` / `cpu.cfs_period_us`), rounded down, at
// least 1. A container limited to 8 CPUs on a 64-CPU node gets 8, not 64:
// more compute threads than the quota would only be throttled, and the pools'
// spinning hand-offs suffer most from that. Never the node's CPU count
// unless nothing restricts the process.
//
// Thread-safe (reads /proc and /sys at each call; callers call it once at
// start-up).
#pragma once

#include <string>

#include "absl/strings/string_view.h"

namespace moesplit {

int AvailableCpuCount();

// The parts, for tests.

// CPUs in the calling thread's affinity mask (0 when it cannot be read).
int AffinityCpuCount();

// Whole CPUs a cgroup v2 `cpu.max` line allows: "150000 100000" -> 1,
// "400000 100000" -> 4, "50000 100000" -> 1 (at least one); "max 100000",
// an empty or malformed line -> 0 (no limit).
int CpusOfCpuMax(absl::string_view cpu_max);

// Where the cgroup files are (tests point these at a fake tree).
struct CgroupFiles {
  std::string proc_self_cgroup = "/proc/self/cgroup";
  std::string cgroup_root = "/sys/fs/cgroup";
};

// The tightest CPU quota on the way from the process's cgroup to the root of
// the hierarchy, in whole CPUs; 0 when none is set (or nothing is readable).
int CgroupCpuLimit(const CgroupFiles& files);

}  // namespace moesplit
