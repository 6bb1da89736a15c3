// The trainer's data under faults: a token shard truncated while the job trains stops every rank
// with the file named, rather than ending a process with SIGBUS.
#include <gtest/gtest.h>

#include <filesystem>
#include <latch>
#include <string>
#include <thread>
#include <vector>

#include "comm/thread_communicator.h"
#include "core/memory_tracker.h"
#include "runtime/data/token_shard.h"
#include "runtime/train/trainer.h"
#include "tests/runtime/config_test_util.h"

namespace hoist::runtime {
namespace {

namespace fs = std::filesystem;

TEST(TrainerData, AShardTruncatedWhileTrainingStopsEveryRankNamingIt) {
  const fs::path dir = fs::path(::testing::TempDir()) / "hoist_trainer_truncated_shard";
  fs::remove_all(dir);
  fs::create_directories(dir);
  const std::string shard = (dir / "train.bin").string();
  std::vector<uint16_t> tokens(300000);
  for (size_t i = 0; i < tokens.size(); ++i) tokens[i] = static_cast<uint16_t>(i % 200);
  ASSERT_TRUE(WriteTokenShard(shard, tokens).ok());
  // One micro-step per step: rank 0's first window is tokens 0..32, rank 1's 32..64.
  const Config config =
      testing_util::TinyJob(2, 10, {"data.train=\"" + shard + "\"", "train_batch_size=4"});

  // Each rank opens its loader, then the file loses its tail before the first step. A loader
  // reads 131072 tokens ahead: rank 0's first read (tokens 0..131071) is all still there, rank
  // 1's (32..131103) is not.
  auto group = comm::ThreadGroup::Create(2, 60.0);
  ASSERT_TRUE(group.ok());
  std::latch created(2), truncated(1);
  std::vector<Status> results(2);
  std::vector<MemoryTracker> trackers(2);
  std::vector<std::thread> ranks;
  for (int r = 0; r < 2; ++r) {
    ranks.emplace_back([&, r] {
      TrainerOptions options;
      options.comm = &(*group)->comm(r);
      options.tracker = &trackers[r];
      auto trainer = Trainer::Create(config, options);
      created.count_down();
      truncated.wait();
      results[r] = trainer.ok() ? (*trainer)->Run() : trainer.status();
    });
  }
  created.wait();
  fs::resize_file(shard, 1024 + 2 * 131080);
  truncated.count_down();
  for (std::thread& rank : ranks) rank.join();

  ASSERT_FALSE(results[1].ok());
  EXPECT_EQ(results[1].code(), StatusCode::kDataLoss) << results[1].ToString();
  const std::string named = "token shard '" + shard + "' should be 601024 bytes";
  EXPECT_NE(results[1].message().find(named), std::string::npos) << results[1].ToString();
  ASSERT_FALSE(results[0].ok());
  EXPECT_NE(results[0].message().find("rank 1 failed"), std::string::npos) << results[0].ToString();
  EXPECT_NE(results[0].message().find(named), std::string::npos) << results[0].ToString();
}

}  // namespace
}  // namespace hoist::runtime
