#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <thread>
#include <vector>

#include "core/memory_tracker.h"

namespace hoist {
namespace {

constexpr Place kDev = Place::kDevice;

TEST(MemoryTrackerWindow, FirstWindowCoversEverythingSinceConstruction) {
  MemoryTracker tracker;
  tracker.Add(kDev, Category::kParam, 100);
  tracker.Add(kDev, Category::kActivation, 50);
  tracker.Remove(kDev, Category::kActivation, 50);
  MemoryWindow window = tracker.TakeWindow();
  EXPECT_EQ(window.peak_total[int(kDev)], 150);
  EXPECT_EQ(window.Peak(kDev, Category::kActivation), 50);
  EXPECT_EQ(window.current[int(kDev)][int(Category::kActivation)], 0);
  EXPECT_EQ(window.current[int(kDev)][int(Category::kParam)], 100);
}

TEST(MemoryTrackerWindow, KeepsASpikeThatIsGoneWhenTheWindowIsTaken) {
  MemoryTracker tracker;
  tracker.Add(kDev, Category::kParam, 1000);
  (void)tracker.TakeWindow();
  tracker.Add(kDev, Category::kWorkspace, 300);  // total 1300: the spike
  tracker.Remove(kDev, Category::kWorkspace, 300);
  tracker.Add(kDev, Category::kGrad, 100);  // total 1100 at the end
  MemoryWindow window = tracker.TakeWindow();
  EXPECT_EQ(window.peak_total[int(kDev)], 1300);
  EXPECT_EQ(window.Peak(kDev, Category::kWorkspace), 300);
  EXPECT_EQ(window.Peak(kDev, Category::kGrad), 100);
  EXPECT_EQ(window.AtPeakTotal(kDev, Category::kParam), 1000);
  EXPECT_EQ(window.AtPeakTotal(kDev, Category::kWorkspace), 300);
  EXPECT_EQ(window.AtPeakTotal(kDev, Category::kGrad), 0);
}

TEST(MemoryTrackerWindow, RestartsFromTheCurrentValues) {
  MemoryTracker tracker;
  tracker.Add(kDev, Category::kActivation, 500);
  tracker.Remove(kDev, Category::kActivation, 400);
  EXPECT_EQ(tracker.TakeWindow().peak_total[int(kDev)], 500);

  // Nothing happens: the next window holds the values current when it opened, not the old spike.
  MemoryWindow quiet = tracker.TakeWindow();
  EXPECT_EQ(quiet.peak_total[int(kDev)], 100);
  EXPECT_EQ(quiet.Peak(kDev, Category::kActivation), 100);
  EXPECT_EQ(quiet.AtPeakTotal(kDev, Category::kActivation), 100);

  // A smaller spike than the first one still shows in its own window.
  tracker.Add(kDev, Category::kActivation, 200);
  tracker.Remove(kDev, Category::kActivation, 200);
  MemoryWindow small = tracker.TakeWindow();
  EXPECT_EQ(small.peak_total[int(kDev)], 300);
  EXPECT_EQ(small.Peak(kDev, Category::kActivation), 300);
}

TEST(MemoryTrackerWindow, SplitAtPeakTotalIsTheLargestMomentNotMaximaPerCategory) {
  MemoryTracker tracker;
  tracker.Add(kDev, Category::kParam, 100);  // 100
  tracker.Add(kDev, Category::kGrad, 80);    // 180: the largest moment
  tracker.Remove(kDev, Category::kParam, 100);
  tracker.Add(kDev, Category::kOptimizer, 90);  // 170
  tracker.Add(kDev, Category::kGrad, 5);        // 175
  MemoryWindow window = tracker.TakeWindow();
  EXPECT_EQ(window.peak_total[int(kDev)], 180);
  EXPECT_EQ(window.AtPeakTotal(kDev, Category::kParam), 100);
  EXPECT_EQ(window.AtPeakTotal(kDev, Category::kGrad), 80);
  EXPECT_EQ(window.AtPeakTotal(kDev, Category::kOptimizer), 0);
  EXPECT_EQ(window.Peak(kDev, Category::kGrad), 85);
  EXPECT_EQ(window.Peak(kDev, Category::kOptimizer), 90);
  int64_t split_sum = 0;
  for (int64_t bytes : window.at_peak_total[int(kDev)]) split_sum += bytes;
  EXPECT_EQ(split_sum, window.peak_total[int(kDev)]);
}

TEST(MemoryTrackerWindow, TakingAWindowLeavesThePeaksAlone) {
  MemoryTracker tracker;
  tracker.Add(kDev, Category::kComm, 700);
  tracker.Remove(kDev, Category::kComm, 600);
  (void)tracker.TakeWindow();
  (void)tracker.TakeWindow();
  MemorySnapshot snap = tracker.Snapshot();
  EXPECT_EQ(snap.Peak(kDev, Category::kComm), 700);
  EXPECT_EQ(snap.peak_total[int(kDev)], 700);
}

TEST(MemoryTrackerWindow, ResettingThePeaksLeavesTheWindowAlone) {
  MemoryTracker tracker;
  tracker.Add(kDev, Category::kComm, 700);
  tracker.Remove(kDev, Category::kComm, 600);
  tracker.ResetPeaks();
  EXPECT_EQ(tracker.Snapshot().peak_total[int(kDev)], 100);
  MemoryWindow window = tracker.TakeWindow();
  EXPECT_EQ(window.peak_total[int(kDev)], 700);
  EXPECT_EQ(window.Peak(kDev, Category::kComm), 700);
}

TEST(MemoryTrackerWindow, PlacesKeepSeparateWindows) {
  MemoryTracker tracker;
  tracker.Add(Place::kHost, Category::kOptimizer, 4000);
  tracker.Remove(Place::kHost, Category::kOptimizer, 4000);
  tracker.Add(kDev, Category::kParam, 10);
  MemoryWindow window = tracker.TakeWindow();
  EXPECT_EQ(window.peak_total[int(Place::kHost)], 4000);
  EXPECT_EQ(window.peak_total[int(kDev)], 10);
  EXPECT_EQ(window.AtPeakTotal(kDev, Category::kOptimizer), 0);
  EXPECT_EQ(window.peak_total[int(Place::kNvme)], 0);
}

// Windows taken while other threads allocate lose nothing: the largest window peak is the
// tracker's own peak over the same period.
TEST(MemoryTrackerWindow, LargestWindowPeakEqualsThePeakUnderConcurrentUpdates) {
  MemoryTracker tracker;
  constexpr int kThreads = 3, kRounds = 3000;
  std::atomic<int> running{kThreads};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&tracker, &running, t] {
      const int64_t bytes = 64 * (t + 1);
      for (int i = 0; i < kRounds; ++i) {
        tracker.Add(kDev, Category(t), bytes);
        tracker.Remove(kDev, Category(t), bytes);
      }
      running.fetch_sub(1);
    });
  }
  int64_t largest = 0;
  while (running.load() > 0) {
    largest = std::max(largest, tracker.TakeWindow().peak_total[int(kDev)]);
  }
  for (std::thread& thread : threads) thread.join();
  largest = std::max(largest, tracker.TakeWindow().peak_total[int(kDev)]);
  EXPECT_EQ(largest, tracker.Snapshot().peak_total[int(kDev)]);
  EXPECT_GT(largest, 0);
}

}  // namespace
}  // namespace hoist
