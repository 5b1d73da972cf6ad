#include "common/transport/shm_segments.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <regex>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/transport/shm_transport.h"

namespace moesplit::transport {
namespace {

std::string OwnerPath(const std::string& worker) {
  return absl::StrCat(kShmDir, "/", worker, ".owner");
}

// Whether some process holds `name`'s owner lock (false when there is none).
bool OwnerLockHeld(const std::string& name) {
  const int fd = open(OwnerPath(name).c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
  if (fd < 0) return false;
  const bool held = flock(fd, LOCK_SH | LOCK_NB) != 0 && errno == EWOULDBLOCK;
  close(fd);
  return held;
}

}  // namespace

std::string ExpertSegmentName(const std::string& worker, int region) {
  return absl::StrCat(worker, ".experts.", region);
}

std::string ConnectionSegmentName(const std::string& worker, int pid, int n) {
  return absl::StrCat(worker, ".c", pid, ".", n);
}

absl::StatusOr<std::unique_ptr<ShmOwnerLock>> ShmOwnerLock::Acquire(const std::string& worker) {
  if (!ValidShmName(worker)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "shm name '", worker, "' must be 1-64 characters of [A-Za-z0-9_.-]"));
  }
  const std::string path = OwnerPath(worker);
  // The holder unlinks the file before it lets go, so a lock taken on a file
  // that is no longer the one at `path` is worthless: open again.
  for (int attempt = 0; attempt < 16; ++attempt) {
    const int fd = open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
    if (fd < 0) {
      const int err = errno;
      if (err == EACCES) {
        return absl::PermissionDeniedError(absl::StrCat(
            path, " belongs to another user: shm://", worker, " is not this user's to serve"));
      }
      return absl::InternalError(absl::StrCat("cannot open ", path, ": ", std::strerror(err)));
    }
    struct stat held;
    if (fstat(fd, &held) != 0 || held.st_uid != geteuid()) {
      close(fd);
      return absl::PermissionDeniedError(absl::StrCat(
          path, " belongs to another user: shm://", worker, " is not this user's to serve"));
    }
    if (flock(fd, LOCK_EX | LOCK_NB) != 0) {
      const int err = errno;
      close(fd);
      if (err == EWOULDBLOCK) {
        return absl::AlreadyExistsError(absl::StrCat(
            "another expert worker is serving shm://", worker, " (it holds ", path, ")"));
      }
      return absl::InternalError(absl::StrCat("cannot lock ", path, ": ", std::strerror(err)));
    }
    struct stat now;
    if (stat(path.c_str(), &now) == 0 && now.st_ino == held.st_ino && now.st_dev == held.st_dev) {
      return std::unique_ptr<ShmOwnerLock>(new ShmOwnerLock(worker, path, fd));
    }
    close(fd);
  }
  return absl::InternalError(absl::StrCat(path, " keeps being replaced; cannot take it"));
}

ShmOwnerLock::~ShmOwnerLock() {
  unlink(path_.c_str());
  close(fd_);
}

RemovedSegments RemoveStaleSegments(const ShmOwnerLock& lock) {
  RemovedSegments removed;
  const std::string& w = lock.worker();
  // ValidShmName allows '.', the only regex metacharacter in a name.
  std::string quoted;
  for (char c : w) {
    if (c == '.') quoted += '\\';
    quoted += c;
  }
  const std::regex mine(quoted + R"((|\.experts\.[0-9]+|\.c[0-9]+\.[0-9]+))");
  DIR* dir = opendir(kShmDir);
  if (dir == nullptr) return removed;
  while (const dirent* e = readdir(dir)) {
    const std::string name = e->d_name;
    if (!std::regex_match(name, mine)) continue;
    const std::string path = absl::StrCat(kShmDir, "/", name);
    struct stat st;
    if (lstat(path.c_str(), &st) != 0 || !S_ISREG(st.st_mode) || st.st_uid != geteuid()) continue;
    if (name != w && OwnerLockHeld(name)) continue;  // a live worker's control segment
    if (unlink(path.c_str()) != 0) continue;
    ++removed.count;
    removed.bytes += static_cast<uint64_t>(st.st_blocks) * 512;
  }
  closedir(dir);
  return removed;
}

std::string DescribeRemoved(const std::string& worker, const RemovedSegments& removed) {
  return absl::StrFormat("removed %d stale segment%s (%.2f GB) of shm://%s", removed.count,
                         removed.count == 1 ? "" : "s", removed.bytes / 1e9, worker);
}

}  // namespace moesplit::transport
