// Subprocess: a child program (a moesplit service) with its stderr captured,
// for `moesplit up`, `moesplit logits --experts shm` and the process tests.
//
// The child gets SIGTERM when the parent dies (PR_SET_PDEATHSIG), so services
// started by a launcher never outlive it. The destructor stops a child still
// running (SIGTERM, then SIGKILL after 5 s) and reaps it. Not thread-safe.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <cstdio>
#include <string>
#include <vector>

#include "absl/status/status.h"

namespace moesplit {

class Subprocess {
 public:
  // Starts `binary` with `args`. `echo_stderr`: copy the child's stderr lines to
  // this process's stderr as they are read.
  Subprocess(std::string binary, std::vector<std::string> args, bool echo_stderr = false);
  ~Subprocess();
  Subprocess(const Subprocess&) = delete;
  Subprocess& operator=(const Subprocess&) = delete;

  bool started() const { return pid_ > 0; }
  pid_t pid() const { return pid_; }
  const std::string& binary() const { return binary_; }

  // Reads stderr until it contains `needle`; DeadlineExceeded after `timeout`,
  // Unavailable (with the child's last stderr) when it exits first.
  absl::Status WaitFor(const std::string& needle, std::chrono::milliseconds timeout);
  // Waits for exit, reading stderr; the exit status (128+signal when killed),
  // or -1 on timeout.
  int Wait(std::chrono::milliseconds timeout);
  // Sends a signal; Kill also reaps.
  void Signal(int sig);
  void Kill(int sig);
  // Everything read from stderr so far (reads what is pending first).
  const std::string& stderr_text();

 private:
  bool ReadSome(int timeout_ms);

  std::string binary_;
  pid_t pid_ = -1;
  int err_fd_ = -1;
  bool echo_ = false;
  std::string stderr_;
  size_t echoed_ = 0;
};

// The directory of this process's executable (to find sibling binaries).
std::string SelfDirectory();

// The threads of process `pid` now (the Threads: line of /proc/PID/status),
// -1 when it cannot be read.
int ThreadsOf(pid_t pid);

}  // namespace moesplit
