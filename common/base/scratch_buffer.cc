#include "common/base/scratch_buffer.h"

#include <sys/mman.h>

#include <algorithm>
#include <cstdlib>
#include <new>

namespace moesplit {

namespace {

constexpr uint64_t kHuge = ScratchBuffer::kHugeThreshold;

// A kHuge-aligned anonymous mapping of `size` (a multiple of kHuge) bytes,
// advised for huge pages; nullptr on failure.
void* MapHugeAligned(uint64_t size) {
  // Over-map by 2 MiB so that the block can start on a 2 MiB boundary (huge
  // pages only back aligned ranges), then unmap the slack.
  const uint64_t span = size + kHuge;
  void* p = mmap(nullptr, span, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) return nullptr;
  const uintptr_t raw = reinterpret_cast<uintptr_t>(p);
  const uintptr_t start = (raw + kHuge - 1) & ~uintptr_t{kHuge - 1};
  if (start > raw) munmap(p, start - raw);
  const uintptr_t tail = raw + span - (start + size);
  if (tail > 0) munmap(reinterpret_cast<void*>(start + size), tail);
  madvise(reinterpret_cast<void*>(start), size, MADV_HUGEPAGE);  // best effort: THP may be off
  return reinterpret_cast<void*>(start);
}

uint64_t RoundToHuge(uint64_t bytes) {
  return std::max<uint64_t>(kHuge, (bytes + kHuge - 1) / kHuge * kHuge);
}

}  // namespace

std::shared_ptr<uint8_t[]> AllocateHugePageBytes(uint64_t bytes) {
  const uint64_t size = RoundToHuge(bytes);
  void* p = MapHugeAligned(size);
  if (p == nullptr) return nullptr;
  return std::shared_ptr<uint8_t[]>(static_cast<uint8_t*>(p),
                                    [size](uint8_t* q) { munmap(q, size); });
}

ScratchBuffer& ScratchBuffer::operator=(ScratchBuffer&& o) noexcept {
  if (this != &o) {
    Release();
    data_ = o.data_;
    capacity_ = o.capacity_;
    block_ = o.block_;
    mapped_bytes_ = o.mapped_bytes_;
    o.data_ = nullptr;
    o.capacity_ = 0;
    o.block_ = nullptr;
    o.mapped_bytes_ = 0;
  }
  return *this;
}

void ScratchBuffer::Release() {
  if (block_ == nullptr) return;
  if (mapped_bytes_ != 0) {
    munmap(block_, mapped_bytes_);
  } else {
    std::free(block_);
  }
  block_ = nullptr;
  data_ = nullptr;
  capacity_ = 0;
  mapped_bytes_ = 0;
}

void ScratchBuffer::Grow(uint64_t bytes) {
  Release();
  if (bytes >= kHugeThreshold) {
    const uint64_t size = RoundToHuge(bytes);
    if (void* p = MapHugeAligned(size); p != nullptr) {
      block_ = p;
      mapped_bytes_ = size;
      data_ = static_cast<uint8_t*>(block_);
      capacity_ = size;
      return;
    }
  }
  const uint64_t size = std::max<uint64_t>(64, (bytes + 63) / 64 * 64);
  block_ = std::aligned_alloc(64, size);
  if (block_ == nullptr) throw std::bad_alloc();
  data_ = static_cast<uint8_t*>(block_);
  capacity_ = size;
}

}  // namespace moesplit
