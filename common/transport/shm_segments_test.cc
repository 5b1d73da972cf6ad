#include "common/transport/shm_segments.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"

namespace moesplit::transport {
namespace {

std::string Path(const std::string& name) { return absl::StrCat(kShmDir, "/", name); }

bool Exists(const std::string& name) {
  struct stat st;
  return stat(Path(name).c_str(), &st) == 0;
}

// A 0600 segment with `bytes` written into it.
void MakeSegment(const std::string& name, size_t bytes) {
  const int fd = open(Path(name).c_str(), O_RDWR | O_CREAT | O_TRUNC, 0600);
  ASSERT_GE(fd, 0) << name;
  const std::string data(bytes, 'x');
  ASSERT_EQ(write(fd, data.data(), data.size()), static_cast<ssize_t>(data.size()));
  close(fd);
}

std::string UniqueName(const char* what) {
  return absl::StrCat("moesplit-segtest-", getpid(), "-", what);
}

TEST(ShmOwnerLockTest, OneHolderAtATimeAndTheFileGoesWithIt) {
  const std::string w = UniqueName("lock");
  auto first = ShmOwnerLock::Acquire(w);
  ASSERT_TRUE(first.ok()) << first.status();
  EXPECT_TRUE(Exists(w + ".owner"));
  auto second = ShmOwnerLock::Acquire(w);
  EXPECT_EQ(second.status().code(), absl::StatusCode::kAlreadyExists) << second.status();
  first->reset();
  EXPECT_FALSE(Exists(w + ".owner"));
  auto third = ShmOwnerLock::Acquire(w);
  EXPECT_TRUE(third.ok()) << third.status();
  EXPECT_EQ(ShmOwnerLock::Acquire("bad/name").status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(ShmOwnerLockTest, AKilledHoldersSegmentsAreRemovedAndNothingElse) {
  const std::string w = UniqueName("dead");
  const std::vector<std::string> stale = {w, ExpertSegmentName(w, 0), ExpertSegmentName(w, 1),
                                          ConnectionSegmentName(w, 12345, 0)};
  // Names that are not w's: another worker's prefix, a lookalike suffix,
  // and a live worker whose name happens to extend w's.
  const std::vector<std::string> others = {w + "x", w + "x.experts.0", w + ".expertsX",
                                           w + ".c12.x", w + ".experts.2.extra",
                                           ExpertSegmentName(w, 7)};
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    // A worker that takes its lock, makes its segments and dies by SIGKILL.
    auto lock = ShmOwnerLock::Acquire(w);
    if (!lock.ok()) _exit(3);
    MakeSegment(stale[0], 64);
    MakeSegment(stale[1], 1 << 20);
    MakeSegment(stale[2], 4096);
    MakeSegment(stale[3], 100);
    raise(SIGKILL);
    _exit(4);
  }
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL) << status;
  for (const auto& s : stale) ASSERT_TRUE(Exists(s)) << s << " should outlive its killed owner";
  for (const auto& s : others) MakeSegment(s, 10);
  // The live worker named "<w>.experts.7" holds its own lock.
  auto live = ShmOwnerLock::Acquire(ExpertSegmentName(w, 7));
  ASSERT_TRUE(live.ok()) << live.status();

  auto lock = ShmOwnerLock::Acquire(w);
  ASSERT_TRUE(lock.ok()) << "the dead owner's lock must be free: " << lock.status();
  const RemovedSegments removed = RemoveStaleSegments(**lock);
  EXPECT_EQ(removed.count, 4);
  EXPECT_GE(removed.bytes, (1u << 20) + 4096u);
  for (const auto& s : stale) EXPECT_FALSE(Exists(s)) << s;
  for (const auto& s : others) {
    EXPECT_TRUE(Exists(s)) << s << " is not " << w << "'s";
    unlink(Path(s).c_str());
  }
  EXPECT_EQ(DescribeRemoved(w, removed).rfind("removed 4 stale segments (0.00 GB) of shm://", 0),
            0u)
      << DescribeRemoved(w, removed);
}

}  // namespace
}  // namespace moesplit::transport
