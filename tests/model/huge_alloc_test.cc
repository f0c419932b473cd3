// HugeAlloc (model/huge_alloc.h): blocks of 4 MB or more are 2 MiB aligned (so the kernel can
// back them with huge pages); smaller ones come from operator new; vectors behave as usual.
#include "model/huge_alloc.h"

#include <cstdint>
#include <numeric>

#include <gtest/gtest.h>

namespace stepcast {
namespace {

TEST(HugeAlloc, LargeBlocksAreAlignedToHugePages) {
  HugeAlloc<std::int64_t> a;
  const std::size_t n = kHugeMin / sizeof(std::int64_t) + 3;  // just over the threshold
  std::int64_t* p = a.allocate(n);
  EXPECT_EQ(reinterpret_cast<std::uintptr_t>(p) % kHugePage, 0u);
  p[0] = 1;
  p[n - 1] = 2;  // the whole block is usable
  EXPECT_EQ(p[0] + p[n - 1], 3);
  a.deallocate(p, n);
  std::int64_t* q = a.allocate(16);  // small: operator new
  q[15] = 7;
  EXPECT_EQ(q[15], 7);
  a.deallocate(q, 16);
}

TEST(HugeAlloc, VectorsGrowCopyAndCompareAcrossTheThreshold) {
  HugeVector<int> v;
  for (int i = 0; i < 3'000'000; ++i) v.push_back(i);  // crosses 4 MB while growing
  EXPECT_EQ(v.size(), 3'000'000u);
  EXPECT_EQ(std::accumulate(v.begin(), v.end(), std::int64_t{0}), 2'999'999LL * 3'000'000 / 2);
  const HugeVector<int> w = v;
  EXPECT_EQ(w, v);
  v.resize(10);
  v.shrink_to_fit();
  EXPECT_EQ(v[9], 9);
  EXPECT_EQ(HugeAlloc<int>(), HugeAlloc<double>());
}

}  // namespace
}  // namespace stepcast
