// Resuming a job: each rank's JSONL log continues from its own position at the checkpoint, a
// damaged or edited manifest is refused, and a missing `latest` pointer neither starts afresh
// nor loses the checkpoints that are there.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "runtime/checkpoint/checkpoint.h"
#include "runtime/checkpoint/checkpoint_config.h"
#include "runtime/train/trainer.h"
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

// Rewrites the manifest of `step_dir` after `edit`, with a matching checksum when `reseal` (as
// someone editing it on purpose would), without when not (as damage would).
void EditManifest(const fs::path& step_dir, const std::function<void(nlohmann::json&)>& edit,
                  bool reseal) {
  const fs::path path = step_dir / "manifest.json";
  nlohmann::json manifest = nlohmann::json::parse(ReadFile(path));
  edit(manifest);
  if (reseal) manifest["manifest_xxh64"] = CheckpointManifestChecksum(manifest).value();
  std::ofstream(path, std::ios::trunc) << manifest.dump(2);
}

// The config is stored once beside the steps, named by its checksum from each manifest: a large
// config (here 200 KB of a monitor's settings) no longer grows every manifest by its size. A
// manifest of an older build, with the config inline and no reference, still resumes.
TEST(TrainerResume, TheConfigIsStoredOnceBesideTheStepsNotCopiedIntoEachManifest) {
  const fs::path dir = TempDir("config_once");
  nlohmann::json pad = nlohmann::json::array();
  for (int i = 0; i < 20000; ++i) pad.push_back("tag" + std::to_string(i));
  const std::vector<std::string> job = {"checkpoint.dir=\"" + (dir / "ck").string() + "\"",
                                        "checkpoint.interval_steps=4",
                                        "comms_logger.prof_ops=" + pad.dump()};
  const Config config = testing_util::TinyJob(1, 8, job);
  const std::string text = config.raw->dump();
  ASSERT_GT(text.size(), 200000u);
  ExpectOk(TrainOnRanks(config, 1));

  nlohmann::json reference;
  for (const char* step : {"step_00000004", "step_00000008"}) {
    const fs::path manifest_path = dir / "ck" / step / "manifest.json";
    EXPECT_LT(fs::file_size(manifest_path), 20000u) << step;
    const nlohmann::json manifest = nlohmann::json::parse(ReadFile(manifest_path));
    EXPECT_FALSE(manifest["metadata"].contains("config")) << step;
    ASSERT_TRUE(manifest["metadata"].contains(kConfigFileField)) << step;
    if (reference.is_null()) reference = manifest["metadata"][kConfigFileField];
    EXPECT_EQ(manifest["metadata"][kConfigFileField], reference) << step;
  }
  StatusOr<std::string> stored = ReadRunConfig((dir / "ck").string(), reference);
  ASSERT_TRUE(stored.ok()) << stored.status().ToString();
  EXPECT_EQ(*stored, text);
  int config_files = 0;
  for (const fs::directory_entry& entry : fs::directory_iterator(dir / "ck")) {
    config_files += entry.path().filename().string().rfind("config_", 0) == 0;
  }
  EXPECT_EQ(config_files, 1);

  // A stored config damaged in place is named when read back.
  const fs::path stored_path = dir / "ck" / reference["name"].get<std::string>();
  std::string damaged = ReadFile(stored_path);
  damaged[10] ^= 0x01;
  std::ofstream(stored_path, std::ios::binary | std::ios::trunc) << damaged;
  StatusOr<std::string> reread = ReadRunConfig((dir / "ck").string(), reference);
  ASSERT_FALSE(reread.ok());
  EXPECT_EQ(reread.status().code(), StatusCode::kDataLoss);
  EXPECT_NE(reread.status().message().find(stored_path.string()), std::string::npos)
      << reread.status().ToString();

  // As an older build wrote it: the config inline, no reference.
  EditManifest(
      dir / "ck" / "step_00000004",
      [&](nlohmann::json& manifest) {
        manifest["metadata"].erase(kConfigFileField);
        manifest["metadata"]["config"] = *config.raw;
      },
      /*reseal=*/true);
  fs::remove(dir / "ck" / reference["name"].get<std::string>());
  TrainerOptions resume;
  resume.resume_from = (dir / "ck" / "step_00000004").string();
  ExpectOk(TrainOnRanks(testing_util::TinyJob(1, 8, job), 1, resume));
}

TEST(TrainerResume, AManifestValueOutOfRangeIsRefusedNamingTheDirectoryAndTheField) {
  const fs::path dir = TempDir("bad_values");
  const std::vector<std::string> job = {"checkpoint.dir=\"" + dir.string() + "\"",
                                        "checkpoint.interval_steps=2"};
  ExpectOk(TrainOnRanks(testing_util::TinyJob(1, 6, job), 1));
  const fs::path step = dir / "step_00000002";
  const std::string original = ReadFile(step / "manifest.json");
  const struct {
    const char* field;
    nlohmann::json value;
  } cases[] = {{"/metadata/control/lr_override", -5},
               {"/metadata/control/lr_override", 1e-300},  // 0 as a float
               {"/metadata/control/lr_override", "0.1"},
               {"/metadata/control/gradient_clipping", 1e39},  // inf as a float
               {"/metadata/control/gradient_clipping", -1},
               {"/metadata/optimizer_step_count", 3},  // more than the 2 steps taken
               {"/metadata/tokens", -1},
               {"/metadata/train_s", -0.5},
               {"/metadata/zero_stage", 4}};
  for (const auto& c : cases) {
    std::ofstream(step / "manifest.json", std::ios::trunc) << original;
    const nlohmann::json::json_pointer field(c.field);
    EditManifest(
        step, [&](nlohmann::json& m) { m[field] = c.value; }, /*reseal=*/true);
    TrainerOptions resume;
    resume.resume_from = step.string();
    const std::vector<RankRun> runs = TrainOnRanks(testing_util::TinyJob(1, 6, job), 1, resume);
    const Status& s = runs[0].status;
    ASSERT_FALSE(s.ok()) << c.field << " = " << c.value.dump();
    EXPECT_EQ(s.code(), StatusCode::kDataLoss) << s.ToString();
    // "/metadata/control/lr_override" is named "metadata.control.lr_override".
    std::string dotted = std::string(c.field).substr(1);
    std::replace(dotted.begin(), dotted.end(), '/', '.');
    EXPECT_NE(s.message().find("checkpoint " + step.string() + ": manifest field " + dotted),
              std::string::npos)
        << s.ToString();
  }
  // The same edit without a matching checksum is caught before any value is read.
  std::ofstream(step / "manifest.json", std::ios::trunc) << original;
  EditManifest(
      step, [](nlohmann::json& m) { m["metadata"]["control"]["lr_override"] = 0.5; },
      /*reseal=*/false);
  TrainerOptions resume;
  resume.resume_from = step.string();
  const Status s = TrainOnRanks(testing_util::TinyJob(1, 6, job), 1, resume)[0].status;
  EXPECT_NE(s.message().find("does not match its checksum"), std::string::npos) << s.ToString();
}

TEST(TrainerResume, WithoutLatestResumeTakesTheNewestCompleteStep) {
  const fs::path dir = TempDir("no_latest");
  const std::vector<std::string> job = {
      "checkpoint.dir=\"" + (dir / "ck").string() + "\"", "checkpoint.interval_steps=3",
      "checkpoint.keep_last=2", "monitor.jsonl.path=\"" + (dir / "log.jsonl").string() + "\""};
  const std::vector<RankRun> full = TrainOnRanks(testing_util::TinyJob(1, 9, job), 1);
  ExpectOk(full);
  // `latest` lost, and the newest step's shard cut short: step 6 is the one to take.
  fs::remove(dir / "ck" / "latest");
  const fs::path shard = dir / "ck" / "step_00000009" / "rank_00000.bin";
  fs::resize_file(shard, fs::file_size(shard) / 2);
  TrainerOptions resume;
  resume.resume = true;
  const std::vector<RankRun> resumed = TrainOnRanks(testing_util::TinyJob(1, 9, job), 1, resume);
  ExpectOk(resumed);
  ASSERT_EQ(resumed[0].losses.size(), 3u) << "steps 7..9";
  for (size_t i = 0; i < 3; ++i) EXPECT_EQ(resumed[0].losses[i], full[0].losses[6 + i]);
  EXPECT_EQ(ReadJsonl(dir / "log.jsonl").size(), 10u) << "steps 1..9 and the end record";
}

TEST(TrainerResume, WithoutLatestAndNoCompleteStepResumeRefusesAndKeepsEverything) {
  const fs::path dir = TempDir("no_complete");
  const std::vector<std::string> job = {
      "checkpoint.dir=\"" + (dir / "ck").string() + "\"", "checkpoint.interval_steps=3",
      "monitor.jsonl.path=\"" + (dir / "log.jsonl").string() + "\""};
  ExpectOk(TrainOnRanks(testing_util::TinyJob(1, 6, job), 1));
  fs::remove(dir / "ck" / "latest");
  for (const char* step : {"step_00000003", "step_00000006"}) {
    fs::remove(dir / "ck" / step / "manifest.json");
  }
  const std::string log = ReadFile(dir / "log.jsonl");
  TrainerOptions resume;
  resume.resume = true;
  const Status s = TrainOnRanks(testing_util::TinyJob(1, 6, job), 1, resume)[0].status;
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.code(), StatusCode::kDataLoss) << s.ToString();
  EXPECT_NE(s.message().find("none of its 2 step directories is complete"), std::string::npos)
      << s.ToString();
  EXPECT_EQ(ReadFile(dir / "log.jsonl"), log);
  EXPECT_TRUE(fs::exists(dir / "ck" / "step_00000003" / "rank_00000.bin"));
}

}  // namespace
}  // namespace hoist::runtime
