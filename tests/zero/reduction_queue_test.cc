// ReductionQueue: the reductions in flight finish oldest first, each once more than `keep`
// elements are in flight.
#include "zero/reduction_queue.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "tests/zero/zero_test_util.h"

namespace hoist::zero {
namespace {

TEST(ReductionQueue, TheOldestFinishesOncePastTheElementsKept) {
  // Units of 37, 53, 53 and 2 elements on one rank.
  auto plan = PartitionPlan::Build(zero_test::ToyUnits(), 1, 0);
  ASSERT_TRUE(plan.ok());
  ReductionQueue<std::string> queue(*plan);
  EXPECT_FALSE(queue.PopDue(0).has_value());
  queue.Push(3, "norm");
  queue.Push(2, "block1");
  EXPECT_EQ(queue.in_flight(), 55);
  EXPECT_EQ(queue.Reducing(), (std::vector<char>{0, 0, 1, 1}));
  EXPECT_FALSE(queue.PopDue(55).has_value());  // within what may stay in flight
  auto due = queue.PopDue(54);
  ASSERT_TRUE(due.has_value());
  EXPECT_EQ(due->unit, 3);  // oldest first
  EXPECT_EQ(due->payload, "norm");
  EXPECT_EQ(queue.in_flight(), 53);
  queue.Push(1, "block0");
  // Drained to 53: the oldest (block1) goes, block0 stays.
  std::vector<int> finished;
  while (auto next = queue.PopDue(53)) finished.push_back(next->unit);
  EXPECT_EQ(finished, std::vector<int>{2});
  while (auto next = queue.PopDue(0)) finished.push_back(next->unit);
  EXPECT_EQ(finished, (std::vector<int>{2, 1}));
  EXPECT_TRUE(queue.empty());
  EXPECT_EQ(queue.in_flight(), 0);
}

}  // namespace
}  // namespace hoist::zero
