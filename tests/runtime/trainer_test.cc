#include "runtime/train/trainer.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace hoist::runtime {
namespace {

namespace fs = std::filesystem;

// A small, fast job on the embedded demo corpus.
Config SmallJob(const std::vector<std::string>& extra = {}) {
  std::vector<std::string> overrides = {"model.n_layer=2",
                                        "model.n_head=2",
                                        "model.n_embd=32",
                                        "model.seq_len=32",
                                        "train_micro_batch_size_per_gpu=4",
                                        "gradient_accumulation_steps=2",
                                        "train.steps=12",
                                        "train.eval_interval=6",
                                        "train.eval_steps=2",
                                        "scheduler.params.total_num_steps=12",
                                        "scheduler.params.warmup_num_steps=3",
                                        "monitor.jsonl.path=\"\"",
                                        "steps_per_print=0",
                                        "checkpoint.dir=\"\"",
                                        "checkpoint.interval_steps=0"};
  overrides.insert(overrides.end(), extra.begin(), extra.end());
  auto config = LoadConfig("", overrides, 1);
  HOIST_CHECK(config.ok()) << config.status().ToString();
  return *config;
}

fs::path TempDir(const std::string& name) {
  fs::path dir = fs::path(testing::TempDir()) / ("hoist_trainer_" + name);
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir;
}

std::vector<float> Train(const Config& config, const TrainerOptions& options = {}) {
  auto trainer = Trainer::Create(config, options);
  HOIST_CHECK(trainer.ok()) << trainer.status().ToString();
  Status status = (*trainer)->Run();
  HOIST_CHECK(status.ok()) << status.ToString();
  return (*trainer)->losses();
}

TEST(Trainer, SameConfigAndSeedGiveBitIdenticalLosses) {
  std::vector<float> a = Train(SmallJob()), b = Train(SmallJob());
  ASSERT_EQ(a.size(), 12u);
  for (size_t i = 0; i < a.size(); ++i) EXPECT_EQ(a[i], b[i]) << "step " << i + 1;
}

TEST(Trainer, AnotherSeedGivesOtherLosses) {
  std::vector<float> a = Train(SmallJob()), b = Train(SmallJob({"train.seed=7"}));
  EXPECT_NE(a[0], b[0]);
}

std::vector<nlohmann::json> ReadJsonl(const fs::path& path) {
  std::ifstream in(path);
  std::vector<nlohmann::json> lines;
  for (std::string line; std::getline(in, line);) lines.push_back(nlohmann::json::parse(line));
  return lines;
}

// A run that stops after step 7, resumed from its step-5 checkpoint (as after a crash between
// the two), continues the straight run's trajectory exactly, and its JSONL log reads as one run.
TEST(Trainer, ResumeContinuesTheExactLossTrajectory) {
  fs::path dir = TempDir("resume");
  const std::string ckpt = "checkpoint.dir=\"" + (dir / "ck").string() + "\"";
  const std::string log = "monitor.jsonl.path=\"" + (dir / "log.jsonl").string() + "\"";
  std::vector<float> straight = Train(SmallJob({log}));
  std::vector<nlohmann::json> straight_log = ReadJsonl(dir / "log.jsonl");

  std::vector<float> head =
      Train(SmallJob({ckpt, log, "checkpoint.interval_steps=5", "train.steps=7"}));
  ASSERT_TRUE(fs::exists(dir / "ck" / "step_00000005"));
  TrainerOptions options;
  options.resume_from = (dir / "ck" / "step_00000005").string();
  std::vector<float> tail = Train(SmallJob({ckpt, log}), options);
  ASSERT_EQ(head.size(), 7u);
  ASSERT_EQ(tail.size(), 7u);  // steps 6..12
  for (size_t i = 0; i < head.size(); ++i) EXPECT_EQ(head[i], straight[i]) << "step " << i + 1;
  for (size_t i = 0; i < tail.size(); ++i) EXPECT_EQ(tail[i], straight[5 + i]) << "step " << i + 6;

  std::vector<nlohmann::json> resumed_log = ReadJsonl(dir / "log.jsonl");
  ASSERT_EQ(resumed_log.size(), straight_log.size());
  for (size_t i = 0; i + 1 < resumed_log.size(); ++i) {
    EXPECT_EQ(resumed_log[i]["step"], straight_log[i]["step"]);
    EXPECT_EQ(resumed_log[i]["loss"], straight_log[i]["loss"]) << "line " << i;
    EXPECT_EQ(resumed_log[i]["lr"], straight_log[i]["lr"]) << "line " << i;
  }
  EXPECT_EQ(resumed_log.back()["event"], "end");
  EXPECT_EQ(resumed_log.back()["tokens"], straight_log.back()["tokens"]);
}

TEST(Trainer, KeepLastPrunesOlderCheckpoints) {
  fs::path dir = TempDir("keep_last");
  Train(SmallJob({"checkpoint.dir=\"" + dir.string() + "\"", "checkpoint.interval_steps=3",
                  "checkpoint.keep_last=2"}));
  std::vector<std::string> steps;
  for (const auto& entry : fs::directory_iterator(dir)) {
    if (entry.path().filename().string().rfind("step_", 0) == 0) {
      steps.push_back(entry.path().filename().string());
    }
  }
  std::sort(steps.begin(), steps.end());
  EXPECT_EQ(steps, (std::vector<std::string>{"step_00000009", "step_00000012"}));
}

TEST(Trainer, ResumeWithNoCheckpointYetStartsFresh) {
  fs::path dir = TempDir("resume_fresh");
  TrainerOptions options;
  options.resume = true;
  std::vector<float> losses =
      Train(SmallJob({"checkpoint.dir=\"" + (dir / "ck").string() + "\""}), options);
  EXPECT_EQ(losses, Train(SmallJob()));
}

TEST(Trainer, LearningRateFollowsDeepSpeedsSchedulerStepping) {
  // Linear warmup over 4 steps to 1e-2: DeepSpeed's k-th step runs at iteration k - 1, so the
  // first step has lr 0 (WarmupCosineLR's value before its first step) and step k (1-based)
  // has lr 1e-2 * (k - 2) / 4 during warmup.
  auto trainer =
      Trainer::Create(SmallJob({"optimizer.params.lr=1e-2", "scheduler.params.warmup_num_steps=4",
                                "scheduler.params.warmup_type=\"linear\""}),
                      {});
  ASSERT_TRUE(trainer.ok()) << trainer.status().ToString();
  std::vector<float> lrs;
  for (int i = 0; i < 4; ++i) lrs.push_back((*trainer)->Step()->lr);
  EXPECT_FLOAT_EQ(lrs[0], 0.0f);
  EXPECT_FLOAT_EQ(lrs[1], 0.0f);
  EXPECT_FLOAT_EQ(lrs[2], 1e-2f * 1 / 4);
  EXPECT_FLOAT_EQ(lrs[3], 1e-2f * 2 / 4);
}

TEST(Trainer, ResumeRefusesACheckpointOfAnotherModelOrBatch) {
  fs::path dir = TempDir("other_model");
  Train(SmallJob({"checkpoint.dir=\"" + dir.string() + "\"", "train.steps=2"}));
  TrainerOptions options;
  options.resume = true;
  auto trainer = Trainer::Create(
      SmallJob({"checkpoint.dir=\"" + dir.string() + "\"", "model.n_embd=64"}), options);
  ASSERT_FALSE(trainer.ok());
  EXPECT_NE(trainer.status().message().find("n_embd"), std::string::npos)
      << trainer.status().message();
  auto other_batch = Trainer::Create(
      SmallJob({"checkpoint.dir=\"" + dir.string() + "\"", "gradient_accumulation_steps=1"}),
      options);
  ASSERT_FALSE(other_batch.ok());
  EXPECT_NE(other_batch.status().message().find("gradient_accumulation_steps"), std::string::npos)
      << other_batch.status().message();
}

TEST(Trainer, LossFallsOnTheDemoCorpus) {
  Config config = SmallJob(
      {"train.steps=60", "scheduler.params.total_num_steps=60", "optimizer.params.lr=3e-3"});
  std::vector<float> losses = Train(config);
  // From ln(256) = 5.55 at initialisation, a byte-level model learns the letter statistics fast.
  EXPECT_GT(losses.front(), 5.0f);
  EXPECT_LT(losses.back(), 3.2f);
}

TEST(Trainer, JsonlLogHasEveryContractField) {
  fs::path dir = TempDir("jsonl");
  fs::path log = dir / "log_{rank}.jsonl";
  MemoryTracker tracker;  // this run's bytes alone
  TrainerOptions options;
  options.tracker = &tracker;
  Config config = SmallJob({"monitor.jsonl.path=\"" + log.string() + "\""});
  const int64_t param_bytes = ModelParameterCount(config.model) * 4;
  Train(config, options);
  std::ifstream in(dir / "log_0.jsonl");
  ASSERT_TRUE(in.good());
  std::vector<nlohmann::json> lines;
  for (std::string line; std::getline(in, line);) lines.push_back(nlohmann::json::parse(line));
  ASSERT_EQ(lines.size(), 13u);  // 12 steps and the end record
  for (size_t i = 0; i < 12; ++i) {
    const nlohmann::json& r = lines[i];
    for (const char* key : {"step", "rank", "loss", "lr", "grad_norm", "loss_scale", "skipped",
                            "tokens_per_s", "step_s", "memory", "peak"}) {
      EXPECT_TRUE(r.contains(key)) << "line " << i << " lacks " << key;
    }
    EXPECT_EQ(r["step"], int(i) + 1);
    // fp32 training: 4 bytes of parameter, 4 of gradient and 8 of Adam moments per parameter.
    EXPECT_EQ(r["memory"]["device"]["param"].get<int64_t>(), param_bytes);
    EXPECT_EQ(r["memory"]["device"]["grad"].get<int64_t>(), param_bytes);
    EXPECT_EQ(r["memory"]["device"]["optimizer"].get<int64_t>(), 2 * param_bytes);
    EXPECT_GT(r["memory"]["device"]["activation"].get<int64_t>(), 0);
    EXPECT_EQ(r["peak"]["device"]["activation"], r["memory"]["device"]["activation"]);
  }
  EXPECT_TRUE(lines[5].contains("val_loss"));
  const nlohmann::json& end = lines.back();
  EXPECT_EQ(end["event"], "end");
  // Everything is allocated before the first step and held to the end, so the largest
  // simultaneous total is the final total, which the tracker also reports directly.
  int64_t device_total = 0;
  for (const auto& [category, bytes] : end["memory"]["device"].items()) {
    device_total += bytes.get<int64_t>();
  }
  EXPECT_EQ(end["peak_total"]["device"].get<int64_t>(), device_total);
  EXPECT_EQ(device_total, tracker.Snapshot().peak_total[int(Place::kDevice)]);
  EXPECT_GE(end["peak_rss"].get<int64_t>(), device_total);
}

}  // namespace
}  // namespace hoist::runtime
