#include "services/expert_worker/expert_reader.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>

#include "absl/strings/str_cat.h"

namespace moesplit::worker {
namespace {

constexpr uint64_t kAlign = 4096;
// One pread moves at most this much: big enough that a K-quant expert matrix
// of a large model (8 MiB for DeepSeek-V3's Q4_K gate) is one or two requests.
constexpr uint64_t kBounceBytes = 8u << 20;

struct Bounce {
  uint8_t* data = nullptr;
  uint64_t size = 0;
  ~Bounce() { std::free(data); }
};

// This thread's aligned buffer, grown to `want` (at most kBounceBytes): an
// I/O thread holds about its largest read, not 8 MiB each.
uint8_t* ThreadBounce(uint64_t want) {
  thread_local Bounce b;
  want = std::min(kBounceBytes, (want + kAlign - 1) / kAlign * kAlign);
  if (b.size < want) {
    std::free(b.data);
    b.data = static_cast<uint8_t*>(std::aligned_alloc(kAlign, want));
    b.size = b.data != nullptr ? want : 0;
  }
  return b.data;
}

}  // namespace

DirectFileReader::~DirectFileReader() {
  for (auto& [path, f] : files_) close(f.fd);
}

bool DirectFileReader::direct() const {
  std::lock_guard<std::mutex> lock(mu_);
  return last_direct_;
}

absl::Status DirectFileReader::Open(const std::string& path, File* out) {
  std::lock_guard<std::mutex> lock(mu_);
  if (auto it = files_.find(path); it != files_.end()) {
    *out = it->second;
    return absl::OkStatus();
  }
  File f;
  f.fd = open(path.c_str(), O_RDONLY | O_DIRECT | O_CLOEXEC);
  f.direct = f.fd >= 0;
  if (f.fd < 0 && errno == EINVAL) f.fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (f.fd < 0) {
    return absl::UnavailableError(
        absl::StrCat(path, ": cannot open for expert reads: ", std::strerror(errno)));
  }
  files_[path] = f;
  last_direct_ = f.direct;
  *out = f;
  return absl::OkStatus();
}

absl::Status DirectFileReader::Read(const std::string& path, uint64_t offset, uint64_t size,
                                    uint8_t* dst) {
  File f;
  if (absl::Status s = Open(path, &f); !s.ok()) return s;
  auto failed = [&](uint64_t at, const char* why) {
    return absl::UnavailableError(absl::StrCat(path, ": reading ", size, " bytes at offset ",
                                               offset, " failed at offset ", at, ": ", why));
  };
  auto truncated = [&](uint64_t at) {
    struct stat st;
    const uint64_t length = fstat(f.fd, &st) == 0 ? static_cast<uint64_t>(st.st_size) : at;
    return absl::DataLossError(absl::StrCat(path, ": reading ", size, " bytes at offset ", offset,
                                            ": the file ends at offset ", length,
                                            " (truncated?)"));
  };
  if (!f.direct) {
    uint64_t done = 0;
    while (done < size) {
      const ssize_t n = pread(f.fd, dst + done, size - done, static_cast<off_t>(offset + done));
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) return failed(offset + done, std::strerror(errno));
      if (n == 0) return truncated(offset + done);
      done += static_cast<uint64_t>(n);
    }
    posix_fadvise(f.fd, static_cast<off_t>(offset), static_cast<off_t>(size), POSIX_FADV_DONTNEED);
    return absl::OkStatus();
  }
  // Aligned windows of at most kBounceBytes covering [offset, offset + size).
  const uint64_t bounce_bytes =
      std::min(kBounceBytes, (offset % kAlign + size + kAlign - 1) / kAlign * kAlign);
  uint8_t* bounce = ThreadBounce(bounce_bytes);
  if (bounce == nullptr) return absl::ResourceExhaustedError("no memory for a read buffer");
  uint64_t pos = offset;  // next byte wanted
  const uint64_t end = offset + size;
  while (pos < end) {
    const uint64_t start = pos / kAlign * kAlign;
    const uint64_t want = std::min<uint64_t>(bounce_bytes, (end - start + kAlign - 1) / kAlign * kAlign);
    ssize_t n;
    do {
      n = pread(f.fd, bounce, want, static_cast<off_t>(start));
    } while (n < 0 && errno == EINTR);
    if (n < 0) return failed(start, std::strerror(errno));
    const uint64_t got_end = start + static_cast<uint64_t>(n);
    if (got_end <= pos) return truncated(got_end);
    const uint64_t copy_end = std::min(end, got_end);
    std::memcpy(dst + (pos - offset), bounce + (pos - start), copy_end - pos);
    pos = copy_end;
    if (pos < end && static_cast<uint64_t>(n) < want) return truncated(got_end);
  }
  return absl::OkStatus();
}

}  // namespace moesplit::worker
