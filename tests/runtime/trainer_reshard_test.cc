// A checkpoint resumes on any number of ranks, ZeRO stage and optimizer placement: each rank
// reads the ranges of the saved shards that overlap its new one, and the run continues the
// trajectory of the run that never stopped. A missing or damaged shard of the old world is named.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "runtime/checkpoint/checkpoint.h"
#include "runtime/checkpoint/checkpoint_weights.h"
#include "runtime/train/trainer.h"
#include "tests/runtime/config_test_util.h"
#include "tests/runtime/trainer_test_util.h"

namespace hoist::runtime {
namespace {

namespace fs = std::filesystem;
using testing_util::RankRun;
using testing_util::TrainOnRanks;

constexpr int kSteps = 12;

fs::path TempDir(const std::string& name) {
  fs::path dir = fs::path(::testing::TempDir()) / ("hoist_reshard_" + name);
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir;
}

// The tiny job (global batch 8 on any number of ranks), run up to `stop` of kSteps steps, with a
// checkpoint every 4 steps in `dir`.
Config Job(int world, int stop, const fs::path& dir, std::vector<std::string> extra) {
  extra.push_back("checkpoint.dir=\"" + (dir / "ck").string() + "\"");
  extra.push_back("checkpoint.interval_steps=4");
  extra.push_back("zero_optimization.stage3_param_persistence_threshold=1000");
  Config config = testing_util::TinyJob(world, kSteps, extra);
  config.train.steps = stop;  // the schedule still spans kSteps
  return config;
}

std::vector<std::string> Stage(int stage, std::vector<std::string> more = {}) {
  more.push_back("zero_optimization.stage=" + std::to_string(stage));
  return more;
}

std::vector<std::string> OnNvme(const fs::path& dir, std::vector<std::string> more) {
  fs::create_directories(dir / "nvme");
  more.push_back("zero_optimization.offload_optimizer.device=\"nvme\"");
  more.push_back("zero_optimization.offload_optimizer.nvme_path=\"" + (dir / "nvme").string() +
                 "\"");
  more.push_back("zero_optimization.sub_group_size=3000");
  return more;
}

std::string StepDir(const fs::path& dir, int step) {
  return (dir / "ck" / CheckpointStepDirName(step)).string();
}

TrainerOptions ResumeFrom(const std::string& step_dir) {
  TrainerOptions options;
  options.resume_from = step_dir;
  return options;
}

void ExpectOk(const std::vector<RankRun>& runs) {
  for (size_t r = 0; r < runs.size(); ++r) {
    ASSERT_TRUE(runs[r].status.ok()) << "rank " << r << ": " << runs[r].status.ToString();
  }
}

// max |a - b| / max(floor, |b|), as the 1-rank vs N-rank comparison in trainer_zero_test does.
double MaxRelative(const std::vector<float>& a, const std::vector<float>& b, double floor) {
  EXPECT_EQ(a.size(), b.size());
  double worst = 0;
  for (size_t i = 0; i < std::min(a.size(), b.size()); ++i) {
    worst =
        std::max(worst, std::abs(double(a[i]) - b[i]) / std::max(floor, std::abs(double(b[i]))));
  }
  return worst;
}

// ‖a − b‖ / ‖b‖.
double NormRelative(const std::vector<float>& a, const std::vector<float>& b) {
  EXPECT_EQ(a.size(), b.size());
  double diff = 0, ref = 0;
  for (size_t i = 0; i < std::min(a.size(), b.size()); ++i) {
    diff += (double(a[i]) - b[i]) * (double(a[i]) - b[i]);
    ref += double(b[i]) * b[i];
  }
  return std::sqrt(diff / ref);
}

std::vector<float> Slice(const std::vector<float>& v, size_t begin, size_t end) {
  return std::vector<float>(v.begin() + static_cast<std::ptrdiff_t>(begin),
                            v.begin() + static_cast<std::ptrdiff_t>(end));
}

// Stopped at stage 3 on 2 ranks, resumed at stage 1 on 1 rank, then at stage 2 on 4 ranks with
// the optimizer states on NVMe: the losses are those of the run that never stopped. The splits
// of the global batch over ranks sum the gradients in different orders, so the comparison is to
// float rounding: the 1e-5 relative that the uninterrupted 1-rank and N-rank runs keep
// (trainer_zero_test), far below what a state restored wrong moves the loss by.
TEST(TrainerReshard, StoppedOnTwoRanksResumedOnOneThenFourWithNvmeContinuesTheTrajectory) {
  const fs::path whole = TempDir("whole");
  const std::vector<RankRun> never_stopped = TrainOnRanks(Job(2, kSteps, whole, Stage(3)), 2);
  ExpectOk(never_stopped);
  const std::vector<float>& want = never_stopped[0].losses;
  ASSERT_EQ(want.size(), size_t{kSteps});

  const fs::path dir = TempDir("chain");
  const std::vector<RankRun> first = TrainOnRanks(Job(2, 4, dir, Stage(3)), 2);
  ExpectOk(first);
  EXPECT_EQ(first[0].losses, Slice(want, 0, 4)) << "the same job, the same losses";

  const std::vector<RankRun> second =
      TrainOnRanks(Job(1, 8, dir, Stage(1)), 1, ResumeFrom(StepDir(dir, 4)));
  ExpectOk(second);
  ASSERT_EQ(second[0].losses.size(), 4u);
  EXPECT_LT(MaxRelative(second[0].losses, Slice(want, 4, 8), 1e-6), 1e-5);

  const std::vector<RankRun> third =
      TrainOnRanks(Job(4, kSteps, dir, OnNvme(dir, Stage(2))), 4, ResumeFrom(StepDir(dir, 8)));
  ExpectOk(third);
  for (int r = 0; r < 4; ++r) {
    const RankRun& run = third[static_cast<size_t>(r)];
    ASSERT_EQ(run.losses.size(), 4u) << "rank " << r;
    EXPECT_LT(MaxRelative(run.losses, Slice(want, 8, 12), 1e-6), 1e-5) << "rank " << r;
    EXPECT_LT(NormRelative(run.params, never_stopped[0].params), 1e-5) << "rank " << r;
    EXPECT_GT(run.offload.nvme_read_bytes, 0) << "rank " << r;
  }
  // The run learned something, so the comparison is between runs that moved.
  EXPECT_LT(want.back(), want.front() - 0.3f);

  // Export reads the 4-rank NVMe checkpoint whole as it reads any other.
  const ModelConfig model = Job(1, kSteps, dir, {}).model;
  std::vector<float> weights(static_cast<size_t>(ModelParameterCount(model)));
  ASSERT_TRUE(ReadCheckpointWeights(StepDir(dir, 12), model, weights.data()).ok());
  EXPECT_EQ(weights, third[0].params);
}

// The states land where they belong bit for bit: a checkpoint written from NVMe, resumed on
// another world, stage and placement with no step taken, holds exactly the weights it was
// written with.
TEST(TrainerReshard, TheRepartitionedWeightsAreTheSavedOnesExactly) {
  const fs::path dir = TempDir("exact");
  ExpectOk(TrainOnRanks(Job(4, 4, dir, OnNvme(dir, Stage(3))), 4));
  const ModelConfig model = Job(1, kSteps, dir, {}).model;
  std::vector<float> saved(static_cast<size_t>(ModelParameterCount(model)));
  ASSERT_TRUE(ReadCheckpointWeights(StepDir(dir, 4), model, saved.data()).ok());
  const struct {
    int world, stage;
    bool nvme;
  } targets[] = {{1, 0, false}, {2, 0, false}, {2, 1, false}, {1, 3, true},
                 {8, 2, false}, {2, 3, true},  {4, 1, false}};
  for (const auto& [world, stage, nvme] : targets) {
    // Eight ranks split the batch of 8 one sequence each.
    std::vector<std::string> extra =
        Stage(stage, {"train_micro_batch_size_per_gpu=" + std::to_string(world == 8 ? 1 : 2)});
    if (nvme) extra = OnNvme(dir, extra);
    const std::vector<RankRun> runs =
        TrainOnRanks(Job(world, 4, dir, extra), world, ResumeFrom(StepDir(dir, 4)));
    ExpectOk(runs);
    for (int r = 0; r < world; ++r) {
      EXPECT_EQ(runs[static_cast<size_t>(r)].params, saved)
          << world << " ranks at stage " << stage << (nvme ? " on NVMe" : "") << ", rank " << r;
    }
  }
}

// fp16's loss scale, its hysteresis and the skipped steps carry over to another world size: the
// resumed run scales, skips and trains as the run that never stopped.
TEST(TrainerReshard, TheFp16LossScalerStateCarriesAcrossWorldSizes) {
  const auto fp16 = [](const fs::path& dir, int stage) {
    return Stage(stage, {"fp16.enabled=true", "fp16.initial_scale_power=24",
                         "monitor.jsonl.path=\"" + (dir / "log.jsonl").string() + "\""});
  };
  const auto scales = [](const fs::path& log) {
    std::vector<float> out;
    std::ifstream in(log);
    for (std::string line; std::getline(in, line);) {
      const nlohmann::json record = nlohmann::json::parse(line);
      if (!record.contains("event")) out.push_back(record["loss_scale"].get<float>());
    }
    return out;
  };
  const fs::path whole = TempDir("fp16_whole");
  const std::vector<RankRun> never_stopped = TrainOnRanks(Job(2, kSteps, whole, fp16(whole, 3)), 2);
  ExpectOk(never_stopped);
  const std::vector<float> want_scales = scales(whole / "log.jsonl");
  ASSERT_EQ(want_scales.size(), size_t{kSteps});
  // Overflows early on lowered the scale before the checkpoint: there is state to carry.
  ASSERT_LT(want_scales[3], want_scales[0]);

  const fs::path dir = TempDir("fp16_chain");
  ExpectOk(TrainOnRanks(Job(2, 4, dir, fp16(dir, 3)), 2));
  const std::vector<RankRun> resumed =
      TrainOnRanks(Job(1, kSteps, dir, fp16(dir, 1)), 1, ResumeFrom(StepDir(dir, 4)));
  ExpectOk(resumed);
  EXPECT_EQ(scales(dir / "log.jsonl"), want_scales);
  // The same 1e-5 as in fp32: the master weights and the moments are fp32 in both runs.
  EXPECT_LT(MaxRelative(resumed[0].losses, Slice(never_stopped[0].losses, 4, kSteps), 1e-6), 1e-5);
}

// A shard of the old world that is gone or damaged stops every rank of the new one, naming it.
TEST(TrainerReshard, AMissingOrDamagedShardOfTheOldWorldIsNamed) {
  const fs::path dir = TempDir("missing");
  ExpectOk(TrainOnRanks(Job(2, 4, dir, Stage(2)), 2));
  const fs::path shard = fs::path(StepDir(dir, 4)) / "rank_00001.bin";
  const fs::path kept = dir / "kept.bin";
  fs::copy_file(shard, kept);
  fs::remove(shard);
  for (const int world : {1, 4}) {
    const std::vector<RankRun> runs =
        TrainOnRanks(Job(world, 8, dir, Stage(1)), world, ResumeFrom(StepDir(dir, 4)));
    for (int r = 0; r < world; ++r) {
      const Status& s = runs[static_cast<size_t>(r)].status;
      ASSERT_FALSE(s.ok()) << world << " ranks, rank " << r;
      EXPECT_NE(s.message().find(StepDir(dir, 4)), std::string::npos) << s.ToString();
      EXPECT_NE(s.message().find("rank_00001.bin"), std::string::npos) << s.ToString();
    }
  }
  // Damage in the last state blob, which only a checksum of the whole blob notices.
  fs::copy_file(kept, shard);
  {
    std::fstream file(shard, std::ios::in | std::ios::out | std::ios::binary);
    file.seekp(-5, std::ios::end);
    file.put('\x7f');
  }
  for (const int world : {1, 4}) {
    const std::vector<RankRun> runs =
        TrainOnRanks(Job(world, 8, dir, Stage(3)), world, ResumeFrom(StepDir(dir, 4)));
    for (int r = 0; r < world; ++r) {
      const Status& s = runs[static_cast<size_t>(r)].status;
      ASSERT_FALSE(s.ok()) << world << " ranks, rank " << r;
      EXPECT_NE(s.message().find("adam_v"), std::string::npos) << s.ToString();
      EXPECT_NE(s.message().find(shard.string()), std::string::npos) << s.ToString();
    }
  }
}

// A blob that no rank of the new job reads (rank 1's data position; its log length on another
// world size) is checked all the same: a flipped byte in it stops every rank, naming the shard
// and the blob, on the same world size and on others.
TEST(TrainerReshard, ADamagedBlobNoRankReadsIsNamedOnAnyWorldSize) {
  const fs::path dir = TempDir("unread_blob");
  ExpectOk(TrainOnRanks(Job(2, 4, dir, Stage(1)), 2));
  const fs::path shard = fs::path(StepDir(dir, 4)) / "rank_00001.bin";
  for (const char* blob : {"train_loader", "jsonl_bytes"}) {
    StatusOr<CheckpointReader> reader = CheckpointReader::Open(StepDir(dir, 4), 1);
    ASSERT_TRUE(reader.ok()) << reader.status().ToString();
    int64_t offset = -1;
    for (const ShardBlobEntry& entry : reader->blobs()) {
      if (entry.name == blob) offset = entry.offset;
    }
    ASSERT_GE(offset, 0) << blob;
    const fs::path kept = dir / "kept.bin";
    fs::copy_file(shard, kept, fs::copy_options::overwrite_existing);
    {
      std::fstream file(shard, std::ios::in | std::ios::out | std::ios::binary);
      file.seekg(offset);
      const char byte = static_cast<char>(file.get());
      file.seekp(offset);
      file.put(static_cast<char>(byte ^ 0x01));
    }
    for (const int world : {1, 2, 4}) {
      const std::vector<RankRun> runs =
          TrainOnRanks(Job(world, 8, dir, Stage(1)), world, ResumeFrom(StepDir(dir, 4)));
      for (int r = 0; r < world; ++r) {
        const Status& s = runs[static_cast<size_t>(r)].status;
        ASSERT_FALSE(s.ok()) << blob << ", " << world << " ranks, rank " << r;
        EXPECT_NE(s.message().find(blob), std::string::npos) << s.ToString();
        EXPECT_NE(s.message().find("rank_00001.bin"), std::string::npos) << s.ToString();
      }
    }
    fs::copy_file(kept, shard, fs::copy_options::overwrite_existing);
  }
  // Put back, the checkpoint resumes on any world size.
  ExpectOk(TrainOnRanks(Job(4, 8, dir, Stage(1)), 4, ResumeFrom(StepDir(dir, 4))));
}

// The global batch must stay: a resume with another one is refused, naming both splits.
TEST(TrainerReshard, AnotherGlobalBatchIsRefusedNamingIt) {
  const fs::path dir = TempDir("batch");
  ExpectOk(TrainOnRanks(Job(2, 4, dir, Stage(1)), 2));
  const std::vector<RankRun> runs = TrainOnRanks(Job(2, 8, dir, Stage(1, {"train_batch_size=16"})),
                                                 2, ResumeFrom(StepDir(dir, 4)));
  ASSERT_FALSE(runs[0].status.ok());
  EXPECT_NE(runs[0].status.message().find("train_batch_size = 8"), std::string::npos)
      << runs[0].status.ToString();
}

// Checkpoints written before train_batch_size was recorded imply it by their split and world.
TEST(TrainerReshard, AnOlderCheckpointWithoutTrainBatchSizeImpliesItFromItsSplit) {
  const fs::path dir = TempDir("older");
  ExpectOk(TrainOnRanks(Job(2, 4, dir, Stage(2)), 2));
  const fs::path manifest_path = fs::path(StepDir(dir, 4)) / "manifest.json";
  nlohmann::json manifest;
  std::ifstream(manifest_path) >> manifest;
  ASSERT_EQ(manifest["metadata"]["run"]["train_batch_size"], 8);
  manifest["metadata"]["run"].erase("train_batch_size");
  manifest["manifest_xxh64"] = CheckpointManifestChecksum(manifest).value();
  std::ofstream(manifest_path, std::ios::trunc) << manifest.dump(2);
  // 2 ranks x 2 sequences x 2 accumulation steps: 8, as 1 rank x 2 x 4.
  ExpectOk(TrainOnRanks(Job(1, 5, dir, Stage(1)), 1, ResumeFrom(StepDir(dir, 4))));
  const std::vector<RankRun> other = TrainOnRanks(Job(1, 5, dir, Stage(1, {"train_batch_size=4"})),
                                                  1, ResumeFrom(StepDir(dir, 4)));
  ASSERT_FALSE(other[0].status.ok());
  EXPECT_NE(other[0].status.message().find("train_batch_size = 8 (train_micro_batch_size_per_gpu "
                                           "2 x gradient_accumulation_steps 2 x 2 ranks)"),
            std::string::npos)
      << other[0].status.ToString();
}

}  // namespace
}  // namespace hoist::runtime
