// `hoist estimate` end to end: its --json peak and peak_total for the demo job equal, key by
// key, the JSONL log's end record of the same job trained for two steps; the table names the
// peak's phase and the ZeRO formula; bad arguments are refused with a message.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

#include "tests/launcher/run_hoist.h"

namespace hoist {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;

using Result = launcher::testing::CommandResult;

Result Hoist(const std::string& args, const fs::path& dir, bool with_stderr = true) {
  return launcher::testing::RunHoist(args, dir, "", with_stderr);
}

fs::path FreshDir(const std::string& name) {
  fs::path dir = fs::path(::testing::TempDir()) / ("hoist_estimate_" + name);
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir;
}

constexpr char kShortDemo[] =
    "--set train.steps=2 scheduler.params.total_num_steps=2 scheduler.params.warmup_num_steps=1 "
    "checkpoint.dir='\"\"' checkpoint.interval_steps=0 zero_optimization.stage=2 "
    "activation_checkpointing.policy=selective";

TEST(EstimateCli, JsonEqualsTheJsonlEndRecordOfTheSameJob) {
  const fs::path dir = FreshDir("json");
  const Result estimate = Hoist(std::string("estimate --json ") + kShortDemo, dir, false);
  ASSERT_EQ(estimate.exit_code, 0) << estimate.output;
  const nlohmann::json predicted = nlohmann::json::parse(estimate.output);
  const Result train = Hoist(std::string("train ") + kShortDemo + " monitor.jsonl.path='\"" +
                                 (dir / "log.jsonl").string() + "\"'",
                             dir);
  ASSERT_EQ(train.exit_code, 0) << train.output;
  std::ifstream log(dir / "log.jsonl");
  std::string line, last;
  while (std::getline(log, line)) last = line;
  const nlohmann::json end = nlohmann::json::parse(last);
  ASSERT_EQ(end["event"], "end");
  for (const auto& [place, bytes] : end["peak_total"].items()) {
    const int64_t measured = bytes.get<int64_t>();
    const int64_t want = predicted["peak_total"][place].get<int64_t>();
    EXPECT_EQ(want, measured) << place;
  }
  for (const auto& [place, categories] : end["peak"].items()) {
    for (const auto& [category, bytes] : categories.items()) {
      const int64_t measured = bytes.get<int64_t>();
      const int64_t want = predicted["peak"][place][category].get<int64_t>();
      EXPECT_EQ(want, measured) << place << "." << category;
    }
  }
  fs::remove_all(dir);
}

TEST(EstimateCli, TableNamesThePeakPhaseAndTheZeroFormula) {
  const fs::path dir = FreshDir("table");
  const Result r = Hoist("estimate -n 4 --nodes 2 --set zero_optimization.stage=3", dir);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_THAT(r.output, HasSubstr("ZeRO stage 3 on 4 ranks"));
  EXPECT_THAT(r.output, HasSubstr("during"));
  EXPECT_THAT(r.output, HasSubstr("the ZeRO paper's formula gives"));
  EXPECT_THAT(r.output, HasSubstr("per node (2 ranks)"));
  EXPECT_THAT(r.output, ::testing::Not(HasSubstr("for 32-bit Adam states")));
  // 8-bit moments: the paper's figure is said to be for 32-bit ones.
  const Result eight = Hoist("estimate --set optimizer.type='\"AdamW8bit\"'", dir);
  ASSERT_EQ(eight.exit_code, 0) << eight.output;
  EXPECT_THAT(eight.output, HasSubstr("the ZeRO paper's formula gives"));
  EXPECT_THAT(eight.output, HasSubstr(" for 32-bit Adam states"));
  fs::remove_all(dir);
}

TEST(EstimateCli, BadArgumentsAreRefused) {
  const fs::path dir = FreshDir("bad");
  Result r = Hoist("estimate -n 2 --nodes 3", dir);
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_THAT(r.output, HasSubstr("--nodes 3 is more than --ranks 2"));
  r = Hoist("estimate --set zero_optimization.stag=3", dir);
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_THAT(r.output, HasSubstr("zero_optimization.stag"));
  r = Hoist("estimate -c does-not-exist.json", dir);
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_THAT(r.output, HasSubstr("does-not-exist.json"));
  fs::remove_all(dir);
}

}  // namespace
}  // namespace hoist
