// GatherBook: the stage-3 gatherer's rules, on their own (the engine's and the estimate's tests
// check them in use).
#include "zero/gather_book.h"

#include <gtest/gtest.h>

#include <vector>

#include "tests/zero/zero_test_util.h"

namespace hoist::zero {
namespace {

using Prefetch = GatherBook::Prefetch;

class GatherBookTest : public ::testing::Test {
 protected:
  void SetUp() override {
    // Units of 37, 53, 53 and 2 elements on one rank.
    auto plan = PartitionPlan::Build(zero_test::ToyUnits(), 1, 0);
    ASSERT_TRUE(plan.ok());
    plan_ = std::make_unique<PartitionPlan>(std::move(plan).value());
    options_.stage = 3;
    options_.stage3_param_persistence_threshold = 10;  // the 2-element unit stays whole
    options_.stage3_prefetch_bucket_size = 1000;
    options_.stage3_max_live_parameters = 1000;
  }

  std::unique_ptr<PartitionPlan> plan_;
  ZeroOptions options_;
};

TEST_F(GatherBookTest, OnlyShardedUnitsOfStageThreeAreGathered) {
  GatherBook book(*plan_, options_, {});
  EXPECT_TRUE(book.sharded(0));
  EXPECT_FALSE(book.sharded(3));  // persistent
  EXPECT_EQ(book.PrefetchAction(3), Prefetch::kNothing);
  EXPECT_EQ(book.PrefetchAction(1), Prefetch::kGather);
  options_.stage = 2;
  GatherBook stage2(*plan_, options_, {});
  EXPECT_FALSE(stage2.sharded(0));
  EXPECT_EQ(stage2.PrefetchAction(0), Prefetch::kNothing);
}

TEST_F(GatherBookTest, HoldsCountAndTheLastReleaseFrees) {
  GatherBook book(*plan_, options_, {});
  EXPECT_TRUE(book.Hold(1));
  EXPECT_FALSE(book.Hold(1));
  EXPECT_EQ(book.PrefetchAction(1), Prefetch::kNothing);  // held: nothing to prefetch
  book.Started(1);
  EXPECT_EQ(book.live(), 53);
  EXPECT_FALSE(book.Unhold(1));
  EXPECT_TRUE(book.Unhold(1));
  EXPECT_TRUE(book.PrefetchedNotHeld() == std::vector<int>{1});
  book.Dropped(1);
  EXPECT_EQ(book.live(), 0);
  EXPECT_TRUE(book.PrefetchedNotHeld().empty());
}

TEST_F(GatherBookTest, PrefetchStaysWithinTheBucketAndTheLiveLimit) {
  options_.stage3_max_live_parameters = 100;
  GatherBook book(*plan_, options_, {});
  book.Started(1);                                        // 53 alive
  EXPECT_EQ(book.PrefetchAction(1), Prefetch::kNothing);  // already gathering
  EXPECT_EQ(book.PrefetchAction(0), Prefetch::kGather);   // 53 + 37 <= 100
  EXPECT_EQ(book.PrefetchAction(2), Prefetch::kNothing);  // 53 + 53 > 100
  options_.stage3_prefetch_bucket_size = 40;              // the book reads the options it has
  EXPECT_EQ(book.PrefetchAction(0), Prefetch::kGather);   // 37 <= 40
  options_.stage3_prefetch_bucket_size = 36;
  EXPECT_EQ(book.PrefetchAction(0), Prefetch::kNothing);
}

TEST_F(GatherBookTest, TheStagingHoldsOneShardAtATime) {
  GatherBook book(*plan_, options_, {});
  book.Staged(0);
  book.Started(0);
  EXPECT_EQ(book.staged_unit(), 0);
  EXPECT_EQ(book.PrefetchAction(1), Prefetch::kNothing);  // its gather not yet waited for
  book.Unstaged(1);                                       // another unit's: no change
  EXPECT_EQ(book.staged_unit(), 0);
  book.Unstaged(0);
  EXPECT_EQ(book.PrefetchAction(1), Prefetch::kGather);
}

TEST_F(GatherBookTest, ShardsOnNvmeAreReadAheadNotGathered) {
  GatherBook book(*plan_, options_, {false, true, false, false});
  EXPECT_EQ(book.PrefetchAction(1), Prefetch::kReadAhead);
  book.Staged(0);  // even with the staging busy: the read goes to the store's buffers
  EXPECT_EQ(book.PrefetchAction(1), Prefetch::kReadAhead);
  EXPECT_EQ(book.PrefetchAction(2), Prefetch::kNothing);
}

TEST(GatherBookDeath, ReleasingWhatIsNotHeldIsABug) {
  auto plan = PartitionPlan::Build(zero_test::ToyUnits(), 1, 0);
  ASSERT_TRUE(plan.ok());
  ZeroOptions options;
  options.stage = 3;
  GatherBook book(*plan, options, {});
  EXPECT_DEATH(book.Unhold(0), "released but not acquired");
  EXPECT_DEATH(book.Dropped(0), "dropped but not gathered");
}

}  // namespace
}  // namespace hoist::zero
