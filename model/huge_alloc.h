// An allocator for the simulator's large per-task arrays (one entry per task of a
// full-fidelity program: tens to hundreds of MB). Blocks of at least kHugeMin bytes are
// aligned to 2 MiB and advised to use transparent huge pages (madvise MADV_HUGEPAGE, the
// kernel's default THP mode on Debian is "madvise"), so the first touch faults in 2 MiB at a
// time instead of 4 KiB: on a virtual machine a 4 KiB fault costs microseconds, and a
// 5.7 M-task program would otherwise spend most of its run faulting pages in
// (tests/bench/bench_lower.cc). Smaller blocks come from operator new as usual. Stateless;
// all instances compare equal.
#pragma once

#include <cstddef>
#include <cstdlib>
#include <limits>
#include <new>
#include <vector>

#if defined(__linux__)
#include <sys/mman.h>
#endif

namespace stepcast {

inline constexpr std::size_t kHugePage = std::size_t{2} << 20;
inline constexpr std::size_t kHugeMin = std::size_t{4} << 20;

template <class T>
struct HugeAlloc {
  using value_type = T;
  HugeAlloc() = default;
  template <class U>
  HugeAlloc(const HugeAlloc<U>&) noexcept {}  // NOLINT(google-explicit-constructor)

  T* allocate(std::size_t n) {
    if (n > std::numeric_limits<std::ptrdiff_t>::max() / 2 / sizeof(T)) throw std::bad_array_new_length();
    const std::size_t bytes = n * sizeof(T);
    if (bytes < kHugeMin) return static_cast<T*>(::operator new(bytes));
    const std::size_t rounded = (bytes + kHugePage - 1) / kHugePage * kHugePage;
    void* p = std::aligned_alloc(kHugePage, rounded);
    if (p == nullptr) throw std::bad_alloc();
#if defined(__linux__) && defined(MADV_HUGEPAGE)
    ::madvise(p, rounded, MADV_HUGEPAGE);  // advice only: failure just means 4 KiB pages
#endif
    return static_cast<T*>(p);
  }
  void deallocate(T* p, std::size_t n) noexcept {
    if (n * sizeof(T) < kHugeMin)
      ::operator delete(p);
    else
      std::free(p);
  }
  template <class U>
  bool operator==(const HugeAlloc<U>&) const noexcept {
    return true;
  }
};

// A std::vector whose large buffers use huge pages.
template <class T>
using HugeVector = std::vector<T, HugeAlloc<T>>;

}  // namespace stepcast
