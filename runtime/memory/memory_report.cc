#include "runtime/memory/memory_report.h"

#include <sys/resource.h>

#include <cstdio>

namespace hoist::runtime {

nlohmann::json MemoryTableJson(const MemorySnapshot::Table& table) {
  nlohmann::json out = nlohmann::json::object();
  for (int p = 0; p < kNumPlaces; ++p) {
    nlohmann::json place = nlohmann::json::object();
    for (int c = 0; c < kNumCategories; ++c) place[CategoryName(Category(c))] = table[p][c];
    out[PlaceName(Place(p))] = std::move(place);
  }
  return out;
}

nlohmann::json PeakTotalJson(const MemorySnapshot& snapshot) {
  nlohmann::json out = nlohmann::json::object();
  for (int p = 0; p < kNumPlaces; ++p) out[PlaceName(Place(p))] = snapshot.peak_total[p];
  return out;
}

std::string FormatMemoryTable(const MemorySnapshot& snapshot) {
  std::string text;
  char line[160];
  std::snprintf(line, sizeof(line), "%-12s %-11s %14s %14s\n", "place", "category", "current",
                "peak");
  text += line;
  for (int p = 0; p < kNumPlaces; ++p) {
    if (snapshot.peak_total[p] == 0) continue;
    int64_t current_total = 0;
    for (int c = 0; c < kNumCategories; ++c) {
      const int64_t current = snapshot.current[p][c], peak = snapshot.peak[p][c];
      current_total += current;
      if (peak == 0) continue;
      std::snprintf(line, sizeof(line), "%-12s %-11s %14s %14s\n", PlaceName(Place(p)),
                    CategoryName(Category(c)), FormatBytes(current).c_str(),
                    FormatBytes(peak).c_str());
      text += line;
    }
    std::snprintf(line, sizeof(line), "%-12s %-11s %14s %14s\n", PlaceName(Place(p)), "total",
                  FormatBytes(current_total).c_str(), FormatBytes(snapshot.peak_total[p]).c_str());
    text += line;
  }
  std::snprintf(line, sizeof(line), "%-24s %29s\n", "process peak resident",
                FormatBytes(ProcessPeakResidentBytes()).c_str());
  text += line;
  return text;
}

int64_t ProcessPeakResidentBytes() {
  struct rusage usage {};
  if (getrusage(RUSAGE_SELF, &usage) != 0) return 0;
  return static_cast<int64_t>(usage.ru_maxrss) * 1024;  // Linux reports KiB
}

}  // namespace hoist::runtime
