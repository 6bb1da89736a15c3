// The memory tracker: current and peak bytes for every (place, category) pair, and the peak of
// each place's total over categories (the largest simultaneous sum). Every allocation hoist makes
// goes through a tracked allocator (core/device.h) that reports here; the progress line, the JSONL
// log, the metrics and the end-of-run table read Snapshot(). Beside the peaks, a *window* keeps the
// same maxima since the last TakeWindow(), so a profiler can attribute peaks to the phase they
// happened in (runtime/memory/memory_profile.h) without disturbing the peaks everyone else reads.
// Thread-safe; no call blocks beyond a short mutex hold.
#pragma once

#include <array>
#include <cstdint>
#include <mutex>
#include <string>

namespace hoist {

enum class Place { kDevice = 0, kHostPinned, kHost, kNvme };
enum class Category { kParam = 0, kGrad, kOptimizer, kActivation, kComm, kWorkspace };

inline constexpr int kNumPlaces = 4;
inline constexpr int kNumCategories = 6;

// "device", "host_pinned", "host", "nvme" — the names of the JSONL log and the metrics.
const char* PlaceName(Place place);
// "param", "grad", "optimizer", "activation", "comm", "workspace".
const char* CategoryName(Category category);

struct MemorySnapshot {
  using Table = std::array<std::array<int64_t, kNumCategories>, kNumPlaces>;
  Table current{};                               // [place][category] bytes now
  Table peak{};                                  // [place][category] largest bytes ever held
  std::array<int64_t, kNumPlaces> peak_total{};  // largest simultaneous sum over categories

  int64_t Current(Place p, Category c) const { return current[int(p)][int(c)]; }
  int64_t Peak(Place p, Category c) const { return peak[int(p)][int(c)]; }
  int64_t CurrentTotal(Place p) const;
};

// What the tracker saw between two TakeWindow() calls. `peak` and `peak_total` mean what they mean
// in MemorySnapshot, restricted to the window; a window starts at the values current when it
// opens, so its peaks are never below them.
struct MemoryWindow {
  MemorySnapshot::Table current{};               // [place][category] bytes when it was taken
  MemorySnapshot::Table peak{};                  // [place][category] largest bytes in the window
  std::array<int64_t, kNumPlaces> peak_total{};  // largest simultaneous sum over categories
  // [place][category] bytes at the moment place's total first reached peak_total[place]: the
  // split of that peak, which sums to peak_total[place] (unlike `peak`, a max per category).
  MemorySnapshot::Table at_peak_total{};

  int64_t Peak(Place p, Category c) const { return peak[int(p)][int(c)]; }
  int64_t AtPeakTotal(Place p, Category c) const { return at_peak_total[int(p)][int(c)]; }
};

class MemoryTracker {
 public:
  MemoryTracker() = default;
  MemoryTracker(const MemoryTracker&) = delete;
  MemoryTracker& operator=(const MemoryTracker&) = delete;

  // The process-wide tracker that the allocators report to.
  static MemoryTracker& Global();

  void Add(Place place, Category category, int64_t bytes);
  // Bytes released must have been added before (checked).
  void Remove(Place place, Category category, int64_t bytes);
  MemorySnapshot Snapshot() const;
  // Peaks restart from the current values (for a test or a benchmark phase). The window is not
  // touched.
  void ResetPeaks();
  // Returns the window since the previous TakeWindow (or since construction) and opens a new one
  // at the current values. The peaks of Snapshot() are not touched. The window has one reader:
  // two callers taking windows of the same tracker would split each other's windows.
  MemoryWindow TakeWindow();

 private:
  mutable std::mutex mu_;
  MemorySnapshot state_;  // GUARDED_BY(mu_)
  MemoryWindow window_;   // GUARDED_BY(mu_); its `current` is unused (state_.current is)
};

// Human-readable bytes: "512 B", "1.50 KiB", "3.20 MiB", "1.07 GiB".
std::string FormatBytes(int64_t bytes);
// FormatBytes with the exact count after it, "1.07 GiB (1148903424 bytes)": for a limit or a
// need that a user may copy into a setting, where the rounded figure could fall short.
std::string FormatBytesExactly(int64_t bytes);

}  // namespace hoist
