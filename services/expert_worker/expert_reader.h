// ExpertReader: how the expert-worker's RAM tier (expert_tier.h) reads an
// expert's bytes from the model file when they are not resident. The tier
// only ever reads through this interface, so tests replace it to inject read
// errors and short reads (the leveldb Env / fault-injection seam).
//
// DirectFileReader, the real one, reads with O_DIRECT into 4 KiB-aligned
// bounce buffers (the expert's bytes need not be aligned in the GGUF), so the
// page cache is not a second cache beside the tier's slots and a worker inside
// a memory limit is not charged for it. Where the file system refuses O_DIRECT
// (tmpfs, some overlay set-ups) it falls back to buffered preads followed by
// posix_fadvise(DONTNEED) of the range read. Files are opened once and kept.
//
// Errors name the file and the offset: UNAVAILABLE for an I/O error (EIO,
// a file that cannot be opened), DATA_LOSS for a read past the end (a
// truncated file).
//
// Thread-safety: Read() may be called from many threads at once (that is
// the tier's deep queue: one outstanding pread per I/O thread).
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"

namespace moesplit::worker {

class ExpertReader {
 public:
  virtual ~ExpertReader() = default;
  // Reads bytes [offset, offset + size) of `path` into dst[0, size). On
  // error dst is unspecified.
  virtual absl::Status Read(const std::string& path, uint64_t offset, uint64_t size,
                            uint8_t* dst) = 0;
};

class DirectFileReader final : public ExpertReader {
 public:
  DirectFileReader() = default;
  ~DirectFileReader() override;

  absl::Status Read(const std::string& path, uint64_t offset, uint64_t size,
                    uint8_t* dst) override;

  // Whether the last file opened accepted O_DIRECT (for the start-up line).
  bool direct() const;

 private:
  struct File {
    int fd = -1;
    bool direct = false;
  };
  absl::Status Open(const std::string& path, File* out);

  mutable std::mutex mu_;
  absl::flat_hash_map<std::string, File> files_;  // guarded by mu_
  bool last_direct_ = false;                      // guarded by mu_
};

}  // namespace moesplit::worker
