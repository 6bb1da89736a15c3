// The sinks a step is reported to: what each shows of a StepReport, and when.
#include "runtime/train/step_sinks.h"

#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <limits>
#include <sstream>
#include <string>
#include <vector>

namespace hoist::runtime {
namespace {

namespace fs = std::filesystem;

StepReport ReportOf(int64_t step, int64_t total) {
  StepReport report;
  report.record.step = step;
  report.record.loss = 2.5f;
  report.record.lr = 1e-3f;
  report.record.grad_norm = 0.75;
  report.record.tokens_per_s = 1000;
  report.record.step_s = 0.02;
  report.total_steps = total;
  return report;
}

std::vector<std::string> Lines(const std::string& text) {
  std::vector<std::string> lines;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

TEST(ProgressSink, PrintsTheFirstEveryNthAndTheLastStep) {
  std::ostringstream out;
  std::unique_ptr<StepSink> sink = ProgressSink(&out, 4);
  for (int64_t step = 1; step <= 10; ++step) ASSERT_TRUE(sink->Take(ReportOf(step, 10)).ok());
  const std::vector<std::string> lines = Lines(out.str());
  ASSERT_EQ(lines.size(), 4u) << out.str();
  for (const auto& [line, step] : {std::pair{0, "     1/10"}, std::pair{1, "     4/10"},
                                   std::pair{2, "     8/10"}, std::pair{3, "    10/10"}}) {
    EXPECT_EQ(lines[static_cast<size_t>(line)].rfind(std::string("step ") + step, 0), 0u)
        << lines[static_cast<size_t>(line)];
  }
  EXPECT_NE(lines[0].find("loss 2.5000"), std::string::npos) << lines[0];
  EXPECT_EQ(lines[0].find("scale"), std::string::npos) << "no loss scaling: " << lines[0];
}

TEST(ProgressSink, ShowsTheValidationLossAndTheLossScale) {
  std::ostringstream out;
  std::unique_ptr<StepSink> sink = ProgressSink(&out, 0);  // no periodic lines
  StepReport report = ReportOf(3, 10);
  report.val_loss = 1.25f;
  report.loss_scaled = true;
  ASSERT_TRUE(sink->Take(report).ok());
  EXPECT_EQ(out.str(), "step      3/10 | val loss 1.2500\n");

  std::ostringstream scaled;
  std::unique_ptr<StepSink> every = ProgressSink(&scaled, 1);
  report.val_loss.reset();
  report.record.loss_scale = 1024;
  report.record.skipped = true;
  ASSERT_TRUE(every->Take(report).ok());
  EXPECT_NE(scaled.str().find("| scale 1024 (skipped)"), std::string::npos) << scaled.str();
}

TEST(JsonlSink, WritesTheStepRecord) {
  const fs::path dir = fs::path(::testing::TempDir()) / "hoist_step_sinks";
  fs::remove_all(dir);
  fs::create_directories(dir);
  const std::string path = (dir / "log.jsonl").string();
  auto log = JsonlLog::Open(path, 0);
  ASSERT_TRUE(log.ok()) << log.status().ToString();
  std::unique_ptr<StepSink> sink = JsonlSink(log->get());
  StepReport report = ReportOf(2, 5);
  report.rank = 0;
  report.val_loss = 1.5f;
  report.record.phase_s[static_cast<int>(Phase::kForward)] = 0.25;
  ASSERT_TRUE(sink->Take(report).ok());
  report = ReportOf(3, 5);
  report.record.grad_norm = std::numeric_limits<double>::infinity();
  report.recompute_timed = true;
  report.record.recompute_s = 0.125;
  ASSERT_TRUE(sink->Take(report).ok());
  log->reset();

  std::ifstream in(path);
  std::vector<nlohmann::json> records;
  for (std::string line; std::getline(in, line);) records.push_back(nlohmann::json::parse(line));
  ASSERT_EQ(records.size(), 2u);
  EXPECT_EQ(records[0]["step"], 2);
  EXPECT_EQ(records[0]["val_loss"], 1.5);
  EXPECT_EQ(records[0]["phase_s"]["forward"], 0.25);
  EXPECT_FALSE(records[0].contains("recompute_s"));
  EXPECT_TRUE(records[0].contains("memory"));
  EXPECT_TRUE(records[0].contains("peak"));
  EXPECT_TRUE(records[1]["grad_norm"].is_null()) << "a non-finite norm is written as null";
  EXPECT_FALSE(records[1].contains("val_loss"));
  EXPECT_EQ(records[1]["recompute_s"], 0.125);
}

}  // namespace
}  // namespace hoist::runtime
