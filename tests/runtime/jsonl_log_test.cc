#include "runtime/observe/jsonl_log.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>

namespace hoist::runtime {
namespace {

namespace fs = std::filesystem;

TEST(JsonlBytesThroughStep, EndsAfterTheLastRecordOfTheStep) {
  const fs::path dir = fs::path(::testing::TempDir()) / "hoist_jsonl_through_step";
  fs::remove_all(dir);
  fs::create_directories(dir);
  const std::string one = "{\"rank\":1,\"step\":1}\n", two = "{\"rank\":1,\"step\":2,\"x\":3}\n";
  std::ofstream(dir / "log_1.jsonl") << one << two << "{\"rank\":1,\"step\":3}\n"
                                     << "{\"event\":\"end\"}\n"
                                     << "{\"rank\":1,\"st";
  const std::string path = (dir / "log_{rank}.jsonl").string();
  EXPECT_EQ(JsonlBytesThroughStep(path, 1, 2).value(), int64_t(one.size() + two.size()));
  EXPECT_EQ(JsonlBytesThroughStep(path, 1, 0).value(), 0);
  // Past the last step record: up to the end record, never into it or the broken tail.
  EXPECT_EQ(JsonlBytesThroughStep(path, 1, 9).value(),
            int64_t(one.size() + two.size() + one.size()));
  // No file for rank 2; no log at all for rank 1 of a rank-0-only path.
  EXPECT_EQ(JsonlBytesThroughStep(path, 2, 2).value(), -1);
  EXPECT_EQ(JsonlBytesThroughStep((dir / "log.jsonl").string(), 1, 2).value(), -1);
}

TEST(JsonlBytesThroughStep, StopsAtALineCutShortByACrash) {
  const fs::path dir = fs::path(::testing::TempDir()) / "hoist_jsonl_cut";
  fs::remove_all(dir);
  fs::create_directories(dir);
  const std::string one = "{\"rank\":0,\"step\":1}\n";
  std::ofstream(dir / "log.jsonl") << one << "{\"rank\":0,\"step\":2}";
  EXPECT_EQ(JsonlBytesThroughStep((dir / "log.jsonl").string(), 0, 5).value(), int64_t(one.size()));
}

}  // namespace
}  // namespace hoist::runtime
