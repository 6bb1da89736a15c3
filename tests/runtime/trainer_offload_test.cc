// The tiny GPT trained with its optimizer states offloaded (to pinned host memory, half of them
// (ratio 0.5), or to NVMe scratch files streamed in sub-groups) on 1 and 2 ranks at stages 1-3: the
// losses and final weights equal the run without offload bit for bit, because the CPU AdamW step is
// the same wherever the states live. The tracker shows the states moved off the device. Every
// storage fault stops every rank with the storage's message and the last checkpoint resumes the
// trajectory; every host-memory and nvme_path refusal happens before training, on every rank.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "core/file_system.h"
#include "offload/fault_injecting_storage.h"
#include "offload/open_storage.h"
#include "tests/runtime/config_test_util.h"
#include "tests/runtime/trainer_test_util.h"

namespace hoist::runtime {
namespace {

namespace fs = std::filesystem;
using testing_util::RankRun;
using testing_util::TrainOnRanks;

constexpr int kSteps = 6;

class TempDir {
 public:
  TempDir() {
    std::string pattern = (fs::temp_directory_path() / "hoist-trainer-offload-XXXXXX").string();
    HOIST_CHECK(mkdtemp(pattern.data()) != nullptr);
    path_ = pattern;
  }
  ~TempDir() { fs::remove_all(path_); }
  const std::string& path() const { return path_; }
  std::string Quoted() const { return "\"" + path_ + "\""; }

 private:
  std::string path_;
};

Config Job(int world, const std::vector<std::string>& extra) {
  return testing_util::TinyJob(world, kSteps, extra);
}

std::vector<std::string> Stage(int stage, std::vector<std::string> more = {}) {
  more.push_back("zero_optimization.stage=" + std::to_string(stage));
  more.push_back("zero_optimization.stage3_param_persistence_threshold=1000");
  return more;
}

std::vector<std::string> OnNvme(const TempDir& dir, std::vector<std::string> more,
                                int64_t sub_group = 3000) {
  more.push_back("zero_optimization.offload_optimizer.device=\"nvme\"");
  more.push_back("zero_optimization.offload_optimizer.nvme_path=" + dir.Quoted());
  more.push_back("zero_optimization.sub_group_size=" + std::to_string(sub_group));
  return more;
}

std::vector<std::string> OnCpu(std::vector<std::string> more) {
  more.push_back("zero_optimization.offload_optimizer.device=\"cpu\"");
  return more;
}

class TrainerOffload : public ::testing::TestWithParam<std::tuple<int, int>> {};

TEST_P(TrainerOffload, MatchesTheRunWithoutOffloadBitForBit) {
  const auto [stage, world] = GetParam();
  TempDir dir;
  const std::vector<RankRun> want = TrainOnRanks(Job(world, Stage(stage)), world);
  const std::vector<RankRun> cpu = TrainOnRanks(Job(world, OnCpu(Stage(stage))), world);
  const std::vector<RankRun> nvme = TrainOnRanks(Job(world, OnNvme(dir, Stage(stage))), world);
  // A partial offload: half of each shard's states stay on the device.
  const std::vector<RankRun> half = TrainOnRanks(
      Job(world, OnCpu(Stage(stage, {"zero_optimization.offload_optimizer.ratio=0.5"}))), world);
  for (int r = 0; r < world; ++r) {
    ASSERT_TRUE(want[r].status.ok()) << want[r].status.ToString();
    ASSERT_TRUE(cpu[r].status.ok()) << cpu[r].status.ToString();
    ASSERT_TRUE(half[r].status.ok()) << half[r].status.ToString();
    EXPECT_EQ(half[r].losses, want[r].losses) << "rank " << r;
    EXPECT_EQ(half[r].params, want[r].params) << "rank " << r;
    ASSERT_TRUE(nvme[r].status.ok()) << nvme[r].status.ToString();
    ASSERT_EQ(want[r].losses.size(), size_t{kSteps});
    EXPECT_EQ(cpu[r].losses, want[r].losses) << "rank " << r;
    EXPECT_EQ(nvme[r].losses, want[r].losses) << "rank " << r;
    EXPECT_EQ(cpu[r].params, want[r].params) << "rank " << r;
    EXPECT_EQ(nvme[r].params, want[r].params) << "rank " << r;
    // Several sub-groups were streamed each step, both ways.
    EXPECT_GT(nvme[r].offload.nvme_read_bytes, 3 * 4 * nvme[r].total_shard);
    EXPECT_GT(nvme[r].offload.nvme_write_bytes, 3 * 4 * nvme[r].total_shard);
  }
  // Training moved the loss, so the equality is between runs that learned.
  EXPECT_LT(want[0].losses.back(), want[0].losses.front());
  // The scratch files went with the clean exit.
  EXPECT_TRUE(fs::is_empty(dir.path()));
}

INSTANTIATE_TEST_SUITE_P(StagesAndRanks, TrainerOffload,
                         ::testing::Combine(::testing::Values(1, 2, 3), ::testing::Values(1, 2)));

TEST(TrainerOffloadPrecision, Bf16OffloadEqualsBf16WithoutAndStaysNearFp32) {
  TempDir dir;
  const std::vector<RankRun> fp32 = TrainOnRanks(Job(2, Stage(2)), 2);
  const std::vector<RankRun> bf16 = TrainOnRanks(Job(2, Stage(2, {"bf16.enabled=true"})), 2);
  const std::vector<RankRun> offloaded =
      TrainOnRanks(Job(2, OnNvme(dir, Stage(2, {"bf16.enabled=true"}))), 2);
  ASSERT_TRUE(offloaded[0].status.ok()) << offloaded[0].status.ToString();
  EXPECT_EQ(offloaded[0].losses, bf16[0].losses);
  EXPECT_EQ(offloaded[0].params, bf16[0].params);
  for (int step = 0; step < kSteps; ++step) {
    // bf16 keeps 8 significant bits (the same bound as the trainer's bf16 tests).
    EXPECT_NEAR(offloaded[0].losses[step], fp32[0].losses[step], 0.02 * fp32[0].losses[step]);
  }
}

TEST(TrainerOffloadMemory, TheOptimizerStatesLeaveTheDevice) {
  TempDir dir;
  for (const char* device : {"cpu", "nvme"}) {
    const std::vector<std::string> extra =
        std::string(device) == "cpu" ? OnCpu(Stage(2)) : OnNvme(dir, Stage(2), 100000000);
    const std::vector<RankRun> runs = TrainOnRanks(Job(2, extra), 2);
    for (const RankRun& run : runs) {
      ASSERT_TRUE(run.status.ok()) << run.status.ToString();
      const auto opt = int(Category::kOptimizer);
      EXPECT_EQ(run.memory.current[int(Place::kDevice)][opt], 0) << device;
      EXPECT_EQ(run.memory.peak[int(Place::kDevice)][opt], 0) << device;
      // Master, m and v of the shard: 12 bytes an element, in whole pages when pinned.
      const int64_t page = 4096;
      const int64_t per_state = (4 * run.total_shard + page - 1) / page * page;
      EXPECT_EQ(run.memory.current[int(Place::kHostPinned)][opt], 3 * per_state) << device;
      EXPECT_EQ(run.memory.current[int(Place::kNvme)][opt],
                std::string(device) == "nvme" ? 3 * per_state : 0);
      EXPECT_EQ(run.states.optimizer, 12 * run.total_shard);
    }
  }
}

TEST(TrainerOffloadStorage, TheRefusedIoUringFallsBackToPosixWithTheSameLosses) {
  TempDir dir;
  const std::vector<RankRun> want = TrainOnRanks(Job(1, OnNvme(dir, Stage(2))), 1);
  TrainerOptions options;
  options.offload_storage = [](const std::string& path, int64_t bytes) {
    offload::BlockStorageOptions storage;
    storage.simulate_uring_refused = true;
    return offload::OpenBlockStorage(path, bytes, storage);
  };
  const std::vector<RankRun> posix = TrainOnRanks(Job(1, OnNvme(dir, Stage(2))), 1, options);
  ASSERT_TRUE(posix[0].status.ok()) << posix[0].status.ToString();
  EXPECT_EQ(posix[0].losses, want[0].losses);
  EXPECT_EQ(posix[0].params, want[0].params);
}

TEST(TrainerOffloadFaults, EveryFaultStopsEveryRankAndTheLastCheckpointResumes) {
  using offload::IoOp;
  using offload::StorageFault;
  // One sub-group (the shard fits), so each step reads and writes master, m and v once; the
  // job writes them at the start and reads them for the checkpoints after steps 2 and 4. The
  // 19th read and the 16th write are therefore the first of step 5.
  struct Case {
    const char* name;
    StorageFault fault;
    const char* expect;
  };
  const std::vector<Case> cases = {
      {"read EIO", StorageFault::Error(IoOp::kRead, EIO).Nth(19), "Input/output error (EIO)"},
      {"write EIO", StorageFault::Error(IoOp::kWrite, EIO).Nth(16), "Input/output error (EIO)"},
      {"write ENOSPC", StorageFault::Error(IoOp::kWrite, ENOSPC).Nth(17), "(ENOSPC)"},
      {"short read", StorageFault::ShortTransfer(IoOp::kRead, 4096).Nth(20), "the file ends"},
      {"short write", StorageFault::ShortTransfer(IoOp::kWrite, 4096).Nth(18), "(ENOSPC)"},
  };
  for (int world : {1, 2}) {
    TempDir scratch, checkpoints, full_checkpoints;
    auto extra = [&](const TempDir& ckpt) {
      return OnNvme(scratch,
                    Stage(2, {"checkpoint.dir=" + ckpt.Quoted(), "checkpoint.interval_steps=2"}),
                    100000000);
    };
    const std::vector<RankRun> full = TrainOnRanks(Job(world, extra(full_checkpoints)), world);
    ASSERT_TRUE(full[0].status.ok()) << full[0].status.ToString();
    for (const Case& c : cases) {
      fs::remove_all(checkpoints.path());
      fs::create_directories(checkpoints.path());
      const int failing = world - 1;
      TrainerOptions faulty;
      const StorageFault fault = c.fault;
      // Every rank opens its storage through the same factory; the failing rank's file name
      // carries its rank.
      faulty.offload_storage =
          offload::FaultyStorageFactory(fault, "hoist-rank" + std::to_string(failing) + "-");
      const std::vector<RankRun> broken =
          TrainOnRanks(Job(world, extra(checkpoints)), world, faulty);
      for (int r = 0; r < world; ++r) {
        const RankRun& run = broken[r];
        ASSERT_FALSE(run.status.ok()) << c.name << " rank " << r;
        const std::string message = run.status.ToString();
        EXPECT_NE(message.find(c.expect), std::string::npos) << c.name << ": " << message;
        EXPECT_NE(message.find(scratch.path() + "/hoist-rank" + std::to_string(failing)),
                  std::string::npos)
            << message;
        EXPECT_NE(message.find("offset"), std::string::npos) << message;
        // It failed in step 5: four steps are done and checkpointed.
        EXPECT_EQ(run.losses.size(), 4u) << c.name << ": " << message;
      }
      // The scratch files are gone even after the failure.
      EXPECT_TRUE(fs::is_empty(scratch.path())) << c.name;
      // The last checkpoint (step 4) resumes the uninterrupted trajectory.
      TrainerOptions resume;
      resume.resume = true;
      const std::vector<RankRun> resumed =
          TrainOnRanks(Job(world, extra(checkpoints)), world, resume);
      for (int r = 0; r < world; ++r) {
        ASSERT_TRUE(resumed[r].status.ok()) << c.name << ": " << resumed[r].status.ToString();
        ASSERT_EQ(resumed[r].losses.size(), 2u) << c.name;
        EXPECT_EQ(resumed[r].losses[0], full[r].losses[4]) << c.name;
        EXPECT_EQ(resumed[r].losses[1], full[r].losses[5]) << c.name;
        EXPECT_EQ(resumed[r].params, full[r].params) << c.name;
      }
    }
  }
}

// ---- refusals before training ----

Status FirstError(const std::vector<RankRun>& runs) {
  for (const RankRun& run : runs) {
    if (!run.status.ok()) return run.status;
  }
  return Status::Ok();
}

TEST(TrainerOffloadRefusals, TooLittleHostMemoryIsRefusedOnEveryRankWithTheNumbers) {
  TempDir dir;
  TrainerOptions options;
  options.host_memory = HostMemory{.mem_available = 100000, .cgroup_free = -1, .cgroup_path = ""};
  const std::vector<RankRun> runs = TrainOnRanks(Job(2, OnCpu(Stage(2))), 2, options);
  for (int r = 0; r < 2; ++r) {
    ASSERT_FALSE(runs[r].status.ok());
    EXPECT_TRUE(runs[r].losses.empty());
    const std::string message = runs[r].status.ToString();
    if (r == 0) {
      EXPECT_EQ(runs[r].status.code(), StatusCode::kResourceExhausted);
    }
    EXPECT_NE(message.find("MemAvailable"), std::string::npos) << message;
    EXPECT_NE(message.find("2 ranks"), std::string::npos) << message;
    EXPECT_NE(message.find("offload_optimizer.device"), std::string::npos) << message;
  }
}

TEST(TrainerOffloadRefusals, TheCgroupLimitAndTheConfiguredCapAreHonoured) {
  TempDir dir;
  TrainerOptions cgroup;
  cgroup.host_memory =
      HostMemory{.mem_available = -1, .cgroup_free = 5000, .cgroup_path = "/sys/fs/cgroup/job"};
  Status status = FirstError(TrainOnRanks(Job(1, OnCpu(Stage(1))), 1, cgroup));
  EXPECT_EQ(status.code(), StatusCode::kResourceExhausted);
  EXPECT_NE(status.message().find("/sys/fs/cgroup/job"), std::string::npos) << status.ToString();

  status =
      FirstError(TrainOnRanks(Job(1, OnNvme(dir, Stage(3, {"offload.max_host_bytes=4096"}))), 1));
  EXPECT_EQ(status.code(), StatusCode::kResourceExhausted);
  EXPECT_NE(status.message().find("offload.max_host_bytes"), std::string::npos)
      << status.ToString();
  // Enough room: it trains.
  EXPECT_TRUE(
      FirstError(
          TrainOnRanks(Job(1, OnNvme(dir, Stage(3, {"offload.max_host_bytes=100000000"}))), 1))
          .ok());
}

TEST(TrainerOffloadRefusals, EveryBadNvmePathIsRefusedBeforeTraining) {
  TempDir dir;
  const std::string key = "zero_optimization.offload_optimizer.nvme_path";
  auto run_with = [&](const std::string& path, const TrainerOptions& options = {}) {
    std::vector<std::string> extra = Stage(2);
    extra.push_back("zero_optimization.offload_optimizer.device=\"nvme\"");
    extra.push_back(key + "=\"" + path + "\"");
    return TrainOnRanks(Job(2, extra), 2, options);
  };
  // Missing.
  std::vector<RankRun> runs = run_with(dir.path() + "/absent");
  for (const RankRun& run : runs) {
    EXPECT_NE(run.status.message().find("does not exist"), std::string::npos)
        << run.status.ToString();
    EXPECT_NE(run.status.message().find(dir.path() + "/absent"), std::string::npos);
  }
  EXPECT_EQ(runs[0].status.code(), StatusCode::kNotFound);
  // A file, not a directory.
  const std::string file = dir.path() + "/a-file";
  { std::ofstream(file) << "x"; }
  Status status = FirstError(run_with(file));
  EXPECT_NE(status.message().find("is not a directory"), std::string::npos) << status.ToString();
  // No O_DIRECT there.
  TrainerOptions no_direct;
  no_direct.nvme_check.simulate_no_direct_io = true;
  status = FirstError(run_with(dir.path(), no_direct));
  EXPECT_EQ(status.code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(status.message().find("O_DIRECT"), std::string::npos) << status.ToString();
  // Not enough free space: the message gives both numbers.
  TrainerOptions full;
  full.nvme_check.simulate_free_bytes = 12345;
  runs = run_with(dir.path(), full);
  for (const RankRun& run : runs) {
    EXPECT_NE(run.status.message().find("12345 bytes) free"), std::string::npos)
        << run.status.ToString();
    EXPECT_TRUE(run.losses.empty());
  }
  EXPECT_EQ(runs[0].status.code(), StatusCode::kResourceExhausted);
  // Unwritable (root may write anywhere, so only as another user).
  if (geteuid() != 0) {
    const std::string locked = dir.path() + "/locked";
    fs::create_directory(locked);
    fs::permissions(locked, fs::perms::owner_read | fs::perms::owner_exec);
    status = FirstError(run_with(locked));
    EXPECT_NE(status.message().find("not writable"), std::string::npos) << status.ToString();
  }
}

// ---- parameter offload (stage 3) ----

std::vector<std::string> ParamsOn(const char* device, const TempDir& dir,
                                  std::vector<std::string> more, int64_t max_in_cpu = 0) {
  more.push_back(std::string("zero_optimization.offload_param.device=\"") + device + "\"");
  more.push_back("zero_optimization.offload_param.nvme_path=" + dir.Quoted());
  more.push_back("zero_optimization.offload_param.max_in_cpu=" + std::to_string(max_in_cpu));
  more.push_back("zero_optimization.offload_param.buffer_count=2");
  return more;
}

TEST(TrainerParamOffload, MatchesTheRunWithoutOffloadBitForBit) {
  for (int world : {1, 2}) {
    const std::vector<RankRun> want = TrainOnRanks(Job(world, Stage(3)), world);
    TempDir dir;
    const std::vector<std::vector<std::string>> variants = {
        ParamsOn("cpu", dir, Stage(3)),
        ParamsOn("nvme", dir, Stage(3)),
        // The first units' shards kept in memory, the rest on NVMe, the optimizer there too.
        ParamsOn("nvme", dir, OnNvme(dir, Stage(3)), 20000),
        ParamsOn("cpu", dir, OnCpu(Stage(3, {"bf16.enabled=false"}))),
    };
    for (const auto& extra : variants) {
      const std::vector<RankRun> got = TrainOnRanks(Job(world, extra), world);
      for (int r = 0; r < world; ++r) {
        ASSERT_TRUE(got[r].status.ok()) << got[r].status.ToString();
        EXPECT_EQ(got[r].losses, want[r].losses) << "world " << world << " rank " << r;
        EXPECT_EQ(got[r].params, want[r].params) << "world " << world << " rank " << r;
      }
    }
    EXPECT_TRUE(fs::is_empty(dir.path()));
  }
}

TEST(TrainerParamOffload, Bf16ParamsOnNvmeEqualBf16WithoutOffload) {
  TempDir dir;
  const std::vector<RankRun> want = TrainOnRanks(Job(2, Stage(3, {"bf16.enabled=true"})), 2);
  const std::vector<RankRun> got =
      TrainOnRanks(Job(2, ParamsOn("nvme", dir, OnNvme(dir, Stage(3, {"bf16.enabled=true"})))), 2);
  for (int r = 0; r < 2; ++r) {
    ASSERT_TRUE(got[r].status.ok()) << got[r].status.ToString();
    EXPECT_EQ(got[r].losses, want[r].losses);
    EXPECT_EQ(got[r].params, want[r].params);
  }
}

TEST(TrainerParamOffload, TheParameterShardsLeaveTheDevice) {
  TempDir dir;
  const std::vector<RankRun> device = TrainOnRanks(Job(2, Stage(3)), 2);
  const std::vector<RankRun> nvme = TrainOnRanks(Job(2, ParamsOn("nvme", dir, Stage(3))), 2);
  for (int r = 0; r < 2; ++r) {
    ASSERT_TRUE(nvme[r].status.ok()) << nvme[r].status.ToString();
    const auto param = int(Category::kParam);
    // The fp32 shards (4 bytes an element) moved from the device to the file.
    const int64_t moved = device[r].memory.current[int(Place::kDevice)][param] -
                          nvme[r].memory.current[int(Place::kDevice)][param];
    EXPECT_EQ(moved, 4 * nvme[r].total_shard);
    EXPECT_GE(nvme[r].memory.current[int(Place::kNvme)][param], 4 * nvme[r].total_shard);
    EXPECT_GT(nvme[r].offload.nvme_read_bytes, 0);
  }
}

TEST(TrainerParamOffload, AReadFaultStopsEveryRankAndTheCheckpointResumes) {
  using offload::IoOp;
  using offload::StorageFault;
  for (int world : {1, 2}) {
    TempDir scratch, checkpoints, full_checkpoints;
    auto extra = [&](const TempDir& ckpt) {
      return ParamsOn("nvme", scratch,
                      Stage(3, {"checkpoint.dir=" + ckpt.Quoted(), "checkpoint.interval_steps=2"}));
    };
    const std::vector<RankRun> full = TrainOnRanks(Job(world, extra(full_checkpoints)), world);
    ASSERT_TRUE(full[0].status.ok()) << full[0].status.ToString();
    const int failing = world - 1;
    TrainerOptions faulty;
    faulty.offload_storage = offload::FaultyStorageFactory(
        // Every micro-batch reads each unit's shard about twice (forward and backward): about 36
        // reads a step on one rank (4 micro-batches), 18 on each of two. This lands in step 4.
        StorageFault::Error(IoOp::kRead, EIO).Nth(failing == 0 ? 120 : 60),
        "hoist-rank" + std::to_string(failing) + "-");
    const std::vector<RankRun> broken = TrainOnRanks(Job(world, extra(checkpoints)), world, faulty);
    size_t done = 0;
    for (int r = 0; r < world; ++r) {
      ASSERT_FALSE(broken[r].status.ok()) << "rank " << r;
      const std::string message = broken[r].status.ToString();
      EXPECT_NE(message.find("Input/output error (EIO)"), std::string::npos) << message;
      EXPECT_NE(message.find(scratch.path() + "/hoist-rank" + std::to_string(failing)),
                std::string::npos)
          << message;
      done = broken[r].losses.size();
      EXPECT_EQ(broken[r].losses.size(), broken[0].losses.size());
    }
    ASSERT_GE(done, 2u);
    ASSERT_LT(done, size_t{kSteps});
    EXPECT_TRUE(fs::is_empty(scratch.path()));
    TrainerOptions resume;
    resume.resume = true;
    const std::vector<RankRun> resumed =
        TrainOnRanks(Job(world, extra(checkpoints)), world, resume);
    for (int r = 0; r < world; ++r) {
      ASSERT_TRUE(resumed[r].status.ok()) << resumed[r].status.ToString();
      const size_t from = kSteps - resumed[r].losses.size();  // the last checkpoint's step
      EXPECT_LE(from, done);
      for (size_t i = 0; i < resumed[r].losses.size(); ++i) {
        EXPECT_EQ(resumed[r].losses[i], full[r].losses[from + i]);
      }
      EXPECT_EQ(resumed[r].params, full[r].params);
    }
  }
}

TEST(TrainerParamOffload, AMissingParameterNvmePathIsRefused) {
  TempDir dir;
  std::vector<std::string> extra = Stage(3);
  extra.push_back("zero_optimization.offload_param.device=\"nvme\"");
  extra.push_back("zero_optimization.offload_param.nvme_path=\"" + dir.path() + "/absent\"");
  const Status status = FirstError(TrainOnRanks(Job(1, extra), 1));
  EXPECT_EQ(status.code(), StatusCode::kNotFound);
  EXPECT_NE(status.message().find("zero_optimization.offload_param.nvme_path"), std::string::npos)
      << status.ToString();
}

TEST(TrainerOffloadCheckpoint, CheckpointsMoveBetweenOffloadedAndDeviceRuns) {
  // A checkpoint written in pieces from NVMe states is the same file as one written whole, so it
  // resumes without offload, and the other way round, on the same trajectory.
  for (int world : {1, 2}) {
    TempDir scratch, from_nvme, from_device;
    auto saving = [&](const TempDir& ckpt, std::vector<std::string> extra) {
      extra.push_back("checkpoint.dir=" + ckpt.Quoted());
      extra.push_back("checkpoint.interval_steps=3");
      return extra;
    };
    const std::vector<RankRun> full = TrainOnRanks(Job(world, Stage(2)), world);
    const std::vector<RankRun> nvme_run =
        TrainOnRanks(Job(world, saving(from_nvme, OnNvme(scratch, Stage(2), 2000))), world);
    const std::vector<RankRun> device_run =
        TrainOnRanks(Job(world, saving(from_device, Stage(2))), world);
    ASSERT_TRUE(nvme_run[0].status.ok()) << nvme_run[0].status.ToString();
    ASSERT_TRUE(device_run[0].status.ok()) << device_run[0].status.ToString();
    TrainerOptions resume;
    resume.resume_from = from_nvme.path() + "/step_00000003";
    const std::vector<RankRun> on_device = TrainOnRanks(Job(world, Stage(2)), world, resume);
    resume.resume_from = from_device.path() + "/step_00000003";
    const std::vector<RankRun> on_nvme =
        TrainOnRanks(Job(world, OnNvme(scratch, Stage(2), 2000)), world, resume);
    for (int r = 0; r < world; ++r) {
      ASSERT_TRUE(on_device[r].status.ok()) << on_device[r].status.ToString();
      ASSERT_TRUE(on_nvme[r].status.ok()) << on_nvme[r].status.ToString();
      ASSERT_EQ(on_device[r].losses.size(), size_t{kSteps - 3});
      for (size_t i = 0; i < on_device[r].losses.size(); ++i) {
        EXPECT_EQ(on_device[r].losses[i], full[r].losses[3 + i]);
        EXPECT_EQ(on_nvme[r].losses[i], full[r].losses[3 + i]);
      }
      EXPECT_EQ(on_device[r].params, full[r].params);
      EXPECT_EQ(on_nvme[r].params, full[r].params);
    }
  }
}

TEST(TrainerOffloadCheckpoint, APartialOffloadCheckpointResumesAtAnyRatio) {
  // The checkpoint of a ratio 0.5 run holds the same flat master, m and v as any other, so it
  // resumes with full offload, without offload and at another ratio on the same trajectory.
  for (int world : {1, 2}) {
    TempDir checkpoints;
    const std::vector<std::string> half = {"zero_optimization.offload_optimizer.ratio=0.5"};
    std::vector<std::string> saving = OnCpu(Stage(2, half));
    saving.push_back("checkpoint.dir=" + checkpoints.Quoted());
    saving.push_back("checkpoint.interval_steps=3");
    const std::vector<RankRun> full = TrainOnRanks(Job(world, saving), world);
    ASSERT_TRUE(full[0].status.ok()) << full[0].status.ToString();
    TrainerOptions resume;
    resume.resume_from = checkpoints.path() + "/step_00000003";
    const std::vector<std::vector<std::string>> settings = {
        OnCpu(Stage(2)), Stage(2),
        OnCpu(Stage(2, {"zero_optimization.offload_optimizer.ratio=0.25"})), OnCpu(Stage(3, half))};
    for (const std::vector<std::string>& setting : settings) {
      const std::vector<RankRun> resumed = TrainOnRanks(Job(world, setting), world, resume);
      for (int r = 0; r < world; ++r) {
        ASSERT_TRUE(resumed[r].status.ok()) << resumed[r].status.ToString();
        ASSERT_EQ(resumed[r].losses.size(), size_t{kSteps - 3});
        for (size_t i = 0; i < resumed[r].losses.size(); ++i) {
          EXPECT_EQ(resumed[r].losses[i], full[r].losses[3 + i]);
        }
        EXPECT_EQ(resumed[r].params, full[r].params);
      }
    }
  }
}

TEST(TrainerOffloadCheckpoint, AShardThatCannotBeWrittenOnOneRankStopsEveryRankWithoutAHang) {
  // The NVMe states are read for the checkpoint collectively; a rank whose shard file cannot even
  // be created still takes its part, so both ranks return at once with rank 1's reason.
  for (FileOp op : {FileOp::kNewWritableFile, FileOp::kAppend, FileOp::kCreateDirs}) {
    TempDir scratch, checkpoints;
    FaultInjectingFileSystem faulty;
    FileFault fault(op, op == FileOp::kAppend ? ENOSPC : EACCES);
    if (op != FileOp::kCreateDirs) fault.OnPathsContaining("rank_00001");
    faulty.Inject(fault);
    TrainerOptions options;
    options.checkpoint_fs = &faulty;
    std::vector<std::string> extra = OnNvme(scratch, Stage(2), 2000);
    extra.push_back("checkpoint.dir=" + checkpoints.Quoted());
    extra.push_back("checkpoint.interval_steps=2");
    const auto started = std::chrono::steady_clock::now();
    const std::vector<RankRun> runs = TrainOnRanks(Job(2, extra), 2, options);
    const double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
    for (int r = 0; r < 2; ++r) {
      ASSERT_FALSE(runs[r].status.ok()) << "rank " << r;
      EXPECT_NE(runs[r].status.code(), StatusCode::kDeadlineExceeded) << runs[r].status.ToString();
      EXPECT_EQ(runs[r].losses.size(), 2u) << runs[r].status.ToString();
    }
    EXPECT_EQ(faulty.faults_fired(), 1);
    // Nothing waited for the 60 s collective timeout.
    EXPECT_LT(seconds, 30.0);
    EXPECT_TRUE(fs::is_empty(scratch.path()));
  }
}

TEST(TrainerOffloadCheckpoint, ADamagedShardOnOneRankStopsEveryRankOnResume) {
  TempDir scratch, checkpoints;
  std::vector<std::string> extra = OnNvme(scratch, Stage(2), 2000);
  extra.push_back("checkpoint.dir=" + checkpoints.Quoted());
  extra.push_back("checkpoint.interval_steps=3");
  ASSERT_TRUE(FirstError(TrainOnRanks(Job(2, extra), 2)).ok());
  // One flipped byte inside rank 1's adam_v (the last blob, so near the end of the file).
  const std::string shard = checkpoints.path() + "/step_00000006/rank_00001.bin";
  std::string bytes;
  {
    std::ifstream in(shard, std::ios::binary);
    bytes.assign(std::istreambuf_iterator<char>(in), {});
  }
  ASSERT_GT(bytes.size(), 100u);
  bytes[bytes.size() - 50] ^= 0x01;
  { std::ofstream(shard, std::ios::binary | std::ios::trunc) << bytes; }
  TrainerOptions resume;
  resume.resume = true;
  const std::vector<RankRun> runs = TrainOnRanks(Job(2, extra), 2, resume);
  for (int r = 0; r < 2; ++r) {
    ASSERT_FALSE(runs[r].status.ok()) << "rank " << r;
    EXPECT_NE(runs[r].status.message().find("adam_v"), std::string::npos)
        << runs[r].status.ToString();
    EXPECT_NE(runs[r].status.message().find("rank_00001.bin"), std::string::npos)
        << runs[r].status.ToString();
  }
  EXPECT_EQ(runs[1].status.code(), StatusCode::kDataLoss);
  EXPECT_TRUE(fs::is_empty(scratch.path()));
}

}  // namespace
}  // namespace hoist::runtime
