// monitor.memory_profile through the trainer: the Chrome trace and the SVG of the first steps,
// each peak attributed to its phase, equal to the tracker's peaks in the JSONL log's end record.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "tests/runtime/config_test_util.h"
#include "tests/runtime/trainer_test_util.h"

namespace hoist::runtime {
namespace {

namespace fs = std::filesystem;
using testing_util::RankRun;
using testing_util::TinyJob;
using testing_util::TrainOnRanks;

std::string ReadAll(const fs::path& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

nlohmann::json EndRecord(const fs::path& path) {
  std::ifstream in(path);
  std::string line;
  nlohmann::json end;
  while (std::getline(in, line)) {
    nlohmann::json record = nlohmann::json::parse(line);
    if (record.contains("event")) end = std::move(record);
  }
  return end;
}

TEST(TrainerMemoryProfile, TraceAndSvgOfTheFirstStepsWithPeaksEqualToTheTrackers) {
  const fs::path dir =
      fs::path(::testing::TempDir()) / ("hoist_profile_" + std::to_string(getpid()));
  fs::create_directories(dir);
  for (const char* policy : {"none", "full"}) {
    SCOPED_TRACE(policy);
    const fs::path trace = dir / (std::string("rank{rank}_") + policy + ".json");
    const fs::path log = dir / (std::string(policy) + "_{rank}.jsonl");
    const Config config =
        TinyJob(2, 5,
                {"zero_optimization.stage=3", "bf16.enabled=true",
                 std::string("activation_checkpointing.policy=") + policy,
                 "monitor.memory_profile.path=\"" + trace.string() + "\"",
                 "monitor.memory_profile.steps=2", "monitor.jsonl.path=\"" + log.string() + "\""});
    const std::vector<RankRun> runs = TrainOnRanks(config, 2);
    for (int r = 0; r < 2; ++r) {
      ASSERT_TRUE(runs[r].status.ok()) << runs[r].status.ToString();
      const std::string tag = std::to_string(r);
      const fs::path rank_trace = dir / ("rank" + tag + "_" + policy + ".json");
      const fs::path rank_svg = dir / ("rank" + tag + "_" + policy + ".svg");
      ASSERT_TRUE(fs::exists(rank_trace));
      ASSERT_TRUE(fs::exists(rank_svg));
      const nlohmann::json json = nlohmann::json::parse(ReadAll(rank_trace));
      double last = -1;
      int counters = 0;
      std::vector<std::string> spans;
      for (const nlohmann::json& event : json["traceEvents"]) {
        if (event["ph"] == "M") continue;
        ASSERT_TRUE(event["ts"].is_number()) << event.dump();
        if (event["ph"] == "C") {
          const double ts = event["ts"].get<double>();
          EXPECT_GE(ts, last);
          last = ts;
          ++counters;
        }
        if (event["ph"] == "X") spans.push_back(event["name"].get<std::string>());
      }
      EXPECT_GT(counters, 0);
      // Set-up, then two steps of 2 micro-batches: each block's forward and backward, the loss,
      // the reduction and the optimizer; nothing of step 3.
      auto has = [&](const std::string& name) {
        return std::find(spans.begin(), spans.end(), name) != spans.end();
      };
      EXPECT_TRUE(has("set-up"));
      EXPECT_TRUE(has("step 1 forward block 1"));
      EXPECT_TRUE(has("step 2 backward block 0"));
      EXPECT_TRUE(has("step 2 optimizer"));
      EXPECT_FALSE(has("step 3 forward block 0"));
      const std::string svg = ReadAll(rank_svg);
      EXPECT_EQ(svg.rfind("<svg", 0) == 0 || svg.rfind("<?xml", 0) == 0, true);
      EXPECT_NE(svg.find("peak"), std::string::npos);
      // The profile's peak is the tracker's (all of its peaks happen in the profiled steps).
      const nlohmann::json end = EndRecord(dir / (std::string(policy) + "_" + tag + ".jsonl"));
      ASSERT_TRUE(end.contains("peak_phase")) << end.dump();
      EXPECT_EQ(end["peak_phase"]["device"]["bytes"], end["peak_total"]["device"]);
      EXPECT_EQ(end["peak_total"]["device"].get<int64_t>(),
                runs[r].memory.peak_total[int(Place::kDevice)]);
    }
  }
  fs::remove_all(dir);
}

TEST(TrainerMemoryProfile, AProfileDirectoryThatIsMissingStopsEveryRankAtTheStart) {
  // Rank 0 alone writes a path without {rank}; the others must not wait for it in a collective.
  const Config config =
      TinyJob(2, 5, {"monitor.memory_profile.path=\"/nonexistent-hoist-dir/profile.json\""});
  const std::vector<RankRun> runs = TrainOnRanks(config, 2);
  for (const RankRun& run : runs) {
    EXPECT_FALSE(run.status.ok());
    EXPECT_TRUE(run.losses.empty());
  }
  EXPECT_EQ(runs[0].status.code(), StatusCode::kInvalidArgument) << runs[0].status.ToString();
  EXPECT_NE(runs[0].status.message().find("monitor.memory_profile.path"), std::string::npos);
  EXPECT_NE(runs[1].status.message().find("rank 0"), std::string::npos)
      << runs[1].status.ToString();
}

}  // namespace
}  // namespace hoist::runtime
