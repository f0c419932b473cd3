// An allocator for the simulator's large per-task arrays (one entry per task of a
// full-fidelity program: tens to hundreds of MB). Blocks of at least kHugeMin bytes are
// mapped on their own (mmap), aligned to 2 MiB and advised to use transparent huge pages
// (madvise MADV_HUGEPAGE, the kernel's default THP mode on Debian is "madvise"), so the first
// touch faults in 2 MiB at a time instead of 4 KiB: on a virtual machine a 4 KiB fault costs
// microseconds, and a 5.7 M-task program would otherwise spend most of its run faulting
// pages in (tests/bench/bench_lower.cc). Freeing such a block unmaps it, so its memory goes
// back to the system at once, except for the few kept for reuse (below). They used to come
// from glibc (aligned_alloc), whose dynamic mmap threshold rises to the size of the last
// freed mapped block (up to 32 MiB): blocks below it were then carved from the per-thread
// arenas and never returned, and a plan search over 2,652 Llama 3 70B plans on two threads
// peaked at 2.0 GB RSS for 1.3 GB of live heap (heaptrack); with its own mappings 1.1 GB
// (README.md, Performance). Smaller blocks come from operator new as usual. Stateless; all
// instances compare equal.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <limits>
#include <mutex>
#include <new>
#include <vector>

#if defined(__linux__)
#include <sys/mman.h>
#endif

namespace stepcast {

inline constexpr std::size_t kHugePage = std::size_t{2} << 20;
inline constexpr std::size_t kHugeMin = std::size_t{4} << 20;

// The size a block of `bytes` >= kHugeMin occupies: a power of two of huge pages, so that
// blocks freed by one plan fit the next plan's arrays of similar (not equal) sizes
// (HugeBlockCache). Only the pages an array touches become resident; the rest of the block
// is address space.
inline constexpr std::size_t huge_block_bytes(std::size_t bytes) {
  std::size_t b = kHugePage;
  while (b < bytes) b *= 2;
  return b;
}

// Freed huge blocks kept for the next allocation of the same size. A plan search lowers and
// simulates thousands of plans, each growing its task lists through the same sizes (a
// std::vector doubles its capacity, so the sizes repeat from plan to plan); mapping each
// afresh had the kernel zero every page again (perf on a 70B search: clear_page_erms under
// the lowering's push_back, 8.6 s of system time of 58 s). At most kHugeCacheBytes stay
// mapped, shared by all threads (so the overhead does not grow with --threads); the oldest
// go back to the system first. Allocating a huge block is rare (a few per plan), so one lock
// costs nothing measurable. Never destroyed (blocks freed during static destruction still
// find it), so the blocks it holds at exit go back with the process.
inline constexpr std::size_t kHugeCacheBytes = std::size_t{512} << 20;

class HugeBlockCache {
 public:
  static HugeBlockCache& instance() {
    static HugeBlockCache* const cache = new HugeBlockCache;  // never destroyed, see above
    return *cache;
  }
  // A cached block of exactly `bytes` (huge_block_bytes: a power of two of huge pages), or
  // nullptr.
  void* take(std::size_t bytes) noexcept {
    std::lock_guard<std::mutex> lock(mu_);
    for (int i = count_; i-- > 0;) {
      if (blocks_[i].bytes != bytes) continue;
      void* p = blocks_[i].p;
      remove(i);
      return p;
    }
    return nullptr;
  }
  // Keeps the block for reuse, unmapping the oldest beyond the limits; false when it is too
  // large to keep (the caller unmaps it).
  bool put(void* p, std::size_t bytes) noexcept {
    if (bytes > kHugeCacheBytes) return false;
    std::lock_guard<std::mutex> lock(mu_);
    while (count_ > 0 && (count_ == kSlots || total_ + bytes > kHugeCacheBytes)) {
      unmap(blocks_[0].p, blocks_[0].bytes);
      remove(0);
    }
    blocks_[count_++] = Block{p, bytes};
    total_ += bytes;
    return true;
  }
  // Unmaps every cached block (the memory goes back to the system).
  void release_all() noexcept {
    std::lock_guard<std::mutex> lock(mu_);
    while (count_ > 0) {
      unmap(blocks_[0].p, blocks_[0].bytes);
      remove(0);
    }
  }
  std::size_t cached_bytes() noexcept {
    std::lock_guard<std::mutex> lock(mu_);
    return total_;
  }

  static void unmap(void* p, std::size_t bytes) noexcept {
#if defined(__linux__)
    ::munmap(p, bytes);  // the pages go back to the system now
#else
    (void)bytes;
    std::free(p);
#endif
  }

 private:
  static constexpr int kSlots = 64;
  struct Block {
    void* p;
    std::size_t bytes;
  };
  void remove(int i) noexcept {
    total_ -= blocks_[i].bytes;
    for (int j = i + 1; j < count_; ++j) blocks_[j - 1] = blocks_[j];
    --count_;
  }
  std::mutex mu_;
  Block blocks_[kSlots] = {};  // oldest first
  int count_ = 0;
  std::size_t total_ = 0;
};

template <class T>
struct HugeAlloc {
  using value_type = T;
  HugeAlloc() = default;
  template <class U>
  HugeAlloc(const HugeAlloc<U>&) noexcept {}  // NOLINT(google-explicit-constructor)

  T* allocate(std::size_t n) {
    if (n > std::numeric_limits<std::ptrdiff_t>::max() / 2 / sizeof(T))
      throw std::bad_array_new_length();
    const std::size_t bytes = n * sizeof(T);
    if (bytes < kHugeMin) return static_cast<T*>(::operator new(bytes));
    const std::size_t rounded = huge_block_bytes(bytes);
    if (void* cached = HugeBlockCache::instance().take(rounded)) return static_cast<T*>(cached);
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
    const std::size_t rounded = huge_block_bytes(bytes);
    if (!HugeBlockCache::instance().put(p, rounded)) HugeBlockCache::unmap(p, rounded);
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
