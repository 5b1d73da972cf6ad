#include "services/expert_worker/memory_budget.h"

#include <algorithm>
#include <fstream>
#include <sstream>

#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"

namespace moesplit::worker {
namespace {

std::optional<std::string> ReadText(const std::string& path) {
  std::ifstream in(path);
  if (!in) return std::nullopt;
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

}  // namespace

uint64_t DefaultExpertRam(const MemoryFacts& f) {
  uint64_t usable = f.mem_available;
  if (f.cgroup_limit.has_value()) {
    const uint64_t left = *f.cgroup_limit > f.cgroup_usage ? *f.cgroup_limit - f.cgroup_usage : 0;
    usable = std::min(usable, left);
  }
  const uint64_t margin = std::max<uint64_t>(usable / 8, std::min<uint64_t>(usable / 4, 512ull << 20));
  return usable > margin ? usable - margin : 0;
}

std::optional<uint64_t> MemAvailableFromMeminfo(const std::string& meminfo) {
  for (absl::string_view line : absl::StrSplit(meminfo, '\n')) {
    if (!absl::ConsumePrefix(&line, "MemAvailable:")) continue;
    line = absl::StripAsciiWhitespace(line);
    const bool kb = absl::ConsumeSuffix(&line, "kB");
    uint64_t v;
    if (!absl::SimpleAtoi(absl::StripAsciiWhitespace(line), &v)) return std::nullopt;
    return kb ? v * 1024 : v;
  }
  return std::nullopt;
}

std::optional<std::string> CgroupPath(const std::string& text, bool v1) {
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    // "ID:CONTROLLERS:PATH"
    std::vector<absl::string_view> f = absl::StrSplit(line, absl::MaxSplits(':', 2));
    if (f.size() != 3) continue;
    if (v1) {
      for (absl::string_view c : absl::StrSplit(f[1], ',')) {
        if (c == "memory") return std::string(f[2]);
      }
    } else if (f[0] == "0" && f[1].empty()) {
      return std::string(f[2]);
    }
  }
  return std::nullopt;
}

std::optional<uint64_t> ParseCgroupLimit(const std::string& text) {
  const absl::string_view v = absl::StripAsciiWhitespace(text);
  uint64_t n;
  if (v == "max" || !absl::SimpleAtoi(v, &n) || n >= (1ull << 62)) return std::nullopt;
  return n;
}

MemoryFacts ReadMemoryFacts(const std::string& proc_root, const std::string& cgroup_root) {
  MemoryFacts f;
  if (auto m = ReadText(proc_root + "/meminfo")) {
    f.mem_available = MemAvailableFromMeminfo(*m).value_or(0);
  }
  const std::optional<std::string> cg = ReadText(proc_root + "/self/cgroup");
  if (!cg) return f;
  auto read = [&](const std::string& dir, const char* limit, const char* usage) {
    const std::optional<std::string> l = ReadText(dir + "/" + limit);
    if (!l) return false;
    f.cgroup_limit = ParseCgroupLimit(*l);
    if (auto u = ReadText(dir + "/" + usage)) f.cgroup_usage = ParseCgroupLimit(*u).value_or(0);
    return true;
  };
  if (auto p = CgroupPath(*cg, /*v1=*/true)) {
    if (read(cgroup_root + "/memory" + *p, "memory.limit_in_bytes", "memory.usage_in_bytes")) {
      return f;
    }
  }
  if (auto p = CgroupPath(*cg, /*v1=*/false)) {
    read(cgroup_root + *p, "memory.max", "memory.current");
  }
  return f;
}

}  // namespace moesplit::worker
