// Resuming a job: each rank's JSONL log continues from its own position at the checkpoint, a
// damaged or edited manifest is refused, and a missing `latest` pointer neither starts afresh
// nor loses the checkpoints that are there.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "runtime/checkpoint.h"
#include "runtime/trainer.h"
#include "tests/runtime/config_test_util.h"
#include "tests/runtime/trainer_test_util.h"

namespace hoist::runtime {
namespace {

namespace fs = std::filesystem;
using testing_util::RankRun;
using testing_util::TrainOnRanks;

fs::path TempDir(const std::string& name) {
  fs::path dir = fs::path(::testing::TempDir()) / ("hoist_resume_" + name);
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir;
}

std::string ReadFile(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

// Every line of the file parsed; a line that is not JSON fails the test.
std::vector<nlohmann::json> ReadJsonl(const fs::path& path) {
  std::ifstream in(path);
  std::vector<nlohmann::json> lines;
  for (std::string line; std::getline(in, line);) {
    nlohmann::json record = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
    EXPECT_FALSE(record.is_discarded()) << path << " line " << lines.size() + 1 << ": " << line;
    lines.push_back(std::move(record));
  }
  return lines;
}

void ExpectOk(const std::vector<RankRun>& runs) {
  for (size_t r = 0; r < runs.size(); ++r) {
    ASSERT_TRUE(runs[r].status.ok()) << "rank " << r << ": " << runs[r].status.ToString();
  }
}

// The first `n` lines of `text`, newlines included.
std::string FirstLines(const std::string& text, int n) {
  size_t end = 0;
  for (int i = 0; i < n; ++i) end = text.find('\n', end) + 1;
  return text.substr(0, end);
}

// With `{rank}` in the log path each rank's lines differ (timings), so the logs' lengths differ
// at the checkpoint: a resume must cut each at its own record of the step, not at rank 0's.
TEST(TrainerResume, EachRanksLogIsCutAtItsOwnRecordOfTheResumedStep) {
  const fs::path dir = TempDir("per_rank_log");
  const std::vector<std::string> job = {
      "checkpoint.dir=\"" + (dir / "ck").string() + "\"", "checkpoint.interval_steps=5",
      "monitor.jsonl.path=\"" + (dir / "log_{rank}.jsonl").string() + "\""};
  ExpectOk(TrainOnRanks(testing_util::TinyJob(2, 8, job), 2));
  std::string before[2];
  for (int r = 0; r < 2; ++r) {
    before[r] = FirstLines(ReadFile(dir / ("log_" + std::to_string(r) + ".jsonl")), 5);
    // What each rank's shard says its log held at step 5.
    auto reader = CheckpointReader::Open((dir / "ck" / "step_00000005").string(), r);
    ASSERT_TRUE(reader.ok()) << reader.status().ToString();
    int64_t bytes = -1;
    ASSERT_TRUE(reader->Read("jsonl_bytes", &bytes, sizeof(bytes)).ok()) << "rank " << r;
    EXPECT_EQ(bytes, static_cast<int64_t>(before[r].size())) << "rank " << r;
  }

  TrainerOptions resume;
  resume.resume_from = (dir / "ck" / "step_00000005").string();
  ExpectOk(TrainOnRanks(testing_util::TinyJob(2, 8, job), 2, resume));
  for (int r = 0; r < 2; ++r) {
    const fs::path log = dir / ("log_" + std::to_string(r) + ".jsonl");
    EXPECT_EQ(FirstLines(ReadFile(log), 5), before[r]) << "rank " << r;
    const std::vector<nlohmann::json> lines = ReadJsonl(log);
    ASSERT_EQ(lines.size(), 9u) << "rank " << r << ": steps 1..8 and the end record";
    for (int i = 0; i < 8; ++i) {
      EXPECT_EQ(lines[i]["step"], i + 1) << "rank " << r;
      EXPECT_EQ(lines[i]["rank"], r);
    }
    EXPECT_EQ(lines[8]["event"], "end") << "rank " << r;
  }
}

}  // namespace
}  // namespace hoist::runtime
