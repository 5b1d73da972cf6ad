// The /dev/shm segments of one shared-memory expert worker NAME, who owns
// them, and how a worker (or `moesplit up`, before it starts one) removes
// those a killed worker left behind.
//
// Segments of worker NAME (all mode 0600, this user's):
//   NAME               the control segment (ShmExpertServer)
//   NAME.experts.<i>   expert memory region i (worker::ExpertArena with
//                      --expert-memory shared; shard-sized)
//   NAME.c<pid>.<n>    a connection segment a client created for NAME (the
//                      client unlinks it once the worker has mapped it)
//   NAME.owner         the owner lock: an empty file the live worker holds
//                      flock(LOCK_EX) on for its whole life
//
// Ownership is the flock, not a pid: the kernel drops it when the holder
// dies, however it dies (SIGKILL included), so a process that takes the lock
// knows no live process owns NAME. A recorded pid would be fooled by pid
// reuse and means nothing across containers that share /dev/shm but not
// their PID namespace.
//
// Thread-safe: free functions; a ShmOwnerLock is owned by one thread at a
// time.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <utility>

#include "absl/status/statusor.h"

namespace moesplit::transport {

// Where POSIX shared memory lives on Linux (glibc's shm_open).
inline constexpr char kShmDir[] = "/dev/shm";

// "NAME.experts.<region>" and "NAME.c<pid>.<n>" (no leading '/').
std::string ExpertSegmentName(const std::string& worker, int region);
std::string ConnectionSegmentName(const std::string& worker, int pid, int n);

class ShmOwnerLock {
 public:
  // Takes worker `worker`'s owner lock, creating NAME.owner when missing.
  // AlreadyExists when another process (a live worker) holds it;
  // PermissionDenied when NAME.owner belongs to another user; InvalidArgument
  // for a name ValidShmName refuses; Internal for other file errors.
  static absl::StatusOr<std::unique_ptr<ShmOwnerLock>> Acquire(const std::string& worker);
  // Unlinks NAME.owner, then releases the lock.
  ~ShmOwnerLock();
  ShmOwnerLock(const ShmOwnerLock&) = delete;
  ShmOwnerLock& operator=(const ShmOwnerLock&) = delete;

  const std::string& worker() const { return worker_; }

 private:
  ShmOwnerLock(std::string worker, std::string path, int fd)
      : worker_(std::move(worker)), path_(std::move(path)), fd_(fd) {}
  const std::string worker_;
  const std::string path_;
  const int fd_;
};

struct RemovedSegments {
  int count = 0;
  uint64_t bytes = 0;  // memory they held (allocated blocks)
};

// Removes the segments of `lock.worker()` listed above (except the lock
// itself) that are regular files of this process's user. Holding the lock
// proves no live worker of that name owns them. A segment whose own name has
// a held owner lock (a live worker named e.g. "NAME.experts.0") is kept.
RemovedSegments RemoveStaleSegments(const ShmOwnerLock& lock);

// "removed 2 stale segments (1.07 GB) of shm://NAME".
std::string DescribeRemoved(const std::string& worker, const RemovedSegments& removed);

}  // namespace moesplit::transport
