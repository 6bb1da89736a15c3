#include "runtime/weight_init.h"

#include <gtest/gtest.h>
#include <omp.h>

#include <cmath>
#include <vector>

#include "core/random.h"

namespace hoist::runtime {
namespace {

std::vector<float> Draw(int64_t count, uint64_t stream, int threads) {
  const int before = omp_get_max_threads();
  omp_set_num_threads(threads);
  std::vector<float> out(static_cast<size_t>(count), NAN);
  FillNormal(out.data(), count, stream, 0.02);
  omp_set_num_threads(before);
  return out;
}

TEST(FillNormal, OneChunkIsTheGeneratorsOwnSequence) {
  const std::vector<float> got = Draw(1000, 77, 2);
  Rng rng(77);
  for (size_t i = 0; i < got.size(); ++i) {
    ASSERT_EQ(got[i], static_cast<float>(rng.Normal() * 0.02)) << "element " << i;
  }
}

TEST(FillNormal, ValuesDoNotDependOnTheThreadCount) {
  // Two and a half chunks: the last one partial.
  const int64_t n = 2 * kNormalChunk + kNormalChunk / 2;
  const std::vector<float> one = Draw(n, 5, 1), three = Draw(n, 5, 3);
  ASSERT_EQ(one.size(), three.size());
  for (size_t i = 0; i < one.size(); ++i) {
    ASSERT_TRUE(std::isfinite(one[i])) << "element " << i << " was not written";
    ASSERT_EQ(one[i], three[i]) << "element " << i;
  }
}

TEST(FillNormal, ChunksAreDistinctStreamsWithTheRightMoments) {
  const int64_t n = 3 * kNormalChunk;
  const std::vector<float> v = Draw(n, 9, 2);
  // No chunk repeats another's opening values.
  for (int64_t c = 1; c < 3; ++c) {
    EXPECT_NE(v[static_cast<size_t>(c * kNormalChunk)], v[0]);
    EXPECT_NE(v[static_cast<size_t>(c * kNormalChunk + 1)], v[1]);
  }
  double sum = 0, squares = 0;
  for (float x : v) {
    sum += x;
    squares += double{x} * x;
  }
  const double mean = sum / double(n), sd = std::sqrt(squares / double(n) - mean * mean);
  // 3.1M draws: the mean's standard error is 0.02 / 1773 = 1.1e-5, the deviation's 8e-6.
  EXPECT_NEAR(mean, 0.0, 6e-5);
  EXPECT_NEAR(sd, 0.02, 5e-5);
}

}  // namespace
}  // namespace hoist::runtime
