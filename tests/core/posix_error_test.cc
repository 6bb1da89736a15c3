#include "core/posix_error.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <string>

namespace hoist {
namespace {

bool Contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

TEST(PosixError, NoSpaceIsResourceExhaustedNamingPath) {
  Status status = PosixError("write", "/nvme/swap/optimizer_0.bin", ENOSPC);
  EXPECT_EQ(status.code(), StatusCode::kResourceExhausted);
  EXPECT_TRUE(Contains(status.message(), "/nvme/swap/optimizer_0.bin")) << status.message();
  EXPECT_TRUE(Contains(status.message(), "write")) << status.message();
  EXPECT_TRUE(Contains(status.message(), std::strerror(ENOSPC))) << status.message();
}

TEST(PosixError, QuotaExceededIsResourceExhausted) {
  EXPECT_EQ(PosixError("write", "/home/me/ckpt", EDQUOT).code(), StatusCode::kResourceExhausted);
}

TEST(PosixError, MissingFileIsNotFound) {
  Status status = PosixError("open", "/data/shard_7.bin", ENOENT);
  EXPECT_EQ(status.code(), StatusCode::kNotFound);
  EXPECT_TRUE(Contains(status.message(), "/data/shard_7.bin")) << status.message();
}

TEST(PosixError, OtherErrorsAreIoErrors) {
  EXPECT_EQ(PosixError("open", "/root/x", EACCES).code(), StatusCode::kIoError);
  EXPECT_EQ(PosixError("fsync", "/x", EIO).code(), StatusCode::kIoError);
}

TEST(PosixError, EmptyPathIsLeftOut) {
  Status status = PosixError("io_uring_setup", "", EPERM);
  EXPECT_FALSE(Contains(status.message(), "''")) << status.message();
  EXPECT_TRUE(Contains(status.message(), "io_uring_setup")) << status.message();
}

Status OpenForReading(const std::string& path, int* fd) {
  HOIST_POSIX_CALL(*fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC), path);
  return Status::Ok();
}

// The message reaches users: it used to quote the statement, "*fd = ::open(path.c_str(), ...)".
TEST(PosixError, PosixCallNamesTheCallAndPathNotTheStatement) {
  int fd = -1;
  std::string path = "/nonexistent-hoist-dir/file";
  Status status = OpenForReading(path, &fd);
  EXPECT_EQ(status.code(), StatusCode::kNotFound);
  EXPECT_TRUE(Contains(status.message(), "open on '" + path + "' failed")) << status.message();
  EXPECT_FALSE(Contains(status.message(), "c_str")) << status.message();
  EXPECT_FALSE(Contains(status.message(), "fd =")) << status.message();
}

TEST(PosixError, CallNameIsTheFunctionCalled) {
  EXPECT_EQ(PosixCallName("raw_fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC)"), "open");
  EXPECT_EQ(PosixCallName("::fsync(fd.get())"), "fsync");
  EXPECT_EQ(PosixCallName("rename (a, b)"), "rename");
  EXPECT_EQ(PosixCallName("-1"), "system call");
}

TEST(PosixError, PosixCallPassesSuccessThrough) {
  int fd = -1;
  Status status = OpenForReading("/proc/self/status", &fd);
  ASSERT_TRUE(status.ok()) << status.ToString();
  EXPECT_GE(fd, 0);
  ::close(fd);
}

}  // namespace
}  // namespace hoist
