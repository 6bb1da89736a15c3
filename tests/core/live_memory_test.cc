// live_memory: what it records while enabled, and that it answers yes to everything while off.
#include "core/live_memory.h"

#include <gtest/gtest.h>

#include <vector>

#include "core/device.h"

namespace hoist {
namespace {

TEST(LiveMemory, HoldsWhatDevicesHandOutWhileEnabled) {
  MemoryTracker tracker;
  CpuDevice device(Place::kDevice, &tracker);
  std::vector<char> pageable(256);
  {
    live_memory::ScopedEnable on;
    Buffer buffer = device.Allocate(100, Category::kWorkspace).value();
    const char* p = buffer.as<char>();
    EXPECT_TRUE(live_memory::Contains(p, 100));
    EXPECT_TRUE(live_memory::Contains(p + 40, 60));
    EXPECT_FALSE(live_memory::Contains(p + 40, 61)) << "past the buffer's end";
    EXPECT_FALSE(live_memory::Contains(pageable.data(), 1)) << "a vector is nobody's buffer";
    EXPECT_TRUE(live_memory::OnDevice(p));
    CpuDevice host(Place::kHostPinned, &tracker);
    Buffer pinned = host.Allocate(64, Category::kWorkspace).value();
    EXPECT_TRUE(live_memory::Contains(pinned.data(), 64));
    EXPECT_FALSE(live_memory::OnDevice(pinned.data())) << "host memory, though recorded";
    EXPECT_FALSE(live_memory::OnDevice(pageable.data()));
    buffer.Reset();
    EXPECT_FALSE(live_memory::Contains(p, 1)) << "released";
    EXPECT_FALSE(live_memory::OnDevice(p)) << "released";
  }
  EXPECT_TRUE(live_memory::OnDevice(pageable.data())) << "off: every pointer passes";
  EXPECT_FALSE(live_memory::Enabled());
  EXPECT_TRUE(live_memory::Contains(pageable.data(), 1)) << "off: every pointer passes";
}

}  // namespace
}  // namespace hoist
