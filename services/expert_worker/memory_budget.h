// How much memory an expert-worker may give its experts when no
// --expert-ram is set: what the process may use (its memory cgroup's limit
// less what the cgroup already uses, or MemAvailable, whichever is less),
// less a margin for everything else the worker allocates (call scratch,
// transport rings, the model's metadata, the I/O threads' buffers).
//
// cgroup v2: the process's path from the "0::" line of /proc/self/cgroup,
// limit in /sys/fs/cgroup/<path>/memory.max ("max" = none), usage in
// memory.current. cgroup v1: the path from the "memory" controller's line,
// /sys/fs/cgroup/memory/<path>/memory.limit_in_bytes (values near 2^63 =
// none) and memory.usage_in_bytes. A limit that cannot be read counts as
// none.
//
// Thread-safe: plain functions.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

namespace moesplit::worker {

struct MemoryFacts {
  uint64_t mem_available = 0;             // /proc/meminfo MemAvailable
  std::optional<uint64_t> cgroup_limit;   // none: unlimited or unreadable
  uint64_t cgroup_usage = 0;              // with a limit
};

// The margin kept back: an eighth of the usable memory, and at least 512 MiB
// or a quarter of it, whichever is less. Returns the usable memory less the
// margin (0 when nothing is left).
uint64_t DefaultExpertRam(const MemoryFacts& facts);

// Parsers for the files named above (nullopt when absent or malformed).
std::optional<uint64_t> MemAvailableFromMeminfo(const std::string& meminfo);
// The cgroup path of the process for the v1 memory controller (v1 = true)
// or the v2 unified hierarchy, from /proc/self/cgroup's text.
std::optional<std::string> CgroupPath(const std::string& proc_self_cgroup, bool v1);
// A limit file's value: "max" and v1's "unlimited" (>= 2^62) are nullopt.
std::optional<uint64_t> ParseCgroupLimit(const std::string& text);

// This process's facts (root = "/sys/fs/cgroup"; tests point it elsewhere).
MemoryFacts ReadMemoryFacts(const std::string& proc_root = "/proc",
                            const std::string& cgroup_root = "/sys/fs/cgroup");

}  // namespace moesplit::worker
