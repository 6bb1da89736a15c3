// SumOverRanks: exact where an fp32 all-reduce is not (an int64 past 2^24, a double's low bits),
// and the same on every rank.
#include "comm/sum_over_ranks.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <thread>
#include <vector>

#include "comm/thread_communicator.h"

namespace hoist::comm {
namespace {

TEST(SumOverRanks, IsExactAndTheSameOnEveryRank) {
  constexpr int kRanks = 3;
  auto group = ThreadGroup::Create(kRanks, 10.0);
  ASSERT_TRUE(group.ok());
  std::vector<int64_t> counts(kRanks);
  std::vector<double> sums(kRanks);
  std::vector<Status> statuses(kRanks);
  std::vector<std::thread> ranks;
  for (int r = 0; r < kRanks; ++r) {
    ranks.emplace_back([&, r] {
      // (2^40 + r): the sum needs 42 bits; 1 + r * 2^-40: the low bits a float would lose.
      StatusOr<int64_t> count = SumOverRanks((*group)->comm(r), (int64_t{1} << 40) + r);
      StatusOr<double> sum = SumOverRanks((*group)->comm(r), 1.0 + r * 0x1p-40);
      statuses[r] = count.ok() ? sum.status() : count.status();
      if (count.ok()) counts[r] = *count;
      if (sum.ok()) sums[r] = *sum;
    });
  }
  for (std::thread& rank : ranks) rank.join();
  for (int r = 0; r < kRanks; ++r) {
    ASSERT_TRUE(statuses[r].ok()) << statuses[r].ToString();
    EXPECT_EQ(counts[r], 3 * (int64_t{1} << 40) + 3);
    EXPECT_EQ(sums[r], 3.0 + 3 * 0x1p-40);
  }
}

}  // namespace
}  // namespace hoist::comm
