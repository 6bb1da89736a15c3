// `hoist plan` and `hoist train --memory-budget` as a user runs them: the table of choices, the
// best config written with -o and trained by `hoist train -c`, and a budget nothing fits.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

#include "tests/launcher/launch_test_util.h"
#include "tests/launcher/run_hoist.h"

namespace hoist::launcher {
namespace {

namespace fs = std::filesystem;
using testing::Contains;

using Result = testing::CommandResult;

Result RunHoist(const std::string& args, const fs::path& dir, bool merge_stderr = true) {
  return testing::RunHoist(args, dir, "", merge_stderr);
}

// A 2-layer job of 2 steps that writes nothing but its JSONL log.
const std::string kJob =
    "--set model.n_layer=2 --set model.n_embd=32 --set model.n_head=2 --set model.seq_len=32 "
    "--set train_batch_size=8 --set train_micro_batch_size_per_gpu=4 "
    "--set gradient_accumulation_steps=null --set train.steps=2 "
    "--set scheduler.params.total_num_steps=2 --set scheduler.params.warmup_num_steps=1 "
    "--set train.eval_interval=0 --set data.val='\"\"' --set checkpoint.dir='\"\"' "
    "--set checkpoint.interval_steps=0 --set steps_per_print=1 --set monitor.jsonl.path='\"\"' ";

// The device peak the job's config as given needs, from `hoist plan --json`.
int64_t BaseDeviceBytes(const fs::path& dir) {
  Result r = RunHoist("plan --memory 1GiB --flops 1e10 --json " + kJob, dir, false);
  EXPECT_EQ(r.exit_code, 0) << r.output;
  const nlohmann::json plan = nlohmann::json::parse(r.output, nullptr, false);
  EXPECT_FALSE(plan.is_discarded()) << r.output;
  if (plan.is_discarded() || !plan.contains("base")) return 0;
  EXPECT_EQ(plan["candidates"][0]["choice"]["stage"], 0);
  EXPECT_TRUE(plan["base"]["fits"].get<bool>());
  return plan["base"]["device_bytes"].get<int64_t>();
}

int64_t LoggedDevicePeak(const fs::path& log) {
  std::ifstream in(log);
  int64_t peak = -1;
  for (std::string line; std::getline(in, line);) {
    const nlohmann::json record = nlohmann::json::parse(line, nullptr, false);
    if (!record.is_discarded() && record.contains("event")) {
      peak = record["peak_total"]["device"].get<int64_t>();
    }
  }
  return peak;
}

TEST(PlanCli, TableAndTheBestConfigThatTrainWithinTheBudget) {
  const fs::path dir = testing::TempDir("hoist_plan_", "table");
  const int64_t base = BaseDeviceBytes(dir);
  ASSERT_GT(base, 0);
  const int64_t budget = base - 1;
  Result plan = RunHoist(
      "plan --memory " + std::to_string(budget) + " --flops 1e10 -o best.json " + kJob, dir);
  ASSERT_EQ(plan.exit_code, 0) << plan.output;
  EXPECT_TRUE(Contains(plan.output, "settings fit")) << plan.output;
  EXPECT_TRUE(Contains(plan.output, "checkpointing")) << plan.output;
  EXPECT_TRUE(Contains(plan.output, "*    1 ")) << plan.output;
  EXPECT_TRUE(Contains(plan.output, "best: stage ")) << plan.output;
  EXPECT_TRUE(Contains(plan.output, "it does not fit")) << plan.output;
  EXPECT_TRUE(Contains(plan.output, "changes from the config: --set ")) << plan.output;
  EXPECT_TRUE(Contains(plan.output, "wrote best.json")) << plan.output;
  ASSERT_TRUE(fs::exists(dir / "best.json"));

  Result train = RunHoist("train -c best.json --set monitor.jsonl.path=log.jsonl", dir);
  ASSERT_EQ(train.exit_code, 0) << train.output;
  EXPECT_TRUE(Contains(train.output, "hoist: done")) << train.output;
  const int64_t peak = LoggedDevicePeak(dir / "log.jsonl");
  ASSERT_GT(peak, 0);
  EXPECT_LE(peak, budget);
}

TEST(PlanCli, TrainWithAMemoryBudgetSaysWhatItChangedAndStaysWithinIt) {
  const fs::path dir = testing::TempDir("hoist_plan_", "train_budget");
  const int64_t base = BaseDeviceBytes(dir);
  ASSERT_GT(base, 0);
  const int64_t budget = base - 1;
  Result train = RunHoist("train --memory-budget " + std::to_string(budget) + " " + kJob +
                              "--set monitor.jsonl.path=log.jsonl",
                          dir);
  ASSERT_EQ(train.exit_code, 0) << train.output;
  EXPECT_TRUE(Contains(train.output, "hoist: memory budget ")) << train.output;
  EXPECT_TRUE(Contains(train.output, "hoist: planned changes: --set ")) << train.output;
  EXPECT_TRUE(Contains(train.output, "hoist: done")) << train.output;
  EXPECT_LE(LoggedDevicePeak(dir / "log.jsonl"), budget);
}

TEST(PlanCli, WhyNamesTheHostLimitWhenOnlyItIsExceeded) {
  const fs::path dir = testing::TempDir("hoist_plan_", "why_host");
  const std::string job = kJob +
                          "--set zero_optimization.stage=1 "
                          "--set zero_optimization.offload_optimizer.device=cpu ";
  Result generous = RunHoist("plan --memory 1GiB --flops 1e10 --top 0 --json " + job, dir, false);
  ASSERT_EQ(generous.exit_code, 0) << generous.output;
  const nlohmann::json plan = nlohmann::json::parse(generous.output, nullptr, false);
  ASSERT_FALSE(plan.is_discarded()) << generous.output;
  ASSERT_TRUE(plan.contains("base")) << generous.output;
  // A host limit that holds every setting without offload but not the base's optimizer states on
  // the host; the device budget holds everything.
  int64_t host = 0;
  for (const nlohmann::json& c : plan["candidates"]) {
    if (c["choice"]["offload_optimizer"] == "none" && c["choice"]["offload_param"] == "none" &&
        !c["choice"]["cpu_checkpointing"].get<bool>()) {
      host = std::max(host, c["host_bytes_per_node"].get<int64_t>());
    }
  }
  // The search includes partial optimizer offloads, with their ratio.
  bool partial = false;
  for (const nlohmann::json& c : plan["candidates"]) {
    partial |= c["choice"]["offload_optimizer"] == "cpu" &&
               c["choice"]["offload_optimizer_ratio"].get<double>() == 0.5;
  }
  EXPECT_TRUE(partial) << generous.output;
  const int64_t base_host = plan["base"]["host_bytes_per_node"].get<int64_t>();
  ASSERT_GT(host, 0);
  ASSERT_LT(host, base_host);

  Result r = RunHoist(
      "plan --memory 1GiB --host-memory " + std::to_string(host) + " --flops 1e10 " + job, dir);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_TRUE(Contains(r.output, "of host memory per node, ")) << r.output;
  EXPECT_TRUE(Contains(r.output, " limit: it does not fit")) << r.output;
  EXPECT_FALSE(Contains(r.output, "of device memory per rank, ")) << r.output;
  EXPECT_FALSE(Contains(r.output, "of NVMe per node")) << r.output;
}

TEST(PlanCli, TrainRefusalLeavesTheUnlimitedNvmeBudgetOut) {
  const fs::path dir = testing::TempDir("hoist_plan_", "nvme_unlimited");
  // An nvme_path makes `hoist train --memory-budget` consider NVMe without a size limit.
  Result train = RunHoist("train --memory-budget 1KiB " + kJob +
                              "--set zero_optimization.offload_optimizer.nvme_path='\"" +
                              (dir / "nvme").string() + "\"'",
                          dir);
  EXPECT_EQ(train.exit_code, 1) << train.output;
  EXPECT_TRUE(Contains(train.output, "the smallest device budget that fits is")) << train.output;
  EXPECT_FALSE(Contains(train.output, "of NVMe per node")) << train.output;
  EXPECT_FALSE(Contains(train.output, "TiB")) << train.output;
}

TEST(PlanCli, EightBitMomentsAreChosenOnlyWhenAllowed) {
  const fs::path dir = testing::TempDir("hoist_plan_", "eight_bit");
  Result r =
      RunHoist("plan --memory 1GiB --flops 1e10 --json --allow-8bit-optimizer " + kJob, dir, false);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const nlohmann::json plan = nlohmann::json::parse(r.output, nullptr, false);
  ASSERT_FALSE(plan.is_discarded()) << r.output;
  // Below every 32-bit setting that keeps the optimizer on the device.
  int64_t least = INT64_MAX;
  for (const nlohmann::json& c : plan["candidates"]) {
    const nlohmann::json& choice = c["choice"];
    if (!choice["optimizer_8bit"].get<bool>() && choice["offload_optimizer"] == "none") {
      least = std::min(least, c["device_bytes"].get<int64_t>());
    }
  }
  ASSERT_LT(least, INT64_MAX);
  const std::string budget = std::to_string(least - 1);
  Result train = RunHoist("train --memory-budget " + budget + " --allow-8bit-optimizer " + kJob +
                              "--set monitor.jsonl.path=log.jsonl",
                          dir);
  ASSERT_EQ(train.exit_code, 0) << train.output;
  EXPECT_TRUE(Contains(train.output, ", 8-bit AdamW, predicted device peak")) << train.output;
  EXPECT_TRUE(Contains(train.output, "--set 'optimizer.type=\"AdamW8bit\"'")) << train.output;
  EXPECT_LE(LoggedDevicePeak(dir / "log.jsonl"), least - 1);
  // Without the flag the same budget keeps 32-bit moments.
  Result plain = RunHoist("train --memory-budget " + budget + " " + kJob, dir);
  ASSERT_EQ(plain.exit_code, 0) << plain.output;
  EXPECT_FALSE(Contains(plain.output, "AdamW8bit")) << plain.output;
  // The flag means nothing without a budget.
  Result alone = RunHoist("train --allow-8bit-optimizer " + kJob, dir);
  EXPECT_NE(alone.exit_code, 0);
  EXPECT_TRUE(Contains(alone.output, "--allow-8bit-optimizer requires --memory-budget"))
      << alone.output;
}

TEST(PlanCli, HelpNamesTheBudgets) {
  const fs::path dir = testing::TempDir("hoist_plan_", "help");
  Result plan = RunHoist("plan --help", dir);
  EXPECT_EQ(plan.exit_code, 0) << plan.output;
  for (const char* flag : {"--memory", "--host-memory", "--nvme", "--nvme-path", "--nodes", "-o"}) {
    EXPECT_TRUE(Contains(plan.output, flag)) << flag << ": " << plan.output;
  }
  Result train = RunHoist("train --help", dir);
  EXPECT_TRUE(Contains(train.output, "--memory-budget")) << train.output;
}

TEST(PlanCli, BudgetsNothingFitsAndBadSizesAreOneClearError) {
  const fs::path dir = testing::TempDir("hoist_plan_", "refused");
  Result train = RunHoist("train --memory-budget 1KiB " + kJob, dir);
  EXPECT_EQ(train.exit_code, 1) << train.output;
  EXPECT_TRUE(Contains(train.output, "hoist: error: --memory-budget 1.00 KiB")) << train.output;
  EXPECT_TRUE(Contains(train.output, "the smallest device budget that fits is")) << train.output;
  EXPECT_FALSE(Contains(train.output, "hoist: training")) << train.output;

  Result plan = RunHoist("plan --memory 1KiB --flops 1e10 -o never.json " + kJob, dir);
  EXPECT_EQ(plan.exit_code, 1) << plan.output;
  EXPECT_TRUE(Contains(plan.output, "the smallest device budget that fits is")) << plan.output;
  EXPECT_FALSE(fs::exists(dir / "never.json"));

  Result bad = RunHoist("plan --memory '12 gigs' " + kJob, dir);
  EXPECT_EQ(bad.exit_code, 1) << bad.output;
  EXPECT_TRUE(Contains(bad.output, "--memory: cannot read \"12 gigs\" as a size")) << bad.output;

  Result bad_train = RunHoist("train --memory-budget lots " + kJob, dir);
  EXPECT_EQ(bad_train.exit_code, 1) << bad_train.output;
  EXPECT_TRUE(Contains(bad_train.output, "--memory-budget: cannot read")) << bad_train.output;
}

}  // namespace
}  // namespace hoist::launcher
