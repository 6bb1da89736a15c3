// Compiled only in builds with CUDA; tests that need a GPU skip with the reason on machines
// without one, and one pins what opening the device does on such a machine. The allocator's own
// rules are tested on the CPU (caching_allocator_test.cc).
#if defined(HOIST_HAVE_CUDA)

#include "core/cuda/cuda_caching_device.h"

#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "core/cuda/cuda_device.h"
#include "core/cuda/stream.h"

namespace hoist {
namespace {

#define HOIST_CACHING_SKIP_WITHOUT_GPU()                                                  \
  do {                                                                                    \
    if (CudaDeviceCount() == 0) {                                                         \
      GTEST_SKIP() << "no CUDA GPU visible (driver " << CudaDriverVersionString() << ")"; \
    }                                                                                     \
  } while (0)

#define HOIST_CACHING_SKIP_WITH_GPU()                                                         \
  do {                                                                                        \
    if (CudaDeviceCount() > 0) GTEST_SKIP() << "pins the no-GPU behaviour; a GPU is visible"; \
  } while (0)

constexpr int64_t kMiB = int64_t{1} << 20;

bool Contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

TEST(CudaCachingDevice, OpenWithoutGpuIsUnavailableAndSaysWhatToDo) {
  HOIST_CACHING_SKIP_WITH_GPU();
  CudaStream no_stream;  // none can be created without a GPU
  StatusOr<std::unique_ptr<CudaCachingDevice>> device = CudaCachingDevice::Open(0, no_stream);
  ASSERT_FALSE(device.ok());
  EXPECT_EQ(device.status().code(), StatusCode::kUnavailable);
  EXPECT_TRUE(Contains(device.status().message(), "no usable CUDA GPU"))
      << device.status().message();
  EXPECT_TRUE(Contains(device.status().message(), "CUDA_VISIBLE_DEVICES"))
      << device.status().message();
}

// GPU 0 serving a stream of its own, with a tracker of its own. Members are destroyed in reverse:
// the device before the stream it borrows; Buffers live in the test body and die before both.
class CudaCachingDeviceTest : public ::testing::Test {
 protected:
  void SetUp() override {
    HOIST_CACHING_SKIP_WITHOUT_GPU();
    ASSERT_EQ(cudaSetDevice(0), cudaSuccess);
    StatusOr<CudaStream> stream = CudaStream::Create();
    ASSERT_TRUE(stream.ok()) << stream.status().ToString();
    stream_ = std::move(*stream);
    StatusOr<std::unique_ptr<CudaCachingDevice>> device =
        CudaCachingDevice::Open(0, stream_, &tracker_);
    ASSERT_TRUE(device.ok()) << device.status().ToString();
    device_ = std::move(*device);
  }

  int64_t TrackedDeviceBytes() const { return tracker_.Snapshot().CurrentTotal(Place::kDevice); }

  MemoryTracker tracker_;
  CudaStream stream_;
  std::unique_ptr<CudaCachingDevice> device_;
};

TEST_F(CudaCachingDeviceTest, OpenPastLastGpuIsInvalidArgument) {
  EXPECT_EQ(CudaCachingDevice::Open(CudaDeviceCount(), stream_, &tracker_).status().code(),
            StatusCode::kInvalidArgument);
}

TEST_F(CudaCachingDeviceTest, NameSaysCachingAndOpeningAllocatesNothing) {
  EXPECT_TRUE(Contains(device_->name(), "cuda:0 (")) << device_->name();
  EXPECT_TRUE(Contains(device_->name(), ") caching")) << device_->name();
  EXPECT_EQ(device_->kind(), DeviceKind::kCuda);
  EXPECT_EQ(device_->place(), Place::kDevice);
  EXPECT_EQ(device_->stream(), stream_.get());
  EXPECT_EQ(device_->memory_reserved(), 0);
}

TEST_F(CudaCachingDeviceTest, FreedBlockIsReusedWithoutGrowingTheReserve) {
  StatusOr<Buffer> first = device_->Allocate(1 * kMiB, Category::kActivation);
  ASSERT_TRUE(first.ok()) << first.status().ToString();
  void* address = first->data();
  const int64_t reserved = device_->memory_reserved();
  EXPECT_EQ(reserved, 2 * kMiB);
  EXPECT_EQ(device_->memory_allocated(), 1 * kMiB);
  first->Reset();
  EXPECT_EQ(device_->memory_allocated(), 0);
  EXPECT_EQ(device_->memory_reserved(), reserved);

  StatusOr<Buffer> second = device_->Allocate(1 * kMiB, Category::kActivation);
  ASSERT_TRUE(second.ok()) << second.status().ToString();
  EXPECT_EQ(second->data(), address);
  EXPECT_EQ(device_->memory_reserved(), reserved);
  CachingAllocatorStats stats = device_->stats();
  EXPECT_EQ(stats.num_segments, 1);
  EXPECT_EQ(stats.num_cache_hits, 1);
}

TEST_F(CudaCachingDeviceTest, ReusedMemoryIsZeroFilledOnTheServedStream) {
  constexpr int64_t kBytes = 256 * 1024;
  void* address = nullptr;
  {
    StatusOr<Buffer> dirty = device_->Allocate(kBytes, Category::kWorkspace);
    ASSERT_TRUE(dirty.ok()) << dirty.status().ToString();
    address = dirty->data();
    ASSERT_EQ(cudaMemsetAsync(dirty->data(), 0xAB, kBytes, stream_.get()), cudaSuccess);
  }  // back in the cache, the 0xAB fill still queued on the served stream
  StatusOr<Buffer> again = device_->Allocate(kBytes, Category::kWorkspace);
  ASSERT_TRUE(again.ok()) << again.status().ToString();
  ASSERT_EQ(again->data(), address) << "the test needs the block to be reused";
  std::vector<unsigned char> host(kBytes, 0xFF);
  ASSERT_EQ(
      cudaMemcpyAsync(host.data(), again->data(), kBytes, cudaMemcpyDeviceToHost, stream_.get()),
      cudaSuccess);
  ASSERT_TRUE(stream_.Synchronize().ok());
  for (int64_t i = 0; i < kBytes; ++i) ASSERT_EQ(host[i], 0) << "byte " << i;
}

TEST_F(CudaCachingDeviceTest, TrackerCountsTheRequestedBytesByCategory) {
  std::vector<Buffer> buffers;
  for (auto [bytes, category] :
       {std::pair{int64_t{1000}, Category::kParam}, std::pair{3 * kMiB + 7, Category::kGrad},
        std::pair{12 * kMiB, Category::kActivation}}) {
    StatusOr<Buffer> buffer = device_->Allocate(bytes, category);
    ASSERT_TRUE(buffer.ok()) << buffer.status().ToString();
    buffers.push_back(std::move(*buffer));
  }
  MemorySnapshot snap = tracker_.Snapshot();
  EXPECT_EQ(snap.Current(Place::kDevice, Category::kParam), 1000);
  EXPECT_EQ(snap.Current(Place::kDevice, Category::kGrad), 3 * kMiB + 7);
  EXPECT_EQ(TrackedDeviceBytes(), device_->stats().requested_bytes);
  EXPECT_GE(device_->memory_allocated(), TrackedDeviceBytes());
  EXPECT_GE(device_->memory_reserved(), device_->memory_allocated());

  buffers.clear();
  EXPECT_EQ(TrackedDeviceBytes(), 0);
  EXPECT_EQ(device_->memory_allocated(), 0);
  EXPECT_GT(device_->memory_reserved(), 0);  // cached, not counted by the tracker
}

TEST_F(CudaCachingDeviceTest, PeaksFollowTheCacheUntilReset) {
  {
    StatusOr<Buffer> a = device_->Allocate(12 * kMiB, Category::kActivation);
    StatusOr<Buffer> b = device_->Allocate(12 * kMiB, Category::kActivation);
    ASSERT_TRUE(a.ok() && b.ok());
  }
  EXPECT_EQ(device_->max_memory_allocated(), 24 * kMiB);
  EXPECT_EQ(device_->max_memory_reserved(), 24 * kMiB);
  device_->EmptyCache();
  EXPECT_EQ(device_->memory_reserved(), 0);
  device_->reset_peaks();
  EXPECT_EQ(device_->max_memory_allocated(), 0);
  EXPECT_EQ(device_->max_memory_reserved(), 0);
}

TEST_F(CudaCachingDeviceTest, TooLargeARequestIsResourceExhausted) {
  StatusOr<CudaMemInfo> info = device_->MemGetInfo();
  ASSERT_TRUE(info.ok()) << info.status().ToString();
  StatusOr<Buffer> buffer = device_->Allocate(2 * info->total_bytes, Category::kParam);
  ASSERT_FALSE(buffer.ok());
  EXPECT_EQ(buffer.status().code(), StatusCode::kResourceExhausted);
  EXPECT_EQ(device_->stats().num_alloc_failures, 1);
  EXPECT_EQ(TrackedDeviceBytes(), 0);
  // The failure leaves the device usable.
  EXPECT_TRUE(device_->Allocate(1 * kMiB, Category::kParam).ok());
}

// The requirement: the tracker's figures match cudaMemGetInfo within the allocator's
// reserve. What cudaMemGetInfo sees taken lies between the tracked bytes and the reserve plus
// the driver's slack: its own bookkeeping (page tables) may grow by a few pages per mapping, so
// we allow 2 MiB per segment and 16 MiB in all besides. Assumes no other process allocates on
// the GPU meanwhile (a dedicated test GPU).
TEST_F(CudaCachingDeviceTest, MemGetInfoMatchesTheTrackerWithinTheReserve) {
  // The first allocation and fill may load the runtime's own code and heaps; not ours to count.
  {
    StatusOr<Buffer> warm = device_->Allocate(1 * kMiB, Category::kWorkspace);
    ASSERT_TRUE(warm.ok()) << warm.status().ToString();
  }
  ASSERT_TRUE(stream_.Synchronize().ok());
  device_->EmptyCache();
  StatusOr<CudaMemInfo> before = device_->MemGetInfo();
  ASSERT_TRUE(before.ok()) << before.status().ToString();

  std::vector<Buffer> buffers;
  for (int64_t bytes :
       {int64_t{1000}, 700 * 1024 + int64_t{3}, 3 * kMiB, 5 * kMiB, 30 * kMiB, 100 * kMiB + 1}) {
    StatusOr<Buffer> buffer = device_->Allocate(bytes, Category::kActivation);
    ASSERT_TRUE(buffer.ok()) << buffer.status().ToString();
    buffers.push_back(std::move(*buffer));
  }
  ASSERT_TRUE(stream_.Synchronize().ok());
  StatusOr<CudaMemInfo> after = device_->MemGetInfo();
  ASSERT_TRUE(after.ok()) << after.status().ToString();

  const CachingAllocatorStats stats = device_->stats();
  const int64_t slack_bytes = 16 * kMiB + 2 * kMiB * stats.num_segments;
  const int64_t taken = before->free_bytes - after->free_bytes;
  EXPECT_GE(taken, TrackedDeviceBytes());
  EXPECT_LE(taken, stats.reserved_bytes + slack_bytes)
      << "reserved " << stats.reserved_bytes << " in " << stats.num_segments << " segments";
  EXPECT_EQ(TrackedDeviceBytes(), stats.requested_bytes);

  buffers.clear();
  device_->EmptyCache();
  EXPECT_EQ(device_->memory_reserved(), 0);
  StatusOr<CudaMemInfo> emptied = device_->MemGetInfo();
  ASSERT_TRUE(emptied.ok()) << emptied.status().ToString();
  EXPECT_GE(emptied->free_bytes, before->free_bytes - slack_bytes);
  EXPECT_LE(emptied->free_bytes, before->free_bytes + slack_bytes);
}

}  // namespace
}  // namespace hoist

#endif  // defined(HOIST_HAVE_CUDA)
