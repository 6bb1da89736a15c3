// The pinned pool over the host-pinning hook (core/host_pinning.h): a pinner that is installed
// and available allocates, pins and frees the buffers; without one, or where it is unavailable
// or refuses, the pool locks pages of its own with mlock, as it does on a machine without a GPU.
// A fake pinner stands for a driver's, so every case runs without one.
#include "core/host_pinning.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <mutex>
#include <vector>

#include "offload/pinned_pool.h"

namespace hoist::offload {
namespace {

// A driver that pins with mlock, and counts.
class FakePinner final : public HostPinner {
 public:
  explicit FakePinner(bool available = true, bool refuses = false)
      : available_(available), refuses_(refuses) {}

  std::string name() const override { return "the fake driver"; }
  bool Available() const override { return available_; }
  void* Allocate(int64_t bytes) override {
    std::lock_guard<std::mutex> lock(mu_);
    ++asked_;
    if (refuses_) return nullptr;
    void* data = nullptr;
    if (::posix_memalign(&data, 4096, static_cast<size_t>(bytes)) != 0) return nullptr;
    live_.push_back(data);
    return data;
  }
  void Free(void* data) override {
    std::lock_guard<std::mutex> lock(mu_);
    std::erase(live_, data);
    ++freed_;
    std::free(data);
  }

  int asked() const {
    std::lock_guard<std::mutex> lock(mu_);
    return asked_;
  }
  int freed() const {
    std::lock_guard<std::mutex> lock(mu_);
    return freed_;
  }
  size_t live() const {
    std::lock_guard<std::mutex> lock(mu_);
    return live_.size();
  }

 private:
  const bool available_, refuses_;
  mutable std::mutex mu_;
  int asked_ = 0;            // guarded by mu_
  int freed_ = 0;            // guarded by mu_
  std::vector<void*> live_;  // guarded by mu_
};

TEST(HostPinning, WithoutAPinnerThePoolLocksPagesOfItsOwn) {
  ScopedHostPinner none(nullptr);
  EXPECT_EQ(InstalledHostPinner(), nullptr);
  EXPECT_FALSE(PinnedHostPool::DriverPins());
  MemoryTracker tracker;
  PinnedHostPool pool(tracker);
  StatusOr<PinnedBuffer> buffer = pool.Allocate(3 * 4096 + 1, Category::kOptimizer);
  ASSERT_TRUE(buffer.ok()) << buffer.status().ToString();
  EXPECT_FALSE(buffer->driver_pinned());
  EXPECT_FALSE(buffer->driver_pinned());
  // mlock may be refused (RLIMIT_MEMLOCK, a container): what is locked is counted either way.
  EXPECT_EQ(pool.bytes_locked(), buffer->locked() ? 4 * 4096 : 0);
  EXPECT_EQ(tracker.Snapshot().Current(Place::kHostPinned, Category::kOptimizer), 4 * 4096);
}

TEST(HostPinning, AnAvailablePinnerAllocatesPinsAndFreesTheBuffers) {
  FakePinner pinner;
  ScopedHostPinner installed(&pinner);
  EXPECT_TRUE(PinnedHostPool::DriverPins());
  MemoryTracker tracker;
  PinnedHostPool pool(tracker);
  StatusOr<PinnedBuffer> buffer = pool.Allocate(4096 + 1, Category::kParam);
  ASSERT_TRUE(buffer.ok()) << buffer.status().ToString();
  EXPECT_TRUE(buffer->driver_pinned());
  EXPECT_TRUE(buffer->locked());
  EXPECT_EQ(buffer->size_bytes(), 2 * 4096);
  EXPECT_EQ(pinner.asked(), 1);
  EXPECT_EQ(pinner.live(), 1u);
  EXPECT_EQ(pool.bytes_locked(), 2 * 4096);
  EXPECT_EQ(tracker.Snapshot().Current(Place::kHostPinned, Category::kParam), 2 * 4096);
  buffer->Reset();
  EXPECT_EQ(pinner.freed(), 1);
  EXPECT_EQ(pinner.live(), 0u);
  EXPECT_EQ(pool.bytes_locked(), 0);
  EXPECT_EQ(tracker.Snapshot().CurrentTotal(Place::kHostPinned), 0);
}

TEST(HostPinning, APinnerUnavailableHereIsNotAsked) {
  FakePinner pinner(/*available=*/false);
  ScopedHostPinner installed(&pinner);
  EXPECT_EQ(InstalledHostPinner(), &pinner);
  EXPECT_EQ(AvailableHostPinner(), nullptr);
  EXPECT_FALSE(PinnedHostPool::DriverPins());
  MemoryTracker tracker;
  PinnedHostPool pool(tracker);
  StatusOr<PinnedBuffer> buffer = pool.Allocate(4096, Category::kGrad);
  ASSERT_TRUE(buffer.ok());
  EXPECT_FALSE(buffer->driver_pinned());
  EXPECT_EQ(pinner.asked(), 0);
}

TEST(HostPinning, ADriverThatRefusesLeavesThePagesToMlock) {
  FakePinner pinner(/*available=*/true, /*refuses=*/true);
  ScopedHostPinner installed(&pinner);
  MemoryTracker tracker;
  PinnedHostPool pool(tracker);
  StatusOr<PinnedBuffer> buffer = pool.Allocate(4096, Category::kGrad);
  ASSERT_TRUE(buffer.ok()) << buffer.status().ToString();
  EXPECT_EQ(pinner.asked(), 1);
  EXPECT_FALSE(buffer->driver_pinned());
  EXPECT_EQ(pool.bytes_locked(), buffer->locked() ? 4096 : 0);
  buffer->Reset();
  EXPECT_EQ(pinner.freed(), 0);
}

TEST(HostPinning, PlainPagesAreNotPinned) {
  FakePinner pinner;
  ScopedHostPinner installed(&pinner);
  MemoryTracker tracker;
  PinnedHostPool pool(tracker, PinnedHostPoolOptions{.lock_pages = false});
  StatusOr<PinnedBuffer> buffer = pool.Allocate(4096, Category::kGrad);
  ASSERT_TRUE(buffer.ok());
  EXPECT_FALSE(buffer->driver_pinned());
  EXPECT_FALSE(buffer->locked());
  EXPECT_EQ(pinner.asked(), 0);
}

TEST(HostPinning, ABufferGoesBackToThePinnerThatPinnedIt) {
  FakePinner first;
  MemoryTracker tracker;
  PinnedHostPool pool(tracker);
  PinnedBuffer buffer;
  {
    ScopedHostPinner installed(&first);
    StatusOr<PinnedBuffer> allocated = pool.Allocate(4096, Category::kOptimizer);
    ASSERT_TRUE(allocated.ok());
    buffer = std::move(*allocated);
  }
  FakePinner second;
  ScopedHostPinner replaced(&second);
  PinnedBuffer moved = std::move(buffer);
  EXPECT_TRUE(moved.driver_pinned());
  moved.Reset();
  EXPECT_EQ(first.freed(), 1);
  EXPECT_EQ(second.freed(), 0);
}

TEST(HostPinning, AScopePutsThePreviousPinnerBack) {
  HostPinner* const before = InstalledHostPinner();
  FakePinner pinner;
  {
    ScopedHostPinner installed(&pinner);
    EXPECT_EQ(InstalledHostPinner(), &pinner);
  }
  EXPECT_EQ(InstalledHostPinner(), before);
}

}  // namespace
}  // namespace hoist::offload
