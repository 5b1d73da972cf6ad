#include "common/base/cpu_count.h"

#include <sched.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <thread>

#include "gtest/gtest.h"

namespace moesplit {
namespace {

namespace fs = std::filesystem;

TEST(CpuCountTest, CpuMaxLines) {
  const struct {
    const char* line;
    int cpus;
  } cases[] = {
      {"max 100000\n", 0},      {"400000 100000\n", 4}, {"150000 100000", 1},
      {"50000 100000", 1},      {"200000", 2},          {"", 0},
      {"garbage 100000", 0},    {"100000 0", 0},        {"-1 100000", 0},
      {"  800000 100000  ", 8},
  };
  for (const auto& c : cases) EXPECT_EQ(CpusOfCpuMax(c.line), c.cpus) << "[" << c.line << "]";
}

// A fake /proc/self/cgroup and cgroup tree under a temporary folder.
class CgroupTreeTest : public testing::Test {
 protected:
  void SetUp() override {
    root_ = fs::path(testing::TempDir()) /
            ("cgroup_tree_" + std::to_string(reinterpret_cast<uintptr_t>(this)));
    fs::remove_all(root_);
    fs::create_directories(root_ / "sys");
    files_.proc_self_cgroup = (root_ / "proc_self_cgroup").string();
    files_.cgroup_root = (root_ / "sys").string();
  }
  void TearDown() override { fs::remove_all(root_); }
  void Write(const fs::path& rel, const std::string& text) {
    const fs::path p = rel.is_absolute() ? rel : root_ / "sys" / rel;
    fs::create_directories(p.parent_path());
    std::ofstream(p) << text;
  }
  fs::path root_;
  CgroupFiles files_;
};

TEST_F(CgroupTreeTest, V2TightestAncestorWins) {
  std::ofstream(files_.proc_self_cgroup) << "0::/kubepods/pod1/ctr\n";
  Write("cpu.max", "max 100000\n");
  Write("kubepods/cpu.max", "1600000 100000\n");
  Write("kubepods/pod1/cpu.max", "300000 100000\n");
  Write("kubepods/pod1/ctr/cpu.max", "max 100000\n");
  EXPECT_EQ(CgroupCpuLimit(files_), 3);
}

TEST_F(CgroupTreeTest, V2NamespacedRoot) {
  // In a container with its own cgroup namespace the process is at "/".
  std::ofstream(files_.proc_self_cgroup) << "0::/\n";
  Write("cpu.max", "200000 100000\n");
  EXPECT_EQ(CgroupCpuLimit(files_), 2);
}

TEST_F(CgroupTreeTest, NoLimitAnywhere) {
  std::ofstream(files_.proc_self_cgroup) << "0::/user.slice\n";
  Write("user.slice/cpu.max", "max 100000\n");
  EXPECT_EQ(CgroupCpuLimit(files_), 0);
}

TEST_F(CgroupTreeTest, MissingFilesMeanNoLimit) {
  files_.proc_self_cgroup = (root_ / "does-not-exist").string();
  EXPECT_EQ(CgroupCpuLimit(files_), 0);
}

TEST_F(CgroupTreeTest, V1CfsQuota) {
  std::ofstream(files_.proc_self_cgroup)
      << "4:memory:/docker/abc\n3:cpu,cpuacct:/docker/abc\n0::/\n";
  Write("cpu,cpuacct/docker/abc/cpu.cfs_quota_us", "250000\n");
  Write("cpu,cpuacct/docker/abc/cpu.cfs_period_us", "100000\n");
  Write("cpu,cpuacct/cpu.cfs_quota_us", "-1\n");
  Write("cpu,cpuacct/cpu.cfs_period_us", "100000\n");
  EXPECT_EQ(CgroupCpuLimit(files_), 2);
}

TEST(CpuCountTest, FollowsTheAffinityMask) {
  const int all = AffinityCpuCount();
  ASSERT_GE(all, 1);
  EXPECT_GE(AvailableCpuCount(), 1);
  EXPECT_LE(AvailableCpuCount(), all);
  // Restrict this thread to its first CPU: both counts say 1. (The mask is
  // per thread; the count reads the calling thread's.)
  std::thread([] {
    cpu_set_t set;
    CPU_ZERO(&set);
    ASSERT_EQ(sched_getaffinity(0, sizeof(set), &set), 0);
    int first = 0;
    while (!CPU_ISSET(first, &set)) ++first;
    CPU_ZERO(&set);
    CPU_SET(first, &set);
    ASSERT_EQ(sched_setaffinity(0, sizeof(set), &set), 0);
    EXPECT_EQ(AffinityCpuCount(), 1);
    EXPECT_EQ(AvailableCpuCount(), 1);
  }).join();
}

}  // namespace
}  // namespace moesplit
