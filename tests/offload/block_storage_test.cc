#include "offload/block_storage.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cerrno>
#include <cstring>
#include <vector>

#include "offload/memory_storage.h"
#include "tests/offload/storage_test_util.h"

namespace hoist::offload {
namespace {

using ::testing::HasSubstr;

TEST(IoFailure, NamesFileOffsetSizeAndErrno) {
  Status s = IoFailure(IoOp::kRead, "/nvme/hoist/rank0.swp", 4194304, 1048576, EIO);
  EXPECT_EQ(s.code(), StatusCode::kIoError);
  EXPECT_EQ(s.message(),
            "offload: reading 1048576 bytes at offset 4194304 of /nvme/hoist/rank0.swp failed: "
            "Input/output error (EIO)");
}

TEST(IoFailure, DiskFullIsResourceExhaustedAndSaysHowFar) {
  Status s = IoFailure(IoOp::kWrite, "/nvme/a.swp", 0, 8192, ENOSPC, 4096);
  EXPECT_EQ(s.code(), StatusCode::kResourceExhausted);
  EXPECT_THAT(s.message(), HasSubstr("writing 8192 bytes at offset 0 of /nvme/a.swp failed after "
                                     "4096 bytes: No space left on device (ENOSPC)"));
}

// A fake system call that moves at most `chunk` bytes per call and fails with EINTR every
// third call.
struct ChoppyFile {
  std::vector<char> bytes;
  int64_t chunk;
  int calls = 0;
  ssize_t Read(int64_t off, void* p, int64_t n) {
    if (++calls % 3 == 0) {
      errno = EINTR;
      return -1;
    }
    const int64_t k = std::min<int64_t>({n, chunk, int64_t(bytes.size()) - off});
    std::memcpy(p, bytes.data() + off, size_t(k));
    return k;
  }
  ssize_t Write(int64_t off, void* p, int64_t n) {
    if (++calls % 3 == 0) {
      errno = EINTR;
      return -1;
    }
    const int64_t k = std::min<int64_t>({n, chunk, int64_t(bytes.size()) - off});
    std::memcpy(bytes.data() + off, p, size_t(k));
    return k;
  }
};

TEST(TransferFully, ResumesShortTransfersAndRetriesEintr) {
  ChoppyFile file{std::vector<char>(10000), 777};
  std::vector<char> out(9000), in(9000);
  testing::FillPattern(out.data(), 9000, 1);
  ASSERT_TRUE(
      TransferFully(IoOp::kWrite, "f", 1000, out.data(), 9000, [&](int64_t o, void* p, int64_t n) {
        return file.Write(o, p, n);
      }).ok());
  ASSERT_TRUE(
      TransferFully(IoOp::kRead, "f", 1000, in.data(), 9000, [&](int64_t o, void* p, int64_t n) {
        return file.Read(o, p, n);
      }).ok());
  EXPECT_TRUE(testing::HasPattern(in.data(), 9000, 1));
  EXPECT_GT(file.calls, 2 * (9000 / 777));
}

TEST(TransferFully, EndOfFileIsDataLossNamingHowFar) {
  ChoppyFile file{std::vector<char>(5000), 4096};
  std::vector<char> in(8192);
  Status s = TransferFully(IoOp::kRead, "/x/f.swp", 0, in.data(), 8192,
                           [&](int64_t o, void* p, int64_t n) { return file.Read(o, p, n); });
  EXPECT_EQ(s.code(), StatusCode::kDataLoss);
  EXPECT_THAT(s.message(), HasSubstr("reading 8192 bytes at offset 0 of /x/f.swp failed after "
                                     "5000 bytes: the file ends there"));
}

TEST(TransferFully, WriteWithoutProgressIsDiskFull) {
  Status s = TransferFully(IoOp::kWrite, "/x/f.swp", 4096, nullptr, 4096,
                           [](int64_t, void*, int64_t) -> ssize_t { return 0; });
  EXPECT_EQ(s.code(), StatusCode::kResourceExhausted);
  EXPECT_THAT(s.message(), HasSubstr("(ENOSPC)"));
}

TEST(TransferFully, SystemCallErrorCarriesErrno) {
  Status s = TransferFully(IoOp::kRead, "/x/f.swp", 0, nullptr, 512,
                           [](int64_t, void*, int64_t) -> ssize_t {
                             errno = EBADF;
                             return -1;
                           });
  EXPECT_EQ(s.code(), StatusCode::kIoError);
  EXPECT_THAT(s.message(), HasSubstr("reading 512 bytes at offset 0 of /x/f.swp failed: Bad file "
                                     "descriptor (EBADF)"));
}

TEST(MemoryStorage, RoundTripsUnalignedRanges) {
  MemoryStorage storage("mem0", 10000);
  std::vector<char> out(3333), in(3333);
  testing::FillPattern(out.data(), 3333, 7);
  ASSERT_TRUE(storage.Write(1234, out.data(), 3333).ok());
  ASSERT_TRUE(storage.Read(1234, in.data(), 3333).ok());
  EXPECT_TRUE(testing::HasPattern(in.data(), 3333, 7));
}

TEST(MemoryStorage, RejectsRequestsOutsideTheFile) {
  MemoryStorage storage("mem0", 4096);
  std::vector<char> buf(8192);
  Status s = storage.Read(2048, buf.data(), 4096);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(
      s.message(),
      HasSubstr("reading 4096 bytes at offset 2048 of mem0: outside the file's 4096 bytes"));
  EXPECT_FALSE(storage.Write(-1, buf.data(), 1).ok());
}

TEST(MemoryStorage, EnforcesItsAlignment) {
  MemoryStorage storage("mem0", 65536, 4096);
  PinnedHostPool pool;
  auto buf = pool.Allocate(8192, Category::kOptimizer);
  ASSERT_TRUE(buf.ok());
  EXPECT_TRUE(storage.Write(4096, buf->data(), 4096).ok());
  Status s = storage.Write(100, buf->data(), 4096);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("multiples of 4096"));
  EXPECT_FALSE(storage.Write(4096, buf->bytes() + 8, 4096).ok());
  EXPECT_FALSE(storage.Read(4096, buf->data(), 100).ok());
}

TEST(MemoryStorage, SubmitRunsABatchAndWaitReportsTheFirstError) {
  MemoryStorage storage("mem0", 16384);
  std::vector<char> a(4096), b(4096), c(4096);
  testing::FillPattern(a.data(), 4096, 1);
  testing::FillPattern(b.data(), 4096, 2);
  std::vector<IoRequest> writes = {{IoOp::kWrite, 0, a.data(), 4096},
                                   {IoOp::kWrite, 8192, b.data(), 4096}};
  ASSERT_TRUE(storage.Submit(writes).ok());
  ASSERT_TRUE(storage.Wait().ok());
  std::vector<IoRequest> mixed = {{IoOp::kRead, 8192, c.data(), 4096},
                                  {IoOp::kRead, 16384, a.data(), 4096},
                                  {IoOp::kWrite, 4096, b.data(), 4096}};
  ASSERT_TRUE(storage.Submit(mixed).ok());
  Status s = storage.Wait();
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("offset 16384"));
  EXPECT_TRUE(testing::HasPattern(c.data(), 4096, 2));
  // The request after the failing one still ran, and the error does not linger.
  ASSERT_TRUE(storage.Read(4096, c.data(), 4096).ok());
  EXPECT_TRUE(testing::HasPattern(c.data(), 4096, 2));
  EXPECT_TRUE(storage.Wait().ok());
}

}  // namespace
}  // namespace hoist::offload
