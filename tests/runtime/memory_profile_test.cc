#include "runtime/memory/memory_profile.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <stdlib.h>

#include <algorithm>
#include <array>
#include <cctype>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "core/file_system.h"

namespace hoist::runtime {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

constexpr Place kDev = Place::kDevice;
constexpr int64_t kParamBytes = 1000, kActivationBytes = 300, kGradBytes = 100;

int64_t RowTotal(const std::array<int64_t, kNumCategories>& row) {
  int64_t total = 0;
  for (int64_t bytes : row) total += bytes;
  return total;
}

// A tracker that held params on the device and optimizer state on the host before profiling, and
// a profiler that watched two training steps of a two-block model. Every phase's numbers are
// worked out by hand in the comments; the device's peak is the workspace spike inside step 1's
// backward of block 1 (2200 bytes), gone by the end of that phase.
class MemoryProfileTest : public ::testing::Test {
 protected:
  void SetUp() override {
    tracker_.Add(kDev, Category::kParam, kParamBytes);
    tracker_.Add(Place::kHost, Category::kOptimizer, 4000);
    tracker_.ResetPeaks();
    profiler_.emplace(tracker_);
  }

  void Spike(Place place, Category category, int64_t bytes) {
    tracker_.Add(place, category, bytes);
    tracker_.Remove(place, category, bytes);
  }

  void RunStep(int64_t step) {
    MemoryProfiler& profiler = *profiler_;
    for (int block = 0; block < 2; ++block) {
      profiler.Enter(step, Phase::kForward, block);  // 1300, then 1600
      tracker_.Add(kDev, Category::kActivation, kActivationBytes);
    }
    profiler.Enter(step, Phase::kLoss);  // 1600, a 1800 spike inside
    Spike(kDev, Category::kWorkspace, 200);
    for (int block = 1; block >= 0; --block) {
      profiler.Enter(step, Phase::kBackward, block);
      tracker_.Add(kDev, Category::kGrad, kGradBytes);
      // Block 1: 1700 + 400 (step 0) or + 500 (step 1); block 0: 1500 at most.
      if (block == 1) Spike(kDev, Category::kWorkspace, step == 0 ? 400 : 500);
      tracker_.Remove(kDev, Category::kActivation, kActivationBytes);
    }
    profiler.Enter(step, Phase::kReduce);
    Spike(Place::kHostPinned, Category::kComm, 64);
    profiler.Enter(step, Phase::kOptimizer);  // back to 1000
    tracker_.Remove(kDev, Category::kGrad, 2 * kGradBytes);
  }

  void RunTwoSteps() {
    RunStep(0);
    RunStep(1);
    profiler_->Finish();
  }

  const MemoryPhase* FindPhase(const std::string& name) const {
    for (const MemoryPhase& phase : profiler_->phases()) {
      if (phase.name == name) return &phase;
    }
    return nullptr;
  }

  MemoryTracker tracker_;
  std::optional<MemoryProfiler> profiler_;
};

// Returns what makes `xml` not well-formed, or "" when it is: one root element, every tag closed
// in order, attribute values quoted, '<' only in markup and '&' only in the five named entities
// or a character reference.
std::string XmlProblem(const std::string& xml) {
  const auto starts = [&](size_t at, const char* text) {
    return xml.compare(at, strlen(text), text) == 0;
  };
  const auto entity_ok = [&](size_t at) {
    for (const char* name : {"&amp;", "&lt;", "&gt;", "&quot;", "&apos;"}) {
      if (starts(at, name)) return true;
    }
    if (!starts(at, "&#")) return false;
    size_t end = xml.find(';', at);
    return end != std::string::npos && end > at + 2;
  };
  std::vector<std::string> open;
  int roots = 0;
  size_t i = 0;
  if (starts(0, "<?xml")) {
    i = xml.find("?>");
    if (i == std::string::npos) return "unterminated XML declaration";
    i += 2;
  }
  while (i < xml.size()) {
    if (starts(i, "<!--")) {
      size_t end = xml.find("-->", i);
      if (end == std::string::npos) return "unterminated comment";
      i = end + 3;
      continue;
    }
    if (xml[i] == '<') {
      const bool closing = i + 1 < xml.size() && xml[i + 1] == '/';
      size_t k = i + 1 + (closing ? 1 : 0);
      const size_t name_start = k;
      while (k < xml.size() && (std::isalnum(static_cast<unsigned char>(xml[k])) || xml[k] == '-' ||
                                xml[k] == '_' || xml[k] == ':' || xml[k] == '.')) {
        ++k;
      }
      const std::string name = xml.substr(name_start, k - name_start);
      if (name.empty()) return "tag without a name at " + std::to_string(i);
      while (k < xml.size() && xml[k] != '>') {
        if (xml[k] == '"' || xml[k] == '\'') {
          const char quote = xml[k];
          for (++k; k < xml.size() && xml[k] != quote; ++k) {
            if (xml[k] == '<') return "'<' in an attribute of <" + name + ">";
            if (xml[k] == '&' && !entity_ok(k)) return "bare '&' in an attribute of <" + name + ">";
          }
          if (k >= xml.size()) return "unterminated attribute in <" + name + ">";
        } else if (xml[k] == '<') {
          return "'<' inside the tag <" + name + ">";
        }
        ++k;
      }
      if (k >= xml.size()) return "unterminated tag <" + name + ">";
      const bool self_closing = xml[k - 1] == '/';
      if (closing) {
        if (open.empty() || open.back() != name) return "</" + name + "> closes nothing open";
        open.pop_back();
      } else {
        if (open.empty() && roots++ > 0) return "a second root element <" + name + ">";
        if (!self_closing) open.push_back(name);
      }
      i = k + 1;
      continue;
    }
    if (xml[i] == '&' && !entity_ok(i)) return "bare '&' in text at " + std::to_string(i);
    if (open.empty() && !std::isspace(static_cast<unsigned char>(xml[i]))) {
      return "text outside the root element at " + std::to_string(i);
    }
    ++i;
  }
  if (!open.empty()) return "<" + open.back() + "> is never closed";
  if (roots == 0) return "no root element";
  return "";
}

TEST(XmlProblem, CatchesWhatMakesXmlIllFormed) {
  EXPECT_EQ(XmlProblem("<svg><g a=\"1\"><text>a &amp; b</text></g><rect/></svg>"), "");
  EXPECT_NE(XmlProblem("<svg><g></svg>"), "");
  EXPECT_NE(XmlProblem("<svg><g></g>"), "");
  EXPECT_NE(XmlProblem("<svg><text>a & b</text></svg>"), "");
  EXPECT_NE(XmlProblem("<svg><text>a < b</text></svg>"), "");
  EXPECT_NE(XmlProblem("<svg a=\"<\"></svg>"), "");
  EXPECT_NE(XmlProblem("<svg></svg><svg></svg>"), "");
}

TEST_F(MemoryProfileTest, NamesStructuredPhasesAndDescribesThem) {
  profiler_->Enter(3, Phase::kBackward, 2);
  profiler_->Enter(3, Phase::kOptimizer);
  profiler_->Enter("eval");
  profiler_->Finish();
  const std::vector<MemoryPhase>& phases = profiler_->phases();
  ASSERT_EQ(phases.size(), 3u);
  EXPECT_EQ(phases[0].name, "step 3 backward block 2");
  EXPECT_EQ(phases[0].Description(), "backward of block 2 in step 3");
  EXPECT_EQ(phases[1].name, "step 3 optimizer");
  EXPECT_EQ(phases[1].Description(), "optimizer in step 3");
  EXPECT_EQ(phases[2].name, "eval");
  EXPECT_EQ(phases[2].Description(), "eval");
  EXPECT_FALSE(phases[2].kind.has_value());
}

TEST_F(MemoryProfileTest, SeesASpikeInsideAPhaseThatIsGoneByItsEnd) {
  RunTwoSteps();
  const MemoryPhase* loss = FindPhase("step 0 loss");
  ASSERT_NE(loss, nullptr);
  EXPECT_EQ(RowTotal(loss->start[int(kDev)]), 1600);
  EXPECT_EQ(RowTotal(loss->end[int(kDev)]), 1600);
  EXPECT_EQ(loss->window.peak_total[int(kDev)], 1800);
  EXPECT_EQ(loss->window.AtPeakTotal(kDev, Category::kWorkspace), 200);
  EXPECT_EQ(loss->end[int(kDev)][int(Category::kWorkspace)], 0);
}

TEST_F(MemoryProfileTest, PhasesFollowEachOtherWithoutGaps) {
  RunTwoSteps();
  const std::vector<MemoryPhase>& phases = profiler_->phases();
  ASSERT_EQ(phases.size(), 14u);
  for (size_t i = 1; i < phases.size(); ++i) {
    EXPECT_EQ(phases[i].start, phases[i - 1].end) << phases[i].name;
    EXPECT_EQ(phases[i].start_us, phases[i - 1].end_us) << phases[i].name;
    EXPECT_LE(phases[i].start_us, phases[i].end_us) << phases[i].name;
  }
  EXPECT_EQ(phases.back().end, tracker_.Snapshot().current);
}

TEST_F(MemoryProfileTest, PeaksEqualTheTrackersPeakTotalsOverTheSamePeriod) {
  RunTwoSteps();
  const MemorySnapshot snapshot = tracker_.Snapshot();
  std::map<Place, int64_t> profiled;
  for (const PeakAttribution& peak : profiler_->Peaks()) profiled[peak.place] = peak.bytes;
  for (int p = 0; p < kNumPlaces; ++p) {
    if (snapshot.peak_total[p] == 0) {
      EXPECT_EQ(profiled.count(Place(p)), 0u) << PlaceName(Place(p));
    } else {
      EXPECT_EQ(profiled[Place(p)], snapshot.peak_total[p]) << PlaceName(Place(p));
    }
  }
  EXPECT_EQ(profiled[kDev], 2200);
  EXPECT_EQ(profiled[Place::kHostPinned], 64);
  EXPECT_EQ(profiled[Place::kHost], 4000);
}

TEST_F(MemoryProfileTest, PeakNamesThePhaseAndTheSplitAtThatMoment) {
  RunTwoSteps();
  const std::vector<PeakAttribution> peaks = profiler_->Peaks();
  ASSERT_EQ(peaks.size(), 3u);
  const PeakAttribution& device = peaks[0];
  EXPECT_EQ(device.place, kDev);
  EXPECT_EQ(device.phase, "step 1 backward block 1");
  EXPECT_EQ(profiler_->phases()[device.phase_index].name, device.phase);
  std::array<int64_t, kNumCategories> split{};
  split[int(Category::kParam)] = 1000;
  split[int(Category::kActivation)] = 600;
  split[int(Category::kGrad)] = 100;
  split[int(Category::kWorkspace)] = 500;
  EXPECT_EQ(device.by_category, split);
  EXPECT_EQ(PeakSentence(device),
            "device peak 2.15 KiB during backward of block 1 in step 1: param 45%, activation 27%, "
            "workspace 23%, grad 5%");

  // On a tie the first phase that reached the peak is named.
  EXPECT_EQ(peaks[1].place, Place::kHostPinned);
  EXPECT_EQ(peaks[1].phase, "step 0 reduce");
  EXPECT_EQ(peaks[2].place, Place::kHost);
  EXPECT_EQ(peaks[2].phase, "step 0 forward block 0");
  EXPECT_EQ(PeakSentence(peaks[2]),
            "host peak 3.91 KiB during forward of block 0 in step 0: optimizer 100%");
}

TEST_F(MemoryProfileTest, MemoryMovedBetweenPhasesIsKeptAsOutsidePhases) {
  profiler_->Enter("a");
  profiler_->Finish();
  Spike(Place::kNvme, Category::kOptimizer, 9000);  // outside any phase
  profiler_->Finish();
  profiler_->Finish();  // a quiet gap leaves nothing
  profiler_->Enter("b");
  profiler_->Finish();
  const std::vector<MemoryPhase>& phases = profiler_->phases();
  ASSERT_EQ(phases.size(), 3u);
  EXPECT_EQ(phases[1].name, "outside phases");
  EXPECT_EQ(phases[1].window.peak_total[int(Place::kNvme)], 9000);
  const std::vector<PeakAttribution> peaks = profiler_->Peaks();
  ASSERT_FALSE(peaks.empty());
  EXPECT_EQ(peaks.back().place, Place::kNvme);
  EXPECT_EQ(peaks.back().phase, "outside phases");
  EXPECT_EQ(PeakSentence(peaks.back()),
            "nvme peak 8.79 KiB during time outside any phase: optimizer 100%");
  EXPECT_EQ(peaks.back().bytes, tracker_.Snapshot().peak_total[int(Place::kNvme)]);
}

TEST_F(MemoryProfileTest, ChromeTraceIsWellFormedTraceEventJson) {
  RunTwoSteps();
  const nlohmann::json trace = nlohmann::json::parse(profiler_->ChromeTraceJson());
  ASSERT_TRUE(trace.is_object());
  ASSERT_TRUE(trace.contains("traceEvents"));
  ASSERT_TRUE(trace["traceEvents"].is_array());
  EXPECT_EQ(trace["displayTimeUnit"], "ms");
  EXPECT_EQ(trace["otherData"]["peaks"].size(), 3u);

  double last_ts = -1;
  int spans = 0;
  std::map<std::string, int64_t> largest_counter_total;
  for (const nlohmann::json& event : trace["traceEvents"]) {
    ASSERT_TRUE(event["ts"].is_number()) << event.dump();
    ASSERT_TRUE(event["pid"].is_number_integer()) << event.dump();
    ASSERT_TRUE(event["tid"].is_number_integer()) << event.dump();
    const double ts = event["ts"].get<double>();
    EXPECT_GE(ts, last_ts) << event.dump();
    last_ts = ts;
    const std::string name = event["name"];
    const std::string ph = event["ph"];
    if (name.ends_with(" memory")) {
      EXPECT_EQ(ph, "C") << event.dump();
      ASSERT_EQ(event["args"].size(), size_t{kNumCategories}) << event.dump();
      int64_t total = 0;
      for (const auto& [category, bytes] : event["args"].items()) {
        EXPECT_TRUE(bytes.is_number_integer()) << category;
        total += bytes.get<int64_t>();
      }
      largest_counter_total[name] = std::max(largest_counter_total[name], total);
    } else if (ph == "X") {
      EXPECT_TRUE(event["dur"].is_number()) << event.dump();
      ++spans;
    } else {
      EXPECT_EQ(ph, "M") << event.dump();
    }
  }
  EXPECT_EQ(spans, static_cast<int>(profiler_->phases().size()));
  // The counters show the transient peaks, not only the phase boundaries.
  const MemorySnapshot snapshot = tracker_.Snapshot();
  EXPECT_EQ(largest_counter_total["device memory"], snapshot.peak_total[int(kDev)]);
  EXPECT_EQ(largest_counter_total["host_pinned memory"],
            snapshot.peak_total[int(Place::kHostPinned)]);
  EXPECT_EQ(largest_counter_total["host memory"], snapshot.peak_total[int(Place::kHost)]);
  EXPECT_EQ(largest_counter_total.count("nvme memory"), 0u);  // never used
}

TEST_F(MemoryProfileTest, SvgIsWellFormedAndShowsEveryUsedPlaceAndItsPeak) {
  RunTwoSteps();
  const std::string svg = profiler_->Svg();
  EXPECT_EQ(XmlProblem(svg), "");
  EXPECT_TRUE(svg.starts_with("<?xml")) << svg.substr(0, 80);
  EXPECT_TRUE(svg.ends_with("</svg>\n"));
  EXPECT_THAT(svg, HasSubstr("<svg xmlns=\"http://www.w3.org/2000/svg\""));
  for (const PeakAttribution& peak : profiler_->Peaks()) {
    EXPECT_THAT(svg, HasSubstr(PeakSentence(peak)));
    EXPECT_THAT(svg, HasSubstr(std::string("id=\"place-") + PlaceName(peak.place) + "\""));
  }
  EXPECT_THAT(svg, Not(HasSubstr("id=\"place-nvme\"")));
  for (int c = 0; c < kNumCategories; ++c) EXPECT_THAT(svg, HasSubstr(CategoryName(Category(c))));
  // Axis labels in human units, at round binary steps (the device peaks at 2200 bytes).
  for (const char* label : {">0 B<", ">512 B<", ">1 KiB<", ">1.5 KiB<", ">2 KiB<", ">2.5 KiB<"}) {
    EXPECT_THAT(svg, HasSubstr(label));
  }
  // Self-contained: nothing to fetch, nothing to run.
  EXPECT_THAT(svg, Not(HasSubstr("href")));
  EXPECT_THAT(svg, Not(HasSubstr("<script")));
}

TEST_F(MemoryProfileTest, NamesWithMarkupOrBadUtf8KeepBothFilesWellFormed) {
  profiler_->Enter("save <ckpt> & \"log\" \x01 \xff\xfe");
  Spike(kDev, Category::kWorkspace, 4096);
  profiler_->Finish();
  const std::string svg = profiler_->Svg();
  EXPECT_EQ(XmlProblem(svg), "");
  EXPECT_THAT(svg, HasSubstr("save &lt;ckpt&gt; &amp; &quot;log&quot;"));
  EXPECT_EQ(svg.find('\xff'), std::string::npos);
  EXPECT_EQ(svg.find('\x01'), std::string::npos);
  const nlohmann::json trace = nlohmann::json::parse(profiler_->ChromeTraceJson());
  EXPECT_TRUE(trace["traceEvents"].is_array());
}

TEST_F(MemoryProfileTest, NoPhasesStillWritesValidFiles) {
  EXPECT_TRUE(profiler_->Peaks().empty());
  EXPECT_EQ(XmlProblem(profiler_->Svg()), "");
  EXPECT_THAT(profiler_->Svg(), HasSubstr("no phases recorded"));
  const nlohmann::json trace = nlohmann::json::parse(profiler_->ChromeTraceJson());
  EXPECT_EQ(trace["traceEvents"].size(), 2u);  // the names of the process and the phase track
}

class MemoryProfileFileTest : public MemoryProfileTest {
 protected:
  void SetUp() override {
    MemoryProfileTest::SetUp();
    std::string pattern = ::testing::TempDir() + "hoist_memprof_XXXXXX";
    ASSERT_NE(::mkdtemp(pattern.data()), nullptr) << std::strerror(errno);
    dir_ = pattern;
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  static std::string ReadAll(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    std::ostringstream text;
    text << in.rdbuf();
    return text.str();
  }
  std::vector<std::string> Listing() const {
    std::vector<std::string> names;
    for (const auto& entry : std::filesystem::directory_iterator(dir_)) {
      names.push_back(entry.path().filename().string());
    }
    std::sort(names.begin(), names.end());
    return names;
  }

  std::string dir_;
};

TEST_F(MemoryProfileFileTest, WritesBothFilesAndLeavesNoTemporaries) {
  RunTwoSteps();
  ASSERT_TRUE(profiler_->WriteChromeTrace(dir_ + "/memory.json").ok());
  ASSERT_TRUE(profiler_->WriteSvg(dir_ + "/memory.svg").ok());
  EXPECT_EQ(ReadAll(dir_ + "/memory.json"), profiler_->ChromeTraceJson());
  EXPECT_EQ(ReadAll(dir_ + "/memory.svg"), profiler_->Svg());
  EXPECT_EQ(Listing(), (std::vector<std::string>{"memory.json", "memory.svg"}));
}

TEST_F(MemoryProfileFileTest, UnwritablePathIsAnErrorNamingThePathAndTheReason) {
  RunTwoSteps();
  const std::string trace_path = dir_ + "/missing/memory.json";
  const Status trace = profiler_->WriteChromeTrace(trace_path);
  EXPECT_FALSE(trace.ok());
  EXPECT_THAT(trace.message(), HasSubstr("'" + trace_path + "'"));
  EXPECT_THAT(trace.message(), HasSubstr(std::strerror(ENOENT)));

  const std::string svg_path = dir_ + "/missing/memory.svg";
  const Status svg = profiler_->WriteSvg(svg_path);
  EXPECT_FALSE(svg.ok());
  EXPECT_THAT(svg.message(), HasSubstr("'" + svg_path + "'"));
}

TEST_F(MemoryProfileFileTest, FullDiskKeepsThePreviousFile) {
  RunTwoSteps();
  const std::string path = dir_ + "/memory.svg";
  ASSERT_TRUE(profiler_->WriteSvg(path).ok());
  const std::string before = ReadAll(path);
  profiler_->Enter("later");
  profiler_->Finish();
  FaultInjectingFileSystem faulty;
  faulty.Inject(FileFault(FileOp::kAppend, ENOSPC));
  const Status status = profiler_->WriteSvg(path, faulty);
  EXPECT_EQ(status.code(), StatusCode::kResourceExhausted);
  EXPECT_THAT(status.message(), HasSubstr(path));
  EXPECT_EQ(ReadAll(path), before);
  EXPECT_EQ(Listing(), std::vector<std::string>{"memory.svg"});
}

}  // namespace
}  // namespace hoist::runtime
