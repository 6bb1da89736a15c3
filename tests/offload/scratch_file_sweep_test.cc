// SweepScratchFiles: a rank killed with SIGKILL leaves its scratch file (its whole offloaded
// state) behind; the next start removes it, and keeps every file a live process may still use.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/file.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "offload/scratch_file.h"
#include "tests/offload/storage_test_util.h"

namespace hoist::offload {
namespace {

// The pid of a process that has ended (and been reaped), so that no process runs under it.
pid_t EndedPid() {
  const pid_t child = ::fork();
  if (child == 0) ::_exit(0);
  int status = 0;
  ::waitpid(child, &status, 0);
  return child;
}

void WriteBytes(const std::string& path, int64_t bytes) {
  std::ofstream out(path, std::ios::binary);
  out << std::string(static_cast<size_t>(bytes), 'x');
}

TEST(ScratchFileSweep, RemovesTheFilesOfEndedProcessesOnly) {
  testing::ScratchDir dir;
  ASSERT_FALSE(dir.path().empty());
  const pid_t ended = EndedPid();
  const std::string stale = dir.File("hoist-rank1-" + std::to_string(ended) + ".optimizer.swp");
  WriteBytes(stale, 1 << 16);
  // This process's own file, open and locked.
  ScratchFileOptions options;
  options.direct_io = false;
  auto live = ScratchFile::Open(ScratchFilePath(dir.path(), 0, "optimizer"), 1 << 16, options);
  ASSERT_TRUE(live.ok()) << live.status().ToString();
  // An ended pid's name, but a lock held: a process of another node on a shared directory.
  const std::string held = dir.File("hoist-rank2-" + std::to_string(ended) + ".params.swp");
  WriteBytes(held, 4096);
  const int holder = ::open(held.c_str(), O_RDONLY | O_CLOEXEC);
  ASSERT_GE(holder, 0);
  ASSERT_EQ(::flock(holder, LOCK_EX | LOCK_NB), 0);
  // Names that are not scratch files stay whatever they are.
  WriteBytes(dir.File("notes.txt"), 10);
  WriteBytes(dir.File("hoist-rank1-x.optimizer.swp"), 10);

  std::vector<FoundScratchFile> left;
  SweepOptions sweep_options;
  sweep_options.lock_wait = std::chrono::milliseconds(20);
  const std::vector<FoundScratchFile> removed = SweepScratchFiles(dir.path(), &left, sweep_options);
  ::close(holder);

  ASSERT_EQ(removed.size(), 1u);
  EXPECT_EQ(removed[0].path, stale);
  EXPECT_EQ(removed[0].pid, ended);
  EXPECT_GE(removed[0].size_bytes, 1 << 16);
  EXPECT_FALSE(std::filesystem::exists(stale));
  ASSERT_EQ(left.size(), 2u);
  for (const FoundScratchFile& file : left) {
    EXPECT_TRUE(std::filesystem::exists(file.path)) << file.path;
    if (file.path == live->path()) {
      EXPECT_EQ(file.kept_because, "process " + std::to_string(::getpid()) + " still runs");
    } else {
      EXPECT_EQ(file.path, held);
      EXPECT_EQ(file.kept_because, "held by a process of another node or container");
    }
  }
  EXPECT_TRUE(std::filesystem::exists(dir.File("notes.txt")));
  EXPECT_TRUE(std::filesystem::exists(dir.File("hoist-rank1-x.optimizer.swp")));
}

TEST(ScratchFileSweep, APlantedLinkOrPipeIsNeverFollowedNorRemoved) {
  testing::ScratchDir dir;
  ASSERT_FALSE(dir.path().empty());
  const pid_t ended = EndedPid();
  const std::string target = dir.File("precious");
  WriteBytes(target, 100);
  const std::string link = dir.File("hoist-rank0-" + std::to_string(ended) + ".optimizer.swp");
  std::filesystem::create_symlink(target, link);
  const std::string pipe = dir.File("hoist-rank1-" + std::to_string(ended) + ".optimizer.swp");
  ASSERT_EQ(::mkfifo(pipe.c_str(), 0600), 0);
  std::vector<FoundScratchFile> left;
  EXPECT_TRUE(SweepScratchFiles(dir.path(), &left).empty());
  EXPECT_EQ(left.size(), 2u);
  EXPECT_TRUE(std::filesystem::is_symlink(link));
  EXPECT_EQ(std::filesystem::file_size(target), 100u);
  EXPECT_TRUE(std::filesystem::is_fifo(pipe));
}

// Local ranks sweep one directory at once. The rank that locked a stale file first removes it;
// another finding it locked waits for that rather than counting it as another node's and
// measuring the free space before the removal.
TEST(ScratchFileSweep, ASweepWaitsForAnotherSweepRemovingTheSameFile) {
  testing::ScratchDir dir;
  ASSERT_FALSE(dir.path().empty());
  const std::string stale =
      dir.File("hoist-rank1-" + std::to_string(EndedPid()) + ".optimizer.swp");
  WriteBytes(stale, 4096);
  // The other sweep, mid-removal: it holds the lock, then unlinks and closes.
  const int other = ::open(stale.c_str(), O_RDONLY | O_CLOEXEC);
  ASSERT_GE(other, 0);
  ASSERT_EQ(::flock(other, LOCK_EX | LOCK_NB), 0);
  std::thread other_sweep([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    ::unlink(stale.c_str());
    ::close(other);
  });
  std::vector<FoundScratchFile> left;
  const std::vector<FoundScratchFile> removed = SweepScratchFiles(dir.path(), &left);
  const bool gone_at_return = !std::filesystem::exists(stale);
  other_sweep.join();
  EXPECT_TRUE(removed.empty());
  EXPECT_TRUE(left.empty()) << left[0].path << ": " << left[0].kept_because;
  EXPECT_TRUE(gone_at_return);
}

// Two sweeps racing in earnest: the stale files are removed once, and neither reports any left.
TEST(ScratchFileSweep, TwoSweepsRacingLeaveNothingAndReportNothingLeft) {
  testing::ScratchDir dir;
  ASSERT_FALSE(dir.path().empty());
  const pid_t ended = EndedPid();
  constexpr int kFiles = 50;
  for (int rank = 0; rank < kFiles; ++rank) {
    WriteBytes(dir.File("hoist-rank" + std::to_string(rank) + "-" + std::to_string(ended) +
                        ".optimizer.swp"),
               4096);
  }
  std::vector<FoundScratchFile> removed[2], left[2];
  std::thread sweeps[2];
  for (int i = 0; i < 2; ++i) {
    sweeps[i] = std::thread([&, i] { removed[i] = SweepScratchFiles(dir.path(), &left[i]); });
  }
  for (std::thread& sweep : sweeps) sweep.join();
  EXPECT_EQ(removed[0].size() + removed[1].size(), static_cast<size_t>(kFiles));
  EXPECT_TRUE(left[0].empty() && left[1].empty()) << left[0].size() << " " << left[1].size();
  EXPECT_TRUE(std::filesystem::is_empty(dir.path()));
}

// Lustre mounted noflock answers ENOSYS, other file systems ENOLCK or EOPNOTSUPP: offload still
// starts, unlocked, with one warning per process.
TEST(ScratchFileSweep, AFileSystemWithoutFlockStillOpensScratchFiles) {
  testing::ScratchDir dir;
  ASSERT_FALSE(dir.path().empty());
  ScratchFileOptions options;
  options.direct_io = false;
  ::testing::internal::CaptureStderr();
  std::vector<ScratchFile> files;
  for (const int lock_errno : {ENOSYS, ENOLCK, EOPNOTSUPP, EINVAL}) {
    options.simulate_flock_errno = lock_errno;
    auto file =
        ScratchFile::Open(dir.File("hoist-" + std::to_string(lock_errno) + ".swp"), 4096, options);
    ASSERT_TRUE(file.ok()) << lock_errno << ": " << file.status().ToString();
    files.push_back(std::move(*file));
  }
  const std::string log = ::testing::internal::GetCapturedStderr();
  const std::string warning = "has no flock";
  // Once per process: only the first run of this test in it (--gtest_repeat) sees the warning.
  static bool first_run = true;
  if (std::exchange(first_run, false)) {
    ASSERT_NE(log.find(warning), std::string::npos) << log;
  }
  if (const size_t first = log.find(warning); first != std::string::npos) {
    EXPECT_EQ(log.find(warning, first + 1), std::string::npos) << "warned twice: " << log;
  }
  // Any other flock failure is still an error.
  options.simulate_flock_errno = EIO;
  auto broken = ScratchFile::Open(dir.File("hoist-eio.swp"), 4096, options);
  EXPECT_FALSE(broken.ok());
}

// Without flock, the sweep goes by the process id alone.
TEST(ScratchFileSweep, WithoutFlockTheProcessIdAloneDecides) {
  testing::ScratchDir dir;
  ASSERT_FALSE(dir.path().empty());
  const pid_t ended = EndedPid();
  const std::string stale = dir.File("hoist-rank1-" + std::to_string(ended) + ".optimizer.swp");
  WriteBytes(stale, 4096);
  const std::string live = dir.File("hoist-rank0-" + std::to_string(::getpid()) + ".optimizer.swp");
  WriteBytes(live, 4096);
  SweepOptions options;
  options.simulate_flock_errno = ENOSYS;
  std::vector<FoundScratchFile> left;
  const std::vector<FoundScratchFile> removed = SweepScratchFiles(dir.path(), &left, options);
  ASSERT_EQ(removed.size(), 1u);
  EXPECT_EQ(removed[0].path, stale);
  EXPECT_FALSE(std::filesystem::exists(stale));
  ASSERT_EQ(left.size(), 1u);
  EXPECT_EQ(left[0].path, live);
}

}  // namespace
}  // namespace hoist::offload
