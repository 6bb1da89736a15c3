#include "core/memory_tracker.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "core/check.h"

namespace hoist {

const char* PlaceName(Place place) {
  static const char* kNames[kNumPlaces] = {"device", "host_pinned", "host", "nvme"};
  return kNames[static_cast<int>(place)];
}

const char* CategoryName(Category category) {
  static const char* kNames[kNumCategories] = {"param",      "grad", "optimizer",
                                               "activation", "comm", "workspace"};
  return kNames[static_cast<int>(category)];
}

int64_t MemorySnapshot::CurrentTotal(Place p) const {
  int64_t total = 0;
  for (int64_t bytes : current[int(p)]) total += bytes;
  return total;
}

MemoryTracker& MemoryTracker::Global() {
  static MemoryTracker* tracker = new MemoryTracker();  // never destroyed: used at exit
  return *tracker;
}

void MemoryTracker::Add(Place place, Category category, int64_t bytes) {
  HOIST_CHECK_GE(bytes, 0);
  std::lock_guard<std::mutex> lock(mu_);
  int p = static_cast<int>(place), c = static_cast<int>(category);
  int64_t& now = state_.current[p][c];
  now += bytes;
  const int64_t total = state_.CurrentTotal(place);
  state_.peak[p][c] = std::max(state_.peak[p][c], now);
  state_.peak_total[p] = std::max(state_.peak_total[p], total);
  window_.peak[p][c] = std::max(window_.peak[p][c], now);
  if (total > window_.peak_total[p]) {
    window_.peak_total[p] = total;
    window_.at_peak_total[p] = state_.current[p];
  }
}

void MemoryTracker::Remove(Place place, Category category, int64_t bytes) {
  HOIST_CHECK_GE(bytes, 0);
  std::lock_guard<std::mutex> lock(mu_);
  int64_t& now = state_.current[static_cast<int>(place)][static_cast<int>(category)];
  HOIST_CHECK_LE(bytes, now) << "releasing more " << PlaceName(place) << "/"
                             << CategoryName(category) << " bytes than were allocated";
  now -= bytes;
}

MemorySnapshot MemoryTracker::Snapshot() const {
  std::lock_guard<std::mutex> lock(mu_);
  return state_;
}

void MemoryTracker::ResetPeaks() {
  std::lock_guard<std::mutex> lock(mu_);
  state_.peak = state_.current;
  for (int p = 0; p < kNumPlaces; ++p) state_.peak_total[p] = state_.CurrentTotal(Place(p));
}

MemoryWindow MemoryTracker::TakeWindow() {
  std::lock_guard<std::mutex> lock(mu_);
  MemoryWindow taken = window_;
  taken.current = state_.current;
  window_.peak = state_.current;
  window_.at_peak_total = state_.current;
  for (int p = 0; p < kNumPlaces; ++p) window_.peak_total[p] = state_.CurrentTotal(Place(p));
  return taken;
}

std::string FormatBytes(int64_t bytes) {
  static const char* kUnits[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double value = static_cast<double>(bytes);
  int unit = 0;
  while (std::abs(value) >= 1024.0 && unit < 4) {
    value /= 1024.0;
    ++unit;
  }
  char text[32];
  if (unit == 0)
    std::snprintf(text, sizeof(text), "%lld B", static_cast<long long>(bytes));
  else
    std::snprintf(text, sizeof(text), "%.2f %s", value, kUnits[unit]);
  return text;
}

std::string FormatBytesExactly(int64_t bytes) {
  return FormatBytes(bytes) + " (" + std::to_string(bytes) + " bytes)";
}

}  // namespace hoist
