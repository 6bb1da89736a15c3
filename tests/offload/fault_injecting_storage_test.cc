#include "offload/fault_injecting_storage.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cerrno>
#include <cstring>
#include <vector>

#include "offload/memory_storage.h"
#include "offload/posix_storage.h"
#include "tests/offload/storage_test_util.h"

namespace hoist::offload {
namespace {

using ::testing::HasSubstr;

class FaultInjectingStorageTest : public ::testing::Test {
 protected:
  MemoryStorage base_{"/nvme/hoist/rank0.swp", 1 << 20, 4096};
  FaultInjectingStorage storage_{base_};
  PinnedHostPool pool_;
  PinnedBuffer buf_ = std::move(pool_.Allocate(64 << 10, Category::kOptimizer).value());
};

TEST_F(FaultInjectingStorageTest, EioAtTheNthReadNamesPathOffsetSizeAndErrno) {
  storage_.Inject(StorageFault::Error(IoOp::kRead, EIO).Nth(2));
  EXPECT_TRUE(storage_.Read(0, buf_.data(), 4096).ok());
  EXPECT_TRUE(storage_.Write(0, buf_.data(), 4096).ok());  // writes are not counted
  Status s = storage_.Read(0, buf_.data(), 65536);
  EXPECT_EQ(s.code(), StatusCode::kIoError);
  EXPECT_EQ(s.message(),
            "offload: reading 65536 bytes at offset 0 of /nvme/hoist/rank0.swp failed: "
            "Input/output error (EIO)");
  EXPECT_TRUE(storage_.Read(0, buf_.data(), 4096).ok()) << "not sticky: fires once";
  EXPECT_EQ(storage_.faults_fired(), 1);
}

TEST_F(FaultInjectingStorageTest, EnospcAtAGivenOffset) {
  storage_.Inject(StorageFault::Error(IoOp::kWrite, ENOSPC).AtOffset(524288 + 100));
  EXPECT_TRUE(storage_.Write(0, buf_.data(), 65536).ok());
  Status s = storage_.Write(524288, buf_.data(), 65536);
  EXPECT_EQ(s.code(), StatusCode::kResourceExhausted);
  EXPECT_THAT(s.message(), HasSubstr("writing 65536 bytes at offset 524288 of "
                                     "/nvme/hoist/rank0.swp failed: No space left on device "
                                     "(ENOSPC)"));
}

TEST_F(FaultInjectingStorageTest, StickyFaultKeepsFiring) {
  storage_.Inject(StorageFault::Error(IoOp::kWrite, EIO).Sticky());
  EXPECT_FALSE(storage_.Write(0, buf_.data(), 4096).ok());
  EXPECT_FALSE(storage_.Write(8192, buf_.data(), 4096).ok());
  EXPECT_EQ(storage_.faults_fired(), 2);
  storage_.Clear();
  EXPECT_TRUE(storage_.Write(0, buf_.data(), 4096).ok());
}

TEST_F(FaultInjectingStorageTest, ShortReadDeliversThePrefixThenDataLoss) {
  testing::FillPattern(buf_.data(), 65536, 9);
  ASSERT_TRUE(storage_.Write(0, buf_.data(), 65536).ok());
  std::memset(buf_.data(), 0, 65536);
  storage_.Inject(StorageFault::ShortTransfer(IoOp::kRead, 10000));
  Status s = storage_.Read(0, buf_.data(), 65536);
  EXPECT_EQ(s.code(), StatusCode::kDataLoss);
  EXPECT_THAT(s.message(), HasSubstr("reading 65536 bytes at offset 0 of /nvme/hoist/rank0.swp "
                                     "failed after 8192 bytes"));
  EXPECT_TRUE(testing::HasPattern(buf_.data(), 8192, 9));
}

TEST_F(FaultInjectingStorageTest, ShortWriteLandsThePrefixThenEnospc) {
  testing::FillPattern(buf_.data(), 65536, 4);
  storage_.Inject(StorageFault::ShortTransfer(IoOp::kWrite, 4096));
  Status s = storage_.Write(8192, buf_.data(), 16384);
  EXPECT_EQ(s.code(), StatusCode::kResourceExhausted);
  EXPECT_THAT(s.message(), HasSubstr("writing 16384 bytes at offset 8192 of "
                                     "/nvme/hoist/rank0.swp failed after 4096 bytes: No space "
                                     "left on device (ENOSPC)"));
  auto in_buf = pool_.Allocate(8192, Category::kOptimizer);
  ASSERT_TRUE(base_.Read(8192, in_buf->data(), 8192).ok());
  EXPECT_TRUE(testing::HasPattern(in_buf->data(), 4096, 4));
}

TEST_F(FaultInjectingStorageTest, DelayedRequestStillCompletes) {
  testing::FillPattern(buf_.data(), 4096, 2);
  storage_.Inject(StorageFault::Delay(IoOp::kWrite, std::chrono::microseconds(100)));
  EXPECT_TRUE(storage_.Write(0, buf_.data(), 4096).ok());
  EXPECT_EQ(storage_.faults_fired(), 1);
  std::memset(buf_.data(), 0, 4096);
  ASSERT_TRUE(storage_.Read(0, buf_.data(), 4096).ok());
  EXPECT_TRUE(testing::HasPattern(buf_.data(), 4096, 2));
}

TEST_F(FaultInjectingStorageTest, BatchSurfacesTheInjectedFaultAtWait) {
  storage_.Inject(StorageFault::Error(IoOp::kRead, EIO).Nth(2));
  std::vector<IoRequest> batch = {{IoOp::kRead, 0, buf_.bytes(), 4096},
                                  {IoOp::kRead, 4096, buf_.bytes() + 4096, 4096},
                                  {IoOp::kWrite, 8192, buf_.bytes() + 8192, 4096}};
  ASSERT_TRUE(storage_.Submit(batch).ok());
  Status s = storage_.Wait();
  EXPECT_EQ(s.code(), StatusCode::kIoError);
  EXPECT_THAT(s.message(), HasSubstr("reading 4096 bytes at offset 4096"));
}

TEST(FaultInjectingStorage, WrapsPosixStorageAndNamesItsFile) {
  testing::ScratchDir dir;
  PosixStorageOptions options;
  options.direct_io = false;
  auto base = PosixStorage::Open(dir.File("rank3.swp"), 1 << 16, options);
  ASSERT_TRUE(base.ok());
  FaultInjectingStorage storage(**base);
  storage.Inject(StorageFault::Error(IoOp::kRead, EIO));
  char buf[100] = {};
  Status s = storage.Read(12, buf, 100);
  EXPECT_THAT(s.message(), HasSubstr("reading 100 bytes at offset 12 of " + dir.File("rank3.swp") +
                                     " failed: Input/output error (EIO)"));
}

}  // namespace
}  // namespace hoist::offload
