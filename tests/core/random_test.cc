// Rng::Below (core/random.h): draws in [0, bound), every value reached about equally often, the
// same stream from the same seed.
#include "core/random.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

namespace hoist {
namespace {

TEST(Rng, BelowStaysInRangeAndIsUniform) {
  Rng rng(42);
  for (int i = 0; i < 100; ++i) EXPECT_EQ(rng.Below(1), 0u);
  // 7 buckets, 70000 draws: each about 10000 (a standard deviation of about 93).
  std::vector<int> counts(7, 0);
  for (int i = 0; i < 70000; ++i) {
    const uint64_t v = rng.Below(7);
    ASSERT_LT(v, 7u);
    ++counts[v];
  }
  for (int c : counts) EXPECT_NEAR(c, 10000, 500);
  // A bound near 2^64, where rejection matters most, still in range.
  const uint64_t huge = (uint64_t{1} << 63) + 12345;
  for (int i = 0; i < 1000; ++i) EXPECT_LT(rng.Below(huge), huge);
}

TEST(Rng, BelowIsTheSameStreamFromTheSameSeed) {
  Rng a(7), b(7), c(8);
  bool differs = false;
  for (int i = 0; i < 100; ++i) {
    const uint64_t x = a.Below(1000);
    EXPECT_EQ(x, b.Below(1000));
    differs = differs || x != c.Below(1000);
  }
  EXPECT_TRUE(differs);
}

}  // namespace
}  // namespace hoist
