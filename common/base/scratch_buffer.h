// ScratchBuffer: a growable, 64-byte aligned, uninitialised buffer for the
// hot paths' working memory (expert call intermediates, forward-pass
// workspaces).
//
// Buffers of kHugeThreshold bytes or more are mapped anonymously, rounded up
// to 2 MiB and advised MADV_HUGEPAGE. Two reasons, both measured on the
// VMs we run on: the first touch of fresh memory costs one fault per page
// (10-20 us each under a hypervisor; what that cost a 512-token expert
// call is in tests/bench/README.md), and later passes
// over tens of MB miss the TLB less on 2 MiB pages. Where transparent huge
// pages are off the mapping still works, on 4 KiB pages. Smaller buffers come
// from the heap.
//
// Get(n) returns at least n bytes; it only ever grows, and growing does not
// keep the old contents. Not thread-safe: one owner (one thread at a time).

#ifndef MOESPLIT_COMMON_BASE_SCRATCH_BUFFER_H_
#define MOESPLIT_COMMON_BASE_SCRATCH_BUFFER_H_

#include <cstddef>
#include <cstdint>
#include <memory>

namespace moesplit {

// `bytes` bytes on a 2 MiB-aligned anonymous mapping advised MADV_HUGEPAGE
// (rounded up to 2 MiB; zero-filled), unmapped when the last owner goes; for
// long-lived bulk data read at memory speed, like a copy of the routed
// experts. nullptr when the memory cannot be had.
std::shared_ptr<uint8_t[]> AllocateHugePageBytes(uint64_t bytes);

class ScratchBuffer {
 public:
  static constexpr uint64_t kHugeThreshold = 2ull << 20;

  ScratchBuffer() = default;
  ~ScratchBuffer() { Release(); }
  ScratchBuffer(ScratchBuffer&& o) noexcept { *this = static_cast<ScratchBuffer&&>(o); }
  ScratchBuffer& operator=(ScratchBuffer&& o) noexcept;
  ScratchBuffer(const ScratchBuffer&) = delete;
  ScratchBuffer& operator=(const ScratchBuffer&) = delete;

  // At least `bytes` bytes (64-byte aligned; never null, also for 0).
  // Throws std::bad_alloc when the memory cannot be had, like operator new.
  uint8_t* Get(uint64_t bytes) {
    if (bytes > capacity_ || data_ == nullptr) Grow(bytes);
    return data_;
  }
  // At least n objects of trivial type T.
  template <typename T>
  T* As(uint64_t n) {
    return reinterpret_cast<T*>(Get(n * sizeof(T)));
  }

  uint8_t* data() const { return data_; }
  uint64_t capacity() const { return capacity_; }
  // Whether the current block is a huge-page-advised mapping.
  bool mapped() const { return mapped_bytes_ != 0; }

 private:
  void Grow(uint64_t bytes);
  void Release();

  uint8_t* data_ = nullptr;
  uint64_t capacity_ = 0;
  void* block_ = nullptr;      // what to free: heap block or mapping
  uint64_t mapped_bytes_ = 0;  // non-zero: block_ is a mapping of this size
};

}  // namespace moesplit

#endif  // MOESPLIT_COMMON_BASE_SCRATCH_BUFFER_H_
