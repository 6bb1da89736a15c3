// CheckNvmePath with the scratch files of earlier processes in the directory: those of ranks
// killed with SIGKILL are swept before the free space is measured (across --max-restarts they
// used to pile up until the check refused the restart), and a refusal names those still there.
#include "runtime/memory/offload_preflight.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "offload/scratch_file.h"

namespace hoist::runtime {
namespace {

namespace fs = std::filesystem;

TEST(NvmePathCheck, SweepsTheScratchFilesOfKilledRanksAndNamesTheOthers) {
  std::string pattern = (fs::temp_directory_path() / "hoist_preflight_XXXXXX").string();
  ASSERT_NE(::mkdtemp(pattern.data()), nullptr);
  const std::string dir = pattern;
  const std::string key = "zero_optimization.offload_optimizer.nvme_path";
  // A rank killed with SIGKILL: its process is gone, its file is not.
  const pid_t killed = ::fork();
  if (killed == 0) ::_exit(0);
  ::waitpid(killed, nullptr, 0);
  const std::string stale = dir + "/hoist-rank1-" + std::to_string(killed) + ".optimizer.swp";
  { std::ofstream(stale, std::ios::binary) << std::string(1 << 16, 'x'); }
  // A live job's file in the same directory.
  offload::ScratchFileOptions options;
  options.direct_io = false;
  auto live =
      offload::ScratchFile::Open(offload::ScratchFilePath(dir, 0, "params"), 1 << 16, options);
  ASSERT_TRUE(live.ok()) << live.status().ToString();

  const Status checked = CheckNvmePath(dir, key, 4096);
  if (!checked.ok() && checked.message().find("O_DIRECT") != std::string::npos) {
    fs::remove_all(dir);
    GTEST_SKIP() << "the temporary directory refuses O_DIRECT: " << checked.message();
  }
  EXPECT_TRUE(checked.ok()) << checked.ToString();
  EXPECT_FALSE(fs::exists(stale)) << "the killed rank's scratch file is still there";
  EXPECT_TRUE(fs::exists(live->path()));

  NvmeCheckOptions full;
  full.simulate_free_bytes = 100;
  const Status refused = CheckNvmePath(dir, key, 1 << 20, full);
  EXPECT_EQ(refused.code(), StatusCode::kResourceExhausted);
  EXPECT_NE(refused.message().find("1 scratch file"), std::string::npos) << refused.message();
  EXPECT_NE(refused.message().find(live->path()), std::string::npos) << refused.message();
  EXPECT_NE(refused.message().find("process " + std::to_string(::getpid()) + " still runs"),
            std::string::npos)
      << refused.message();
  fs::remove_all(dir);
}

}  // namespace
}  // namespace hoist::runtime
