// An allocator for the simulator's large per-task arrays (one entry per task of a
// full-fidelity program: tens to hundreds of MB). Blocks of at least kHugeMin bytes are
// mapped on their own (mmap), aligned to 2 MiB and advised to use transparent huge pages
// (madvise MADV_HUGEPAGE, the kernel's default THP mode on Debian is "madvise"), so the first
// touch faults in 2 MiB at a time instead of 4 KiB: on a virtual machine a 4 KiB fault costs
// microseconds, and a 5.7 M-task program would otherwise spend most of its run faulting
// pages in (tests/bench/bench_lower.cc). Freeing such a block unmaps it, so its memory goes
// back to the system at once. They used to come from glibc (aligned_alloc), whose dynamic
// mmap threshold rises to the size of the last freed mapped block (up to 32 MiB): blocks
// below it were then carved from the per-thread arenas and never returned, and a plan search
// over 2,652 Llama 3 70B plans on two threads peaked at 2.0 GB RSS for 1.3 GB of live heap
// (heaptrack); with its own mappings 1.1 GB (README.md, Performance). Smaller blocks come from
// operator new as usual. Stateless; all instances compare equal.
#pragma once

#include <cstddef>
#include <cstdint>
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

// The size a block of `bytes` >= kHugeMin occupies: whole huge pages.
inline constexpr std::size_t huge_block_bytes(std::size_t bytes) {
  return (bytes + kHugePage - 1) / kHugePage * kHugePage;
}

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
    const std::size_t rounded = huge_block_bytes(bytes);
#if defined(__linux__)
    // Map one huge page more than needed, then unmap the slack before the first 2 MiB
    // boundary and after the block: an aligned mapping of exactly `rounded` bytes.
    void* m = ::mmap(nullptr, rounded + kHugePage, PROT_READ | PROT_WRITE,
                     MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (m == MAP_FAILED) throw std::bad_alloc();
    const auto base = reinterpret_cast<std::uintptr_t>(m);
    const std::uintptr_t aligned = (base + kHugePage - 1) / kHugePage * kHugePage;
    if (aligned > base) ::munmap(m, aligned - base);
    const std::size_t tail = base + kHugePage - aligned;  // bytes mapped after the block
    if (tail > 0) ::munmap(reinterpret_cast<void*>(aligned + rounded), tail);
    void* p = reinterpret_cast<void*>(aligned);
#if defined(MADV_HUGEPAGE)
    ::madvise(p, rounded, MADV_HUGEPAGE);  // advice only: failure just means 4 KiB pages
#endif
#else
    void* p = std::aligned_alloc(kHugePage, rounded);
    if (p == nullptr) throw std::bad_alloc();
#endif
    return static_cast<T*>(p);
  }
  void deallocate(T* p, std::size_t n) noexcept {
    const std::size_t bytes = n * sizeof(T);
    if (bytes < kHugeMin) {
      ::operator delete(p);
      return;
    }
#if defined(__linux__)
    ::munmap(p, huge_block_bytes(bytes));  // the pages go back to the system now
#else
    std::free(p);
#endif
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
