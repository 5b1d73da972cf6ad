#include "common/base/subprocess.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <climits>
#include <cstdlib>
#include <fstream>
#include <cstring>

#include "absl/strings/str_cat.h"

namespace moesplit {

Subprocess::Subprocess(std::string binary, std::vector<std::string> args, bool echo_stderr)
    : binary_(std::move(binary)), echo_(echo_stderr) {
  int fds[2];
  if (pipe2(fds, O_CLOEXEC) != 0) return;
  std::vector<std::string> all = {binary_};
  all.insert(all.end(), args.begin(), args.end());
  std::vector<char*> argv;
  for (auto& a : all) argv.push_back(a.data());
  argv.push_back(nullptr);
  const pid_t parent = getpid();
  pid_ = fork();
  if (pid_ == 0) {
    prctl(PR_SET_PDEATHSIG, SIGTERM);
    if (getppid() != parent) _exit(127);
    dup2(fds[1], 2);
    execv(binary_.c_str(), argv.data());
    const std::string msg = absl::StrCat("cannot run ", binary_, ": ", std::strerror(errno), "\n");
    (void)!write(2, msg.data(), msg.size());
    _exit(127);
  }
  close(fds[1]);
  if (pid_ < 0) {
    close(fds[0]);
    return;
  }
  err_fd_ = fds[0];
}

Subprocess::~Subprocess() {
  // A service cleans up (shared segments) on SIGTERM; give it a moment.
  if (pid_ > 0) {
    Signal(SIGTERM);
    if (Wait(std::chrono::seconds(5)) < 0) Kill(SIGKILL);
  }
  if (err_fd_ >= 0) close(err_fd_);
}

bool Subprocess::ReadSome(int timeout_ms) {
  if (err_fd_ < 0) return false;
  pollfd p{err_fd_, POLLIN, 0};
  if (poll(&p, 1, timeout_ms) <= 0) return false;
  char buf[4096];
  const ssize_t n = read(err_fd_, buf, sizeof buf);
  if (n <= 0) return false;
  stderr_.append(buf, n);
  if (echo_) {
    const size_t end = stderr_.rfind('\n');
    if (end != std::string::npos && end + 1 > echoed_) {
      std::fwrite(stderr_.data() + echoed_, 1, end + 1 - echoed_, stderr);
      echoed_ = end + 1;
    }
  }
  return true;
}

absl::Status Subprocess::WaitFor(const std::string& needle, std::chrono::milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (stderr_.find(needle) == std::string::npos) {
    int status;
    if (pid_ > 0 && waitpid(pid_, &status, WNOHANG) == pid_) {
      while (ReadSome(20)) {
      }
      pid_ = -1;
      std::string tail = stderr_.size() > 2000 ? stderr_.substr(stderr_.size() - 2000) : stderr_;
      while (!tail.empty() && tail.back() == '\n') tail.pop_back();
      return absl::UnavailableError(absl::StrCat(binary_, " exited (status ",
                                                 WIFEXITED(status) ? WEXITSTATUS(status) : -1,
                                                 "): ", tail));
    }
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
                          deadline - std::chrono::steady_clock::now())
                          .count();
    if (left <= 0) {
      return absl::DeadlineExceededError(
          absl::StrCat(binary_, " did not print '", needle, "' within ", timeout.count(), " ms"));
    }
    ReadSome(static_cast<int>(std::min<int64_t>(left, 100)));
  }
  return absl::OkStatus();
}

int Subprocess::Wait(std::chrono::milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (pid_ > 0 && std::chrono::steady_clock::now() < deadline) {
    int status;
    if (waitpid(pid_, &status, WNOHANG) == pid_) {
      while (ReadSome(20)) {
      }
      pid_ = -1;
      return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    }
    ReadSome(50);
  }
  return -1;
}

void Subprocess::Signal(int sig) {
  if (pid_ > 0) kill(pid_, sig);
}

void Subprocess::Kill(int sig) {
  if (pid_ <= 0) return;
  kill(pid_, sig);
  int status;
  waitpid(pid_, &status, 0);
  pid_ = -1;
}

const std::string& Subprocess::stderr_text() {
  while (ReadSome(0)) {
  }
  return stderr_;
}

std::string SelfDirectory() {
  char buf[PATH_MAX];
  const ssize_t n = readlink("/proc/self/exe", buf, sizeof buf - 1);
  if (n <= 0) return ".";
  std::string path(buf, n);
  return path.substr(0, path.rfind('/'));
}

int ThreadsOf(pid_t pid) {
  std::ifstream f(absl::StrCat("/proc/", pid, "/status"));
  std::string line;
  while (std::getline(f, line)) {
    if (line.rfind("Threads:", 0) == 0) return std::atoi(line.c_str() + 8);
  }
  return -1;
}

}  // namespace moesplit
