#include "offload/posix_storage.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "offload/pinned_pool.h"
#include "tests/offload/storage_test_util.h"

namespace hoist::offload {
namespace {

using ::testing::HasSubstr;

bool Exists(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0;
}

int64_t FileSize(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0 ? st.st_size : -1;
}

TEST(PosixStorage, DirectIoRoundTripAtAlignedSizes) {
  testing::ScratchDir dir;
  auto storage = PosixStorage::Open(dir.File("rank0.swp"), 1 << 20);
  ASSERT_TRUE(storage.ok()) << storage.status().ToString();
  if (!(*storage)->direct_io()) GTEST_SKIP() << "/tmp refuses O_DIRECT on this machine";
  EXPECT_EQ((*storage)->alignment(), 4096);
  PinnedHostPool pool;
  auto out = pool.Allocate(256 << 10, Category::kOptimizer);
  auto in = pool.Allocate(256 << 10, Category::kOptimizer);
  ASSERT_TRUE(out.ok() && in.ok());
  testing::FillPattern(out->data(), 256 << 10, 3);
  ASSERT_TRUE((*storage)->Write(512 << 10, out->data(), 256 << 10).ok());
  ASSERT_TRUE((*storage)->Read(512 << 10, in->data(), 256 << 10).ok());
  EXPECT_TRUE(testing::HasPattern(in->data(), 256 << 10, 3));
  EXPECT_EQ(FileSize(dir.File("rank0.swp")), 1 << 20);

  Status s = (*storage)->Write(100, out->data(), 4096);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("rank0.swp: offset, size and buffer address must be "
                                     "multiples of 4096"));
}

TEST(PosixStorage, BufferedRoundTripAtUnalignedSizes) {
  testing::ScratchDir dir;
  PosixStorageOptions options;
  options.direct_io = false;
  auto storage = PosixStorage::Open(dir.File("rank0.swp"), 100000, options);
  ASSERT_TRUE(storage.ok()) << storage.status().ToString();
  EXPECT_EQ((*storage)->alignment(), 1);
  std::vector<char> out(33333), in(33333);
  testing::FillPattern(out.data(), 33333, 5);
  ASSERT_TRUE((*storage)->Write(777, out.data(), 33333).ok());
  ASSERT_TRUE((*storage)->Read(777, in.data(), 33333).ok());
  EXPECT_TRUE(testing::HasPattern(in.data(), 33333, 5));
}

TEST(PosixStorage, RemovesTheFileItCreated) {
  testing::ScratchDir dir;
  const std::string path = dir.File("rank0.swp");
  {
    auto storage = PosixStorage::Open(path, 65536);
    ASSERT_TRUE(storage.ok()) << storage.status().ToString();
    EXPECT_TRUE(Exists(path));
  }
  EXPECT_FALSE(Exists(path));
}

// The scratch file name is predictable (rank and pid); a shared nvme_path lets anyone plant it.
TEST(PosixStorage, RefusesAPlantedSymlinkAndLeavesItsTargetUntouched) {
  testing::ScratchDir dir;
  const std::string target = dir.File("precious");
  const std::string path = dir.File("rank0.swp");
  {
    FILE* f = std::fopen(target.c_str(), "w");
    ASSERT_NE(f, nullptr);
    std::fputs("keep me", f);
    std::fclose(f);
  }
  ASSERT_EQ(::symlink(target.c_str(), path.c_str()), 0) << std::strerror(errno);
  auto storage = PosixStorage::Open(path, 8192);
  ASSERT_FALSE(storage.ok());
  EXPECT_EQ(storage.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_THAT(storage.status().message(), HasSubstr(path + " exists already"));
  EXPECT_EQ(FileSize(target), 7);
  struct stat st {};
  ASSERT_EQ(::lstat(path.c_str(), &st), 0) << "the planted link was removed";
  EXPECT_TRUE(S_ISLNK(st.st_mode));
}

TEST(PosixStorage, RefusesAPlantedFileAndLeavesItInPlace) {
  testing::ScratchDir dir;
  const std::string path = dir.File("rank0.swp");
  {
    FILE* f = std::fopen(path.c_str(), "w");
    ASSERT_NE(f, nullptr);
    std::fputs("not yours", f);
    std::fclose(f);
  }
  auto storage = PosixStorage::Open(path, 8192);
  ASSERT_FALSE(storage.ok());
  EXPECT_THAT(storage.status().message(), HasSubstr(path + " exists already"));
  EXPECT_EQ(FileSize(path), 9);
}

TEST(PosixStorage, CreatesTheFileOwnerOnly) {
  testing::ScratchDir dir;
  const std::string path = dir.File("rank0.swp");
  auto storage = PosixStorage::Open(path, 8192);
  ASSERT_TRUE(storage.ok()) << storage.status().ToString();
  struct stat st {};
  ASSERT_EQ(::stat(path.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
}

TEST(PosixStorage, FallsBackToBufferedIoWithANoticeWhereODirectIsRefused) {
  // /dev/shm is tmpfs, which refused O_DIRECT before Linux 6.6; newer kernels accept it, so
  // the refusal is also simulated to reach the same path on every machine.
  testing::ScratchDir dir("/dev/shm");
  ASSERT_FALSE(dir.path().empty());
  PosixStorageOptions options;
  options.simulate_direct_io_refused = true;
  ::testing::internal::CaptureStderr();
  auto storage = PosixStorage::Open(dir.File("rank0.swp"), 8192, options);
  const std::string log = ::testing::internal::GetCapturedStderr();
  ASSERT_TRUE(storage.ok()) << storage.status().ToString();
  EXPECT_FALSE((*storage)->direct_io());
  EXPECT_EQ((*storage)->alignment(), 1);
  EXPECT_THAT(log, HasSubstr("refuses O_DIRECT; using buffered I/O"));
  EXPECT_THAT(log, HasSubstr(dir.File("rank0.swp")));
  char out[10] = "123456789", in[10] = {};
  ASSERT_TRUE((*storage)->Write(5, out, 10).ok());
  ASSERT_TRUE((*storage)->Read(5, in, 10).ok());
  EXPECT_STREQ(in, out);
}

TEST(PosixStorage, ReadingPastATruncatedFileIsDataLoss) {
  testing::ScratchDir dir;
  PosixStorageOptions options;
  options.direct_io = false;
  const std::string path = dir.File("rank0.swp");
  auto storage = PosixStorage::Open(path, 65536, options);
  ASSERT_TRUE(storage.ok());
  ASSERT_EQ(::truncate(path.c_str(), 10000), 0);
  std::vector<char> in(20000);
  Status s = (*storage)->Read(0, in.data(), 20000);
  EXPECT_EQ(s.code(), StatusCode::kDataLoss);
  EXPECT_THAT(s.message(), HasSubstr("reading 20000 bytes at offset 0 of " + path +
                                     " failed after 10000 bytes"));
}

TEST(PosixStorage, OpenInAMissingDirectoryNamesThePath) {
  auto storage = PosixStorage::Open("/nonexistent_hoist_dir/rank0.swp", 4096);
  ASSERT_FALSE(storage.ok());
  EXPECT_EQ(storage.status().code(), StatusCode::kNotFound);
  EXPECT_THAT(storage.status().message(), HasSubstr("/nonexistent_hoist_dir/rank0.swp"));
}

TEST(PreallocationFailure, NamesNeededAndFreeBytes) {
  Status s = PreallocationFailure("/nvme/rank0.swp", 1 << 30, 1 << 20, ENOSPC);
  EXPECT_EQ(s.code(), StatusCode::kResourceExhausted);
  EXPECT_THAT(s.message(), HasSubstr("preallocating 1073741824 bytes (1.00 GiB) for "
                                     "/nvme/rank0.swp failed: No space left on device (ENOSPC); "
                                     "the file system has 1048576 bytes (1.00 MiB) free"));
}

// A real full disk: a 1 MiB tmpfs. Needs the right to mount (root in CI).
TEST(PosixStorage, PreallocatingMoreThanTheDiskHoldsNamesNeededAndFreeBytes) {
  testing::ScratchDir dir;
  if (::mount("tmpfs", dir.path().c_str(), "tmpfs", 0, "size=1m") != 0) {
    GTEST_SKIP() << "cannot mount a 1 MiB tmpfs here (" << std::strerror(errno)
                 << "); PreallocationFailure covers the message";
  }
  const std::string path = dir.File("rank0.swp");
  auto storage = PosixStorage::Open(path, 8 << 20);
  const bool removed = !Exists(path);
  ::umount(dir.path().c_str());
  ASSERT_FALSE(storage.ok());
  EXPECT_EQ(storage.status().code(), StatusCode::kResourceExhausted);
  EXPECT_THAT(storage.status().message(),
              HasSubstr("preallocating 8388608 bytes (8.00 MiB) for " + path +
                        " failed: No space left on device (ENOSPC); the file system has "));
  EXPECT_THAT(storage.status().message(),
              ::testing::ContainsRegex("has [0-9]+ bytes \\([0-9.]+ [KMG]?i?B\\) free"));
  EXPECT_TRUE(removed) << "a failed open leaves no scratch file behind";
}

}  // namespace
}  // namespace hoist::offload
