// AlignedAllocator<T, kAlign>: an allocator for standard containers whose
// storage must start on a kAlign-byte boundary, e.g. buffers written with
// non-temporal stores of whole cache lines (the DeltaNet recurrent state).
// CacheAlignedVector<T> is a std::vector on 64-byte (cache-line) storage.
#ifndef MOESPLIT_COMMON_BASE_ALIGNED_ALLOCATOR_H_
#define MOESPLIT_COMMON_BASE_ALIGNED_ALLOCATOR_H_

#include <cstddef>
#include <new>
#include <vector>

namespace moesplit {

template <typename T, std::size_t kAlign>
struct AlignedAllocator {
  static_assert(kAlign >= alignof(T) && (kAlign & (kAlign - 1)) == 0,
                "a power of two no smaller than the type's alignment");
  using value_type = T;
  template <typename U>
  struct rebind {
    using other = AlignedAllocator<U, kAlign>;
  };

  AlignedAllocator() noexcept = default;
  template <typename U>
  AlignedAllocator(const AlignedAllocator<U, kAlign>&) noexcept {}  // NOLINT: rebinding

  T* allocate(std::size_t n) {
    return static_cast<T*>(::operator new(n * sizeof(T), std::align_val_t(kAlign)));
  }
  void deallocate(T* p, std::size_t n) noexcept {
    ::operator delete(p, n * sizeof(T), std::align_val_t(kAlign));
  }

  template <typename U>
  bool operator==(const AlignedAllocator<U, kAlign>&) const noexcept {
    return true;
  }
};

template <typename T>
using CacheAlignedVector = std::vector<T, AlignedAllocator<T, 64>>;

}  // namespace moesplit

#endif  // MOESPLIT_COMMON_BASE_ALIGNED_ALLOCATOR_H_
