// End-to-end tests of the `hoist` binary: what a user types and what they see.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <utility>

#include "tests/launcher/run_hoist.h"

namespace {

namespace fs = std::filesystem;

using Result = hoist::launcher::testing::CommandResult;
using hoist::launcher::testing::RunHoist;

fs::path TempDir(const std::string& name) {
  fs::path dir = fs::path(testing::TempDir()) / ("hoist_cli_" + name);
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir;
}

TEST(Cli, EverySubcommandHasHelp) {
  fs::path dir = TempDir("help");
  for (const char* sub : {"", "train", "data", "data tokenize", "sample", "report"}) {
    Result r = RunHoist(std::string(sub) + " --help", dir);
    EXPECT_EQ(r.exit_code, 0) << sub << ": " << r.output;
    EXPECT_NE(r.output.find("Usage"), std::string::npos) << sub;
  }
}

TEST(Cli, MisspeltConfigKeyIsOneClearErrorWithASuggestion) {
  fs::path dir = TempDir("typo");
  Result r = RunHoist("train --set train_micro_batch_size_per_gpus=4", dir);
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_NE(r.output.find("hoist: error:"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("did you mean"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("train_micro_batch_size_per_gpu"), std::string::npos) << r.output;
}

TEST(Cli, MissingConfigFileIsNamed) {
  fs::path dir = TempDir("missing_config");
  Result r = RunHoist("train -c nowhere.json", dir);
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.output.find("nowhere.json"), std::string::npos) << r.output;
}

// 4000 layers of 16384 channels: about 190 TiB for one CPU rank, more than any host has. The job
// is refused with the numbers before it allocates, not killed by the OOM killer.
TEST(Cli, AModelTooLargeForTheHostIsRefusedWithTheNumbers) {
  fs::path dir = TempDir("too_large");
  Result r = RunHoist(
      "train --device cpu --set model.n_layer=4000 --set model.n_embd=16384 "
      "--set model.n_head=64",
      dir);
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_NE(r.output.find("hoist: error: the job needs 191.54 TiB"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("1 rank x"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("hoist plan --memory"), std::string::npos) << r.output;
  EXPECT_FALSE(fs::exists(dir / "checkpoints")) << "it went on after refusing";
}

TEST(Cli, TokenizeOfAMissingFileIsNamed) {
  fs::path dir = TempDir("tokenize_missing");
  Result r = RunHoist("data tokenize absent.txt -o out.bin", dir);
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.output.find("absent.txt"), std::string::npos) << r.output;
  EXPECT_FALSE(fs::exists(dir / "out.bin"));
}

TEST(Cli, AnUnknownDeviceIsRefusedNamingTheChoices) {
  fs::path dir = TempDir("device_unknown");
  Result r = RunHoist("train --device tpu", dir);
  EXPECT_NE(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("--device"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("cuda"), std::string::npos) << r.output;
}

TEST(Cli, DeviceCudaWithoutAGpuSaysSoAndHowToTrainOnTheCpu) {
  fs::path dir = TempDir("device_cuda");
  // Hides every GPU, so the answer is the same on a machine that has one.
  Result r = RunHoist("train --device cuda --set train.steps=5", dir, "CUDA_VISIBLE_DEVICES=");
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_NE(r.output.find("hoist: error:"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("--device cpu"), std::string::npos) << r.output;
}

TEST(Cli, DeviceAutoWithoutAGpuTrainsOnTheCpu) {
  fs::path dir = TempDir("device_auto");
  Result r = RunHoist(
      "train --device auto --set train.steps=2 --set scheduler.params.total_num_steps=60 "
      "--set model.n_layer=1 --set checkpoint.dir= --set checkpoint.interval_steps=0 "
      "--set train.eval_interval=0 "
      "--set monitor.jsonl.path=",
      dir, "CUDA_VISIBLE_DEVICES=");
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("hoist: done, 2 steps"), std::string::npos) << r.output;
  EXPECT_EQ(r.output.find(" on cuda"), std::string::npos) << r.output;
}

TEST(Cli, MultiRankEnvironmentWithoutALauncherIsRefusedClearly) {
  fs::path dir = TempDir("ranks");
  Result r = RunHoist("train", dir, "RANK=0 WORLD_SIZE=2");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.output.find("hoist launch -n 2"), std::string::npos) << r.output;
}

// `hoist launch` starts two ranks that train one job with ZeRO stage 3 over shared memory: the
// ranks agree on every loss, and each holds half of the model states.
TEST(Cli, LaunchTrainsOneJobOnTwoRanks) {
  fs::path dir = TempDir("launch_two");
  const std::string job =
      "--set model.n_layer=2 --set model.n_embd=32 --set model.n_head=2 --set model.seq_len=32 "
      "--set train_batch_size=8 --set train_micro_batch_size_per_gpu=4 "
      "--set gradient_accumulation_steps=null --set train.steps=6 "
      "--set scheduler.params.total_num_steps=6 --set scheduler.params.warmup_num_steps=2 "
      "--set train.eval_interval=0 --set data.val='\"\"' --set checkpoint.dir=ck "
      "--set zero_optimization.stage=3 "
      "--set zero_optimization.stage3_param_persistence_threshold=0 ";
  Result two =
      RunHoist("launch -n 2 -- train " + job + "--set monitor.jsonl.path=log_{rank}.jsonl", dir);
  ASSERT_EQ(two.exit_code, 0) << two.output;
  EXPECT_NE(two.output.find("[rank 0] hoist: training"), std::string::npos) << two.output;
  EXPECT_NE(two.output.find("on 2 ranks, ZeRO stage 3"), std::string::npos) << two.output;
  // A sharded checkpoint: one shard per rank.
  EXPECT_TRUE(fs::exists(dir / "ck" / "step_00000006" / "rank_00000.bin"));
  EXPECT_TRUE(fs::exists(dir / "ck" / "step_00000006" / "rank_00001.bin"));
  Result one = RunHoist(
      "train " + job + "--set monitor.jsonl.path=one.jsonl --set checkpoint.dir=ck_one", dir);
  ASSERT_EQ(one.exit_code, 0) << one.output;

  auto last_lines = [&](const std::string& name) {
    std::ifstream in(dir / name);
    std::string line, step, end;
    while (std::getline(in, line)) {
      if (line.find("\"event\":\"end\"") != std::string::npos)
        end = line;
      else
        step = line;
    }
    return std::make_pair(step, end);
  };
  auto field = [](const std::string& line, const std::string& key) {
    const size_t at = line.find("\"" + key + "\":");
    EXPECT_NE(at, std::string::npos) << key << " in " << line;
    return at == std::string::npos ? 0.0 : std::stod(line.substr(at + key.size() + 3));
  };
  const auto [step0, end0] = last_lines("log_0.jsonl");
  const auto [step1, end1] = last_lines("log_1.jsonl");
  const auto [step_one, end_one] = last_lines("one.jsonl");
  ASSERT_FALSE(step0.empty());
  ASSERT_FALSE(step1.empty());
  EXPECT_EQ(field(step0, "loss"), field(step1, "loss"));
  EXPECT_NEAR(field(step0, "loss"), field(step_one, "loss"), 1e-5 * field(step_one, "loss"));
  // Stage 3 on 2 ranks: each rank holds about half of the single rank's model states.
  const double optimizer_two = field(end0.substr(end0.find("\"memory\"")), "optimizer");
  const double optimizer_one = field(end_one.substr(end_one.find("\"memory\"")), "optimizer");
  EXPECT_NEAR(optimizer_two / optimizer_one, 0.5, 0.01) << end0 << "\n" << end_one;
}

// The path a user takes with their own text: tokenize, train with checkpoints, sample.
TEST(Cli, TokenizeTrainAndSampleFromOwnText) {
  fs::path dir = TempDir("own_text");
  {
    std::ofstream text(dir / "book.txt");
    for (int i = 0; i < 400; ++i) text << "the cat sat on the mat and the dog sat on the log. ";
  }
  Result tokenize = RunHoist("data tokenize book.txt -o book.bin", dir);
  ASSERT_EQ(tokenize.exit_code, 0) << tokenize.output;
  Result train = RunHoist(
      "train --set data.train=book.bin --set data.val=book.bin --set model.n_layer=1 "
      "--set model.n_embd=32 --set model.n_head=2 --set model.seq_len=32 "
      "--set train.steps=30 --set scheduler.params.total_num_steps=30 "
      "--set scheduler.params.warmup_num_steps=5 --set train.eval_interval=15 "
      "--set checkpoint.dir=ck --set checkpoint.interval_steps=15 "
      "--set monitor.jsonl.path=log.jsonl --set steps_per_print=10",
      dir);
  ASSERT_EQ(train.exit_code, 0) << train.output;
  EXPECT_NE(train.output.find("step     30/30"), std::string::npos) << train.output;
  EXPECT_NE(train.output.find("activation"), std::string::npos) << "no memory table";
  EXPECT_TRUE(fs::exists(dir / "ck" / "latest"));
  EXPECT_TRUE(fs::exists(dir / "log.jsonl"));
  Result sample = RunHoist("sample --checkpoint ck --prompt 'the ' -n 40 --seed 3", dir);
  ASSERT_EQ(sample.exit_code, 0) << sample.output;
  EXPECT_EQ(sample.output.rfind("the ", 0), 0u) << sample.output;
  EXPECT_GE(sample.output.size(), 44u);
}

TEST(Cli, SampleFromAMissingCheckpointIsNamed) {
  fs::path dir = TempDir("sample_missing");
  Result r = RunHoist("sample --checkpoint nothing_here", dir);
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.output.find("nothing_here"), std::string::npos) << r.output;
}

}  // namespace
