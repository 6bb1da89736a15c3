#include "core/device.h"

#include <gtest/gtest.h>

#include <atomic>
#include <cstdint>
#include <cstring>
#include <string>
#include <thread>
#include <utility>

#include "core/host_stream.h"

namespace hoist {
namespace {

int64_t Held(const MemoryTracker& tracker, Place place, Category category) {
  return tracker.Snapshot().Current(place, category);
}

TEST(CpuDevice, AllocationIsCountedUnderItsCategory) {
  MemoryTracker tracker;
  CpuDevice device(Place::kDevice, &tracker);
  StatusOr<Buffer> buffer = device.Allocate(1000, Category::kGrad);
  ASSERT_TRUE(buffer.ok()) << buffer.status().ToString();
  EXPECT_EQ(buffer->bytes(), 1000);
  EXPECT_EQ(buffer->category(), Category::kGrad);
  EXPECT_EQ(buffer->place(), Place::kDevice);
  EXPECT_EQ(Held(tracker, Place::kDevice, Category::kGrad), 1000);
  EXPECT_EQ(Held(tracker, Place::kDevice, Category::kParam), 0);
}

TEST(CpuDevice, HostPlaceIsCountedAsHost) {
  MemoryTracker tracker;
  CpuDevice device(Place::kHost, &tracker);
  StatusOr<Buffer> buffer = device.Allocate(64, Category::kOptimizer);
  ASSERT_TRUE(buffer.ok());
  EXPECT_EQ(buffer->place(), Place::kHost);
  EXPECT_EQ(Held(tracker, Place::kHost, Category::kOptimizer), 64);
  EXPECT_EQ(Held(tracker, Place::kDevice, Category::kOptimizer), 0);
}

TEST(CpuDevice, DestructionReleasesTheBytes) {
  MemoryTracker tracker;
  CpuDevice device(Place::kDevice, &tracker);
  {
    StatusOr<Buffer> buffer = device.Allocate(4096, Category::kActivation);
    ASSERT_TRUE(buffer.ok());
  }
  EXPECT_EQ(Held(tracker, Place::kDevice, Category::kActivation), 0);
  EXPECT_EQ(tracker.Snapshot().Peak(Place::kDevice, Category::kActivation), 4096);
}

TEST(CpuDevice, ResetReleasesEarlyAndEmpties) {
  MemoryTracker tracker;
  CpuDevice device(Place::kDevice, &tracker);
  Buffer buffer = device.Allocate(128, Category::kComm).value();
  buffer.Reset();
  EXPECT_TRUE(buffer.empty());
  EXPECT_EQ(buffer.bytes(), 0);
  EXPECT_EQ(Held(tracker, Place::kDevice, Category::kComm), 0);
}

TEST(CpuDevice, MoveTransfersOwnership) {
  MemoryTracker tracker;
  CpuDevice device(Place::kDevice, &tracker);
  Buffer source = device.Allocate(256, Category::kParam).value();
  void* data = source.data();
  Buffer target(std::move(source));
  EXPECT_TRUE(source.empty());  // NOLINT(bugprone-use-after-move): the moved-from state is pinned
  EXPECT_EQ(source.bytes(), 0);
  EXPECT_EQ(target.data(), data);
  EXPECT_EQ(target.bytes(), 256);
  EXPECT_EQ(Held(tracker, Place::kDevice, Category::kParam), 256);
  source.Reset();  // an empty buffer releases nothing
  EXPECT_EQ(Held(tracker, Place::kDevice, Category::kParam), 256);
}

TEST(CpuDevice, MoveAssignmentReleasesTheOverwrittenBuffer) {
  MemoryTracker tracker;
  CpuDevice device(Place::kDevice, &tracker);
  Buffer target = device.Allocate(100, Category::kParam).value();
  Buffer source = device.Allocate(30, Category::kGrad).value();
  target = std::move(source);
  EXPECT_EQ(Held(tracker, Place::kDevice, Category::kParam), 0);
  EXPECT_EQ(Held(tracker, Place::kDevice, Category::kGrad), 30);
  EXPECT_EQ(target.category(), Category::kGrad);
}

TEST(CpuDevice, MemoryIsZeroFilledEvenWhenReused) {
  MemoryTracker tracker;
  CpuDevice device(Place::kDevice, &tracker);
  constexpr int64_t kBytes = 1 << 16;
  // Dirty a block and give it back, so the next allocation is likely to get the same memory.
  {
    Buffer dirty = device.Allocate(kBytes, Category::kWorkspace).value();
    std::memset(dirty.data(), 0xAB, kBytes);
  }
  Buffer buffer = device.Allocate(kBytes, Category::kWorkspace).value();
  const unsigned char* bytes = buffer.as<unsigned char>();
  int64_t nonzero = 0;
  for (int64_t i = 0; i < kBytes; ++i) nonzero += bytes[i] != 0;
  EXPECT_EQ(nonzero, 0);
}

TEST(CpuDevice, DataIsAlignedTo64Bytes) {
  MemoryTracker tracker;
  CpuDevice device(Place::kDevice, &tracker);
  for (int64_t bytes : {1, 3, 63, 65, 1000, 4097}) {
    Buffer buffer = device.Allocate(bytes, Category::kWorkspace).value();
    EXPECT_EQ(reinterpret_cast<uintptr_t>(buffer.data()) % 64, 0u) << bytes << " bytes";
  }
}

TEST(CpuDevice, ZeroBytesStillGivesANonEmptyBuffer) {
  MemoryTracker tracker;
  CpuDevice device(Place::kDevice, &tracker);
  Buffer buffer = device.Allocate(0, Category::kParam).value();
  EXPECT_FALSE(buffer.empty());
  EXPECT_EQ(buffer.bytes(), 0);
  EXPECT_EQ(Held(tracker, Place::kDevice, Category::kParam), 0);
}

TEST(CpuDevice, ACapacityRefusesWhatWouldPassItAndSaysWhatIsFree) {
  MemoryTracker tracker;
  CpuDevice device(Place::kDevice, &tracker, /*capacity_bytes=*/4096);
  Buffer a = device.Allocate(3000, Category::kParam).value();
  EXPECT_EQ(device.FreeBytes().value(), 1096);
  StatusOr<Buffer> b = device.Allocate(2000, Category::kGrad);
  ASSERT_FALSE(b.ok());
  EXPECT_EQ(b.status().code(), StatusCode::kResourceExhausted);
  EXPECT_NE(b.status().message().find("holds 2.93 KiB already, 1.07 KiB free"), std::string::npos)
      << b.status().message();
  EXPECT_EQ(Held(tracker, Place::kDevice, Category::kGrad), 0);
  a.Reset();
  EXPECT_TRUE(device.Allocate(2000, Category::kGrad).ok());  // room again
}

// A device that is always full: how a failed allocation looks to the caller.
class FullDevice final : public Device {
 public:
  explicit FullDevice(MemoryTracker* tracker) : Device(Place::kDevice, tracker) {}
  DeviceKind kind() const override { return DeviceKind::kCpu; }
  std::string name() const override { return "full-device"; }

 protected:
  void* RawAllocate(int64_t) override { return nullptr; }
  void RawFree(void*) override {}
};

// Serving a threaded stream, a released buffer is counted gone at once and freed after the work
// the stream had before the release: that work may still write it (under AddressSanitizer an
// early free would be a reported use after free). Stopping makes frees immediate again.
TEST(CpuDevice, ServingAStreamFreesAfterTheStreamsEarlierWork) {
  MemoryTracker tracker;
  CpuDevice device(Place::kDevice, &tracker);
  HostStream stream(HostStream::Mode::kThreaded);
  device.ServeStream(&stream);
  Buffer buf = device.Allocate(4096, Category::kGrad).value();
  std::atomic<bool> released{false};
  char* data = buf.as<char>();
  EXPECT_TRUE(stream
                  .Enqueue([&released, data] {
                    while (!released.load()) std::this_thread::yield();
                    std::memset(data, 7, 4096);  // after the release, before the free
                    return Status::Ok();
                  })
                  .ok());
  buf.Reset();
  EXPECT_EQ(tracker.Snapshot().CurrentTotal(Place::kDevice), 0) << "counted gone at the release";
  released = true;
  ASSERT_TRUE(stream.Synchronize().ok());

  device.StopServing(&stream);
  Buffer later = device.Allocate(64, Category::kGrad).value();
  later.Reset();  // at once: nothing queued holds it
  EXPECT_EQ(tracker.Snapshot().CurrentTotal(Place::kDevice), 0);
}

// StopServing leaves a device that serves another stream alone.
TEST(CpuDevice, StopServingOnlyEndsItsOwnStream) {
  MemoryTracker tracker;
  CpuDevice device(Place::kDevice, &tracker);
  HostStream first(HostStream::Mode::kThreaded), second(HostStream::Mode::kThreaded);
  device.ServeStream(&second);
  device.StopServing(&first);
  // Still served by `second`: the free waits for its held work.
  std::atomic<bool> go{false};
  Buffer buf = device.Allocate(256, Category::kGrad).value();
  char* data = buf.as<char>();
  EXPECT_TRUE(second
                  .Enqueue([&go, data] {
                    while (!go.load()) std::this_thread::yield();
                    data[255] = 1;
                    return Status::Ok();
                  })
                  .ok());
  buf.Reset();
  go = true;
  ASSERT_TRUE(second.Synchronize().ok());
  device.StopServing(&second);
}

TEST(Device, FailedAllocationIsResourceExhaustedAndUncounted) {
  MemoryTracker tracker;
  FullDevice device(&tracker);
  StatusOr<Buffer> buffer = device.Allocate(2048, Category::kOptimizer);
  ASSERT_FALSE(buffer.ok());
  EXPECT_EQ(buffer.status().code(), StatusCode::kResourceExhausted);
  const std::string& message = buffer.status().message();
  EXPECT_NE(message.find("2.00 KiB"), std::string::npos) << message;
  EXPECT_NE(message.find("optimizer"), std::string::npos) << message;
  EXPECT_NE(message.find("full-device"), std::string::npos) << message;
  EXPECT_EQ(Held(tracker, Place::kDevice, Category::kOptimizer), 0);
}

TEST(DeviceDeathTest, NegativeSizeDies) {
  MemoryTracker tracker;
  CpuDevice device(Place::kDevice, &tracker);
  EXPECT_DEATH((void)device.Allocate(-1, Category::kParam), "bytes >= 0|\\(bytes\\)>=\\(0\\)");
}

}  // namespace
}  // namespace hoist
