#include "offload/pinned_pool.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/resource.h>

#include <cstdint>
#include <cstring>

namespace hoist::offload {
namespace {

using ::testing::HasSubstr;

TEST(PinnedHostPool, BuffersArePageAlignedAndWholePages) {
  MemoryTracker tracker;
  PinnedHostPool pool(tracker);
  auto buf = pool.Allocate(5000, Category::kOptimizer);
  ASSERT_TRUE(buf.ok()) << buf.status().ToString();
  EXPECT_EQ(reinterpret_cast<uintptr_t>(buf->data()) % 4096, 0u);
  EXPECT_EQ(buf->size_bytes(), 8192);
  buf->bytes()[8191] = std::byte{1};
}

TEST(PinnedHostPool, CountsInTheTrackerUnderTheCallersCategoryAndReleases) {
  MemoryTracker tracker;
  PinnedHostPool pool(tracker);
  {
    auto a = pool.Allocate(4096, Category::kOptimizer);
    auto b = pool.Allocate(3 * 4096, Category::kParam);
    ASSERT_TRUE(a.ok() && b.ok());
    MemorySnapshot snap = tracker.Snapshot();
    EXPECT_EQ(snap.Current(Place::kHostPinned, Category::kOptimizer), 4096);
    EXPECT_EQ(snap.Current(Place::kHostPinned, Category::kParam), 3 * 4096);
    EXPECT_EQ(snap.CurrentTotal(Place::kHost), 0);
    EXPECT_EQ(pool.bytes_in_use(), 4 * 4096);
    a->Reset();
    EXPECT_FALSE(*a);
    EXPECT_EQ(tracker.Snapshot().Current(Place::kHostPinned, Category::kOptimizer), 0);
  }
  MemorySnapshot snap = tracker.Snapshot();
  EXPECT_EQ(snap.CurrentTotal(Place::kHostPinned), 0);
  EXPECT_EQ(snap.peak_total[int(Place::kHostPinned)], 4 * 4096);
  EXPECT_EQ(pool.bytes_in_use(), 0);
  EXPECT_EQ(pool.bytes_locked(), 0);
}

TEST(PinnedHostPool, MovingABufferMovesOwnership) {
  MemoryTracker tracker;
  PinnedHostPool pool(tracker);
  PinnedBuffer outer;
  {
    auto buf = pool.Allocate(4096, Category::kGrad);
    ASSERT_TRUE(buf.ok());
    outer = std::move(*buf);
  }
  EXPECT_TRUE(outer);
  EXPECT_EQ(tracker.Snapshot().Current(Place::kHostPinned, Category::kGrad), 4096);
  outer = PinnedBuffer();
  EXPECT_EQ(tracker.Snapshot().Current(Place::kHostPinned, Category::kGrad), 0);
}

// Sets the soft RLIMIT_MEMLOCK for the test's duration.
class MemlockLimit {
 public:
  explicit MemlockLimit(rlim_t soft) {
    ::getrlimit(RLIMIT_MEMLOCK, &saved_);
    struct rlimit lowered = saved_;
    lowered.rlim_cur = soft;
    ok_ = ::setrlimit(RLIMIT_MEMLOCK, &lowered) == 0;
  }
  ~MemlockLimit() { ::setrlimit(RLIMIT_MEMLOCK, &saved_); }
  bool ok() const { return ok_; }

 private:
  struct rlimit saved_ {};
  bool ok_ = false;
};

TEST(PinnedHostPool, LocksWithinTheLimitAndFallsBackToPlainPagesOnceWithANotice) {
  if (PinnedHostPool::DriverPins()) {
    GTEST_SKIP() << "the CUDA driver pins here, outside RLIMIT_MEMLOCK (next test)";
  }
  MemlockLimit limit(2 * 4096);
  ASSERT_TRUE(limit.ok());
  MemoryTracker tracker;
  PinnedHostPool pool(tracker);
  auto first = pool.Allocate(2 * 4096, Category::kOptimizer);
  ASSERT_TRUE(first.ok());
  ::testing::internal::CaptureStderr();
  auto second = pool.Allocate(4096, Category::kOptimizer);
  auto third = pool.Allocate(4096, Category::kOptimizer);
  const std::string log = ::testing::internal::GetCapturedStderr();
  ASSERT_TRUE(second.ok() && third.ok());
  // mlock itself may be refused (a container without CAP_IPC_LOCK and a smaller limit).
  if (first->locked()) {
    EXPECT_EQ(pool.bytes_locked(), 2 * 4096);
  }
  EXPECT_FALSE(second->locked());
  EXPECT_FALSE(third->locked());
  EXPECT_THAT(log, HasSubstr("using unlocked pages"));
  EXPECT_EQ(log.find("using unlocked pages"), log.rfind("using unlocked pages")) << log;
  EXPECT_EQ(tracker.Snapshot().Current(Place::kHostPinned, Category::kOptimizer), 4 * 4096);
}

TEST(PinnedHostPool, WithAGpuTheDriverPinsTheBuffers) {
  if (!PinnedHostPool::DriverPins()) {
    GTEST_SKIP() << "needs a CUDA build and a visible GPU";
  }
  MemlockLimit limit(4096);  // the driver's pinning does not count against it
  ASSERT_TRUE(limit.ok());
  MemoryTracker tracker;
  PinnedHostPool pool(tracker);
  auto buffer = pool.Allocate(3 * 4096 + 1, Category::kParam);
  ASSERT_TRUE(buffer.ok()) << buffer.status().ToString();
  EXPECT_TRUE(buffer->driver_pinned());
  EXPECT_TRUE(buffer->locked());
  EXPECT_EQ(pool.bytes_locked(), 4 * 4096);
  std::memset(buffer->data(), 0x5a, 4 * 4096);  // CPU-addressable
  EXPECT_EQ(tracker.Snapshot().Current(Place::kHostPinned, Category::kParam), 4 * 4096);
  buffer->Reset();
  EXPECT_EQ(pool.bytes_locked(), 0);
}

TEST(PinnedHostPool, WithoutLockingPagesArePlainAndSilent) {
  MemoryTracker tracker;
  PinnedHostPool pool(tracker, PinnedHostPoolOptions{.lock_pages = false});
  ::testing::internal::CaptureStderr();
  auto buf = pool.Allocate(4096, Category::kParam);
  EXPECT_EQ(::testing::internal::GetCapturedStderr(), "");
  ASSERT_TRUE(buf.ok());
  EXPECT_FALSE(buf->locked());
  EXPECT_EQ(tracker.Snapshot().Current(Place::kHostPinned, Category::kParam), 4096);
}

}  // namespace
}  // namespace hoist::offload
