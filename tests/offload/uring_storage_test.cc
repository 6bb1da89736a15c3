// UringStorage against the kernel's io_uring; skips with the reason where this build has no
// liburing or the kernel refuses a ring.
#include <fcntl.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstring>
#include <memory>
#include <vector>

#include "offload/open_storage.h"
#include "offload/pinned_pool.h"
#include "offload/posix_storage.h"
#include "tests/offload/storage_test_util.h"

#ifdef HOIST_HAVE_URING
#include "offload/uring_storage.h"
#endif

namespace hoist::offload {
namespace {

using ::testing::HasSubstr;

// Why io_uring cannot be tested here, or empty when it can.
std::string WhyNoUring() {
  if (!UringStorageBuilt()) return "this build has no io_uring storage (liburing not found)";
  auto allowed = ProbeIoUring();
  if (!allowed.ok()) return "probing io_uring failed: " + allowed.status().ToString();
  if (!*allowed) return "the kernel refuses io_uring here (kernel.io_uring_disabled or seccomp)";
  return "";
}

#define HOIST_SKIP_WITHOUT_URING()         \
  do {                                     \
    const std::string why = WhyNoUring();  \
    if (!why.empty()) GTEST_SKIP() << why; \
  } while (0)

TEST(OpenBlockStorage, AutoPicksIoUringWhereTheKernelAllowsIt) {
  HOIST_SKIP_WITHOUT_URING();
#ifdef HOIST_HAVE_URING
  testing::ScratchDir dir;
  auto storage = OpenBlockStorage(dir.File("rank0.swp"), 1 << 20);
  ASSERT_TRUE(storage.ok()) << storage.status().ToString();
  EXPECT_NE(dynamic_cast<UringStorage*>(storage->get()), nullptr);
  BlockStorageOptions options;
  options.backend = StorageBackend::kUring;
  options.queue_depth = 3;
  options.block_size_bytes = 65536;
  auto asked = OpenBlockStorage(dir.File("rank1.swp"), 1 << 20, options);
  ASSERT_TRUE(asked.ok()) << asked.status().ToString();
  auto* uring = dynamic_cast<UringStorage*>(asked->get());
  ASSERT_NE(uring, nullptr);
  EXPECT_EQ(uring->queue_depth(), 3);
  EXPECT_EQ(uring->block_size_bytes(), 65536);
#endif
}

#ifdef HOIST_HAVE_URING

bool Exists(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0;
}

UringStorageOptions Options(int queue_depth, int64_t block_size_bytes = 65536) {
  UringStorageOptions options;
  options.queue_depth = queue_depth;
  options.block_size_bytes = block_size_bytes;
  return options;
}

class UringRoundTrip : public ::testing::TestWithParam<int> {};

TEST_P(UringRoundTrip, SeveralMebibytesAcrossManyBlocks) {
  HOIST_SKIP_WITHOUT_URING();
  testing::ScratchDir dir;
  constexpr int64_t kFile = 8 << 20, kBytes = 5 << 20, kOffset = 1 << 20;
  auto storage = UringStorage::Open(dir.File("rank0.swp"), kFile, Options(GetParam()));
  ASSERT_TRUE(storage.ok()) << storage.status().ToString();
  PinnedHostPool pool;
  auto out = pool.Allocate(kBytes, Category::kOptimizer);
  auto in = pool.Allocate(kBytes, Category::kOptimizer);
  ASSERT_TRUE(out.ok() && in.ok());
  testing::FillPattern(out->data(), kBytes, GetParam());
  ASSERT_TRUE((*storage)->Write(kOffset, out->data(), kBytes).ok());
  ASSERT_TRUE((*storage)->Read(kOffset, in->data(), kBytes).ok());
  EXPECT_TRUE(testing::HasPattern(in->data(), kBytes, GetParam()));

  // The same through one batch of two requests, with the ring kept full by Wait.
  std::memset(in->data(), 0, kBytes);
  const std::vector<IoRequest> reads = {
      {IoOp::kRead, kOffset, in->bytes(), kBytes / 2},
      {IoOp::kRead, kOffset + kBytes / 2, in->bytes() + kBytes / 2, kBytes / 2}};
  ASSERT_TRUE((*storage)->Submit(reads).ok());
  ASSERT_TRUE((*storage)->Wait().ok());
  EXPECT_TRUE(testing::HasPattern(in->data(), kBytes, GetParam()));
}

INSTANTIATE_TEST_SUITE_P(QueueDepth, UringRoundTrip, ::testing::Values(1, 2, 8));

TEST(UringStorage, BatchOfMixedReadsAndWritesToDisjointRanges) {
  HOIST_SKIP_WITHOUT_URING();
  testing::ScratchDir dir;
  auto storage = UringStorage::Open(dir.File("rank0.swp"), 4 << 20, Options(4, 32768));
  ASSERT_TRUE(storage.ok()) << storage.status().ToString();
  PinnedHostPool pool;
  constexpr int64_t kPart = 256 << 10;
  auto buf = pool.Allocate(8 * kPart, Category::kOptimizer);
  ASSERT_TRUE(buf.ok());
  std::byte* b = buf->bytes();
  for (int i = 0; i < 4; ++i) testing::FillPattern(b + i * kPart, kPart, 10 + i);
  // Ranges 0 and 1 are written first, so that the mixed batch has something to read.
  ASSERT_TRUE((*storage)->Write(0, b, 2 * kPart).ok());
  const std::vector<IoRequest> mixed = {{IoOp::kRead, 0, b + 4 * kPart, kPart},
                                        {IoOp::kWrite, 2 * kPart, b + 2 * kPart, kPart},
                                        {IoOp::kRead, kPart, b + 5 * kPart, kPart},
                                        {IoOp::kWrite, 3 * kPart, b + 3 * kPart, kPart}};
  ASSERT_TRUE((*storage)->Submit(mixed).ok());
  ASSERT_TRUE((*storage)->Wait().ok());
  EXPECT_TRUE(testing::HasPattern(b + 4 * kPart, kPart, 10));
  EXPECT_TRUE(testing::HasPattern(b + 5 * kPart, kPart, 11));
  ASSERT_TRUE((*storage)->Read(2 * kPart, b + 6 * kPart, 2 * kPart).ok());
  EXPECT_TRUE(testing::HasPattern(b + 6 * kPart, kPart, 12));
  EXPECT_TRUE(testing::HasPattern(b + 7 * kPart, kPart, 13));
}

TEST(UringStorage, SameResultsAsPosixStorage) {
  HOIST_SKIP_WITHOUT_URING();
  testing::ScratchDir dir;
  constexpr int64_t kFile = 2 << 20;
  auto uring = UringStorage::Open(dir.File("uring.swp"), kFile, Options(2, 4096 * 3));
  auto posix = PosixStorage::Open(dir.File("posix.swp"), kFile);
  ASSERT_TRUE(uring.ok()) << uring.status().ToString();
  ASSERT_TRUE(posix.ok()) << posix.status().ToString();
  PinnedHostPool pool;
  auto src = pool.Allocate(kFile, Category::kOptimizer);
  auto a = pool.Allocate(kFile, Category::kOptimizer);
  auto p = pool.Allocate(kFile, Category::kOptimizer);
  ASSERT_TRUE(src.ok() && a.ok() && p.ok());
  testing::FillPattern(src->data(), kFile, 3);
  // Overlapping writes in sequence, then a whole-file read: the later write must win in both.
  const struct {
    int64_t offset, bytes, from;
  } writes[] = {{0, 1 << 20, 0}, {4096 * 5, 4096 * 40, 1 << 20}, {1 << 20, 1 << 20, 8192}};
  for (const auto& w : writes) {
    ASSERT_TRUE((*uring)->Write(w.offset, src->bytes() + w.from, w.bytes).ok());
    ASSERT_TRUE((*posix)->Write(w.offset, src->bytes() + w.from, w.bytes).ok());
  }
  ASSERT_TRUE((*uring)->Read(0, a->data(), kFile).ok());
  ASSERT_TRUE((*posix)->Read(0, p->data(), kFile).ok());
  EXPECT_EQ(std::memcmp(a->data(), p->data(), kFile), 0);
  // And the bytes io_uring wrote sit where plain reads of the file find them (a scratch file
  // cannot be opened twice: Open only creates).
  std::vector<unsigned char> plain(kFile);
  const int fd = ::open(dir.File("uring.swp").c_str(), O_RDONLY | O_CLOEXEC);
  ASSERT_GE(fd, 0);
  EXPECT_EQ(::pread(fd, plain.data(), kFile, 0), kFile);
  ::close(fd);
  EXPECT_EQ(std::memcmp(plain.data(), p->data(), kFile), 0);
}

TEST(UringStorage, ReadingPastTheEndNamesTheFile) {
  HOIST_SKIP_WITHOUT_URING();
  testing::ScratchDir dir;
  const std::string path = dir.File("rank0.swp");
  auto storage = UringStorage::Open(path, 65536, Options(2, 8192));
  ASSERT_TRUE(storage.ok()) << storage.status().ToString();
  PinnedHostPool pool;
  auto buf = pool.Allocate(1 << 17, Category::kOptimizer);
  ASSERT_TRUE(buf.ok());
  Status s = (*storage)->Read(32768, buf->data(), 65536);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("reading 65536 bytes at offset 32768 of " + path));
  // A batch with such a request is refused whole, before anything starts.
  const std::vector<IoRequest> batch = {{IoOp::kWrite, 0, buf->data(), 4096},
                                        {IoOp::kRead, 61440, buf->data(), 8192}};
  s = (*storage)->Submit(batch);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr(path));
  EXPECT_TRUE((*storage)->Wait().ok());
}

TEST(UringStorage, FileThatEndsEarlyIsDataLossNamingHowFar) {
  HOIST_SKIP_WITHOUT_URING();
  testing::ScratchDir dir;
  const std::string path = dir.File("rank0.swp");
  UringStorageOptions options = Options(4, 8192);
  options.file.direct_io = false;
  auto storage = UringStorage::Open(path, 65536, options);
  ASSERT_TRUE(storage.ok()) << storage.status().ToString();
  ASSERT_EQ(::truncate(path.c_str(), 20000), 0);
  std::vector<char> in(40000);
  Status s = (*storage)->Read(0, in.data(), 40000);
  EXPECT_EQ(s.code(), StatusCode::kDataLoss);
  EXPECT_THAT(s.message(), HasSubstr("reading 40000 bytes at offset 0 of " + path +
                                     " failed after 20000 bytes"));
  // Through a batch, the error comes from Wait.
  const std::vector<IoRequest> batch = {{IoOp::kRead, 0, in.data(), 16384},
                                        {IoOp::kRead, 16384, in.data() + 16384, 16384}};
  ASSERT_TRUE((*storage)->Submit(batch).ok());
  s = (*storage)->Wait();
  EXPECT_EQ(s.code(), StatusCode::kDataLoss);
  EXPECT_THAT(s.message(), HasSubstr("reading 16384 bytes at offset 16384 of " + path));
  EXPECT_TRUE((*storage)->Wait().ok()) << "the error does not linger";
}

TEST(UringStorage, BufferedRoundTripAtUnalignedSizes) {
  HOIST_SKIP_WITHOUT_URING();
  testing::ScratchDir dir;
  UringStorageOptions options = Options(2, 1000);
  options.file.direct_io = false;
  auto storage = UringStorage::Open(dir.File("rank0.swp"), 100000, options);
  ASSERT_TRUE(storage.ok()) << storage.status().ToString();
  EXPECT_EQ((*storage)->alignment(), 1);
  std::vector<char> out(33333), in(33333);
  testing::FillPattern(out.data(), 33333, 5);
  ASSERT_TRUE((*storage)->Write(777, out.data(), 33333).ok());
  ASSERT_TRUE((*storage)->Read(777, in.data(), 33333).ok());
  EXPECT_TRUE(testing::HasPattern(in.data(), 33333, 5));
}

TEST(UringStorage, RemovesTheFileItCreated) {
  HOIST_SKIP_WITHOUT_URING();
  testing::ScratchDir dir;
  const std::string path = dir.File("rank0.swp");
  {
    auto storage = UringStorage::Open(path, 65536, Options(2));
    ASSERT_TRUE(storage.ok()) << storage.status().ToString();
    EXPECT_TRUE(Exists(path));
  }
  EXPECT_FALSE(Exists(path));
}

TEST(UringStorage, RejectsABlockSizeOffTheDirectIoAlignment) {
  HOIST_SKIP_WITHOUT_URING();
  testing::ScratchDir dir;
  auto storage = UringStorage::Open(dir.File("rank0.swp"), 65536, Options(2, 1000));
  if (storage.ok()) {
    ASSERT_FALSE((*storage)->direct_io()) << "a 1000-byte block was accepted under O_DIRECT";
    GTEST_SKIP() << "/tmp refuses O_DIRECT on this machine";
  }
  EXPECT_EQ(storage.status().code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(storage.status().message(), HasSubstr("not a multiple of 4096"));
}

#endif  // HOIST_HAVE_URING

}  // namespace
}  // namespace hoist::offload
