#include "offload/open_storage.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>

#include "tests/offload/storage_test_util.h"

namespace hoist::offload {
namespace {

using ::testing::HasSubstr;

TEST(ProbeIoUring, AnswersWithoutError) {
  auto allowed = ProbeIoUring();
  ASSERT_TRUE(allowed.ok()) << allowed.status().ToString();
}

TEST(OpenBlockStorage, RefusedIoUringFallsBackToPosixWithANotice) {
  testing::ScratchDir dir;
  BlockStorageOptions options;
  options.simulate_uring_refused = true;
  ::testing::internal::CaptureStderr();
  auto storage = OpenBlockStorage(dir.File("rank0.swp"), 65536, options);
  const std::string log = ::testing::internal::GetCapturedStderr();
  ASSERT_TRUE(storage.ok()) << storage.status().ToString();
  EXPECT_THAT(log, HasSubstr("refused io_uring for " + dir.File("rank0.swp")));
  EXPECT_EQ((*storage)->size_bytes(), 65536);
  char out[4] = "abc", in[4] = {};
  if ((*storage)->alignment() == 1) {
    ASSERT_TRUE((*storage)->Write(0, out, 4).ok());
    ASSERT_TRUE((*storage)->Read(0, in, 4).ok());
    EXPECT_STREQ(in, "abc");
  }
}

TEST(OpenBlockStorage, PosixBackendDoesNotProbe) {
  testing::ScratchDir dir;
  BlockStorageOptions options;
  options.backend = StorageBackend::kPosix;
  options.simulate_uring_refused = true;
  ::testing::internal::CaptureStderr();
  auto storage = OpenBlockStorage(dir.File("rank0.swp"), 4096, options);
  EXPECT_EQ(::testing::internal::GetCapturedStderr(), "");
  ASSERT_TRUE(storage.ok()) << storage.status().ToString();
}

TEST(OpenBlockStorage, AskingForIoUringInABuildWithoutItSaysHowToGetIt) {
  if (UringStorageBuilt()) GTEST_SKIP() << "this build has io_uring storage";
  auto allowed = ProbeIoUring();
  if (!allowed.ok() || !*allowed) GTEST_SKIP() << "the kernel refuses io_uring here";
  testing::ScratchDir dir;
  BlockStorageOptions options;
  options.backend = StorageBackend::kUring;
  auto storage = OpenBlockStorage(dir.File("rank0.swp"), 4096, options);
  ASSERT_FALSE(storage.ok());
  EXPECT_EQ(storage.status().code(), StatusCode::kUnimplemented);
  EXPECT_THAT(storage.status().message(), HasSubstr("-DHOIST_WITH_URING=ON"));
}

TEST(OpenBlockStorage, EveryBackendRefusesAPlantedSymlink) {
  for (StorageBackend backend : {StorageBackend::kAuto, StorageBackend::kPosix}) {
    testing::ScratchDir dir;
    const std::string target = dir.File("precious");
    const std::string path = dir.File("hoist-rank0-1.optimizer.swp");
    FILE* f = std::fopen(target.c_str(), "w");
    ASSERT_NE(f, nullptr);
    std::fputs("keep me", f);
    std::fclose(f);
    ASSERT_EQ(::symlink(target.c_str(), path.c_str()), 0);
    BlockStorageOptions options;
    options.backend = backend;
    auto storage = OpenBlockStorage(path, 65536, options);
    ASSERT_FALSE(storage.ok());
    EXPECT_THAT(storage.status().message(), HasSubstr(path + " exists already"));
    struct stat st {};
    ASSERT_EQ(::stat(target.c_str(), &st), 0);
    EXPECT_EQ(st.st_size, 7);
  }
}

TEST(OpenBlockStorage, RejectsNonPositiveQueueDepth) {
  BlockStorageOptions options;
  options.queue_depth = 0;
  auto storage = OpenBlockStorage("/tmp/unused.swp", 4096, options);
  EXPECT_EQ(storage.status().code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(storage.status().message(), HasSubstr("aio.queue_depth (0)"));
}

}  // namespace
}  // namespace hoist::offload
