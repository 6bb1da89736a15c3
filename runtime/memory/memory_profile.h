// The memory profiler: records the memory tracker's bytes at every phase boundary of a training
// step (forward and backward of each block, loss, reduce, optimizer, offload) and the largest
// moment inside each phase, including spikes that are gone by the phase's end (the tracker's
// window, core/memory_tracker.h). It names the phase and the category split of each place's peak
// ("device peak 1.84 GiB during backward of block 3 in step 3: activation 61%, param 20%, ...")
// and writes what it recorded as a Chrome trace (Trace Event Format JSON: one counter track per
// place, one span per phase; opens in Perfetto and chrome://tracing) and as a self-contained SVG.
//
// Over the profiler's life its per-place peaks equal what the tracker's own peak_total would show
// had its peaks been reset at the profiler's construction: memory changes made while no phase is
// in progress are kept as a phase named "outside phases".
//
// Not thread-safe: one thread drives Enter/Finish and reads the results; any thread may update the
// tracker meanwhile. It takes the tracker's window, of which there is one reader, so a tracker has
// at most one profiler at a time. Each phase costs about 1.2 KiB until the profiler is destroyed;
// profile a bounded number of steps.
#pragma once

#include <array>
#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "core/file_system.h"
#include "core/memory_tracker.h"
#include "core/phase.h"
#include "core/status.h"

namespace hoist::runtime {

// One closed phase. Times are microseconds of the steady clock since the profiler was built.
struct MemoryPhase {
  std::string name;           // as given, or built from step, kind and block
  int64_t step = -1;          // -1 where the phase was named by a free-form string
  std::optional<Phase> kind;  // empty where the phase was named by a free-form string
  int block = -1;             // -1 where the phase belongs to no block
  int64_t start_us = 0, end_us = 0;
  MemorySnapshot::Table start{};  // [place][category] bytes when the phase began
  MemorySnapshot::Table end{};    // [place][category] bytes when the phase ended
  MemoryWindow window;            // the tracker's window over the phase (peaks and their split)

  // "backward of block 3 in step 3", "optimizer in step 3", "time outside any phase", or the
  // free-form name.
  std::string Description() const;
};

// Where a place's largest simultaneous total happened.
struct PeakAttribution {
  Place place = Place::kDevice;
  int64_t bytes = 0;        // the place's largest total over the profile
  std::string phase;        // the name of the phase it happened in (the first, on a tie)
  std::string description;  // that phase's Description()
  int phase_index = -1;     // into MemoryProfiler::phases()
  std::array<int64_t, kNumCategories> by_category{};  // the split at that moment; sums to bytes
};

// "device peak 1.84 GiB during backward of block 3 in step 3: activation 61%, param 20%, ..."
// (categories holding bytes, largest share first).
std::string PeakSentence(const PeakAttribution& peak);

class MemoryProfiler {
 public:
  // Starts the clock and the tracker's window. The tracker must outlive the profiler.
  explicit MemoryProfiler(MemoryTracker& tracker);
  MemoryProfiler(const MemoryProfiler&) = delete;
  MemoryProfiler& operator=(const MemoryProfiler&) = delete;

  // Closes the phase in progress (if any) and starts one named `phase`, e.g.
  // "step 3 backward block 2".
  void Enter(std::string phase);
  // The same, named from its parts: Enter(3, Phase::kBackward, 2) is "step 3 backward block 2"
  // and its peak reads "during backward of block 2 in step 3". `block` -1 means none.
  void Enter(int64_t step, Phase kind, int block = -1);
  // Closes the phase in progress, if any (and keeps memory that moved since the last phase ended
  // as an "outside phases" phase). A later Enter starts a new phase. Call it before reading the
  // results: the phase in progress is not among them.
  void Finish();

  // Closed phases, oldest first (the phase in progress is not among them).
  const std::vector<MemoryPhase>& phases() const { return phases_; }
  // One per place that held bytes during a closed phase, in Place order.
  std::vector<PeakAttribution> Peaks() const;

  // The closed phases as Trace Event Format JSON: per place used, counter events "<place> memory"
  // with bytes by category at the start of the first phase, at each phase's peak (drawn at the
  // phase's midpoint: only the phase, not the instant, of a peak is known) and at each phase's
  // end; one "X" event per phase on the "phases" thread. Timestamps never decrease.
  std::string ChromeTraceJson() const;
  // The closed phases as an SVG document: one panel per place (device always, the others where
  // used) with bytes by category stacked over the phases, the peak marked and described.
  std::string Svg() const;

  // Write ChromeTraceJson() / Svg() to `path` atomically (a temporary beside it, then a rename);
  // an I/O failure is a Status naming `path` and the system's reason. Block on the file system.
  Status WriteChromeTrace(const std::string& path, FileSystem& fs = FileSystem::Posix()) const;
  Status WriteSvg(const std::string& path, FileSystem& fs = FileSystem::Posix()) const;

 private:
  struct Open {
    std::string name;
    int64_t step = -1;
    std::optional<Phase> kind;
    int block = -1;
  };

  // Records the phase in progress, or the gap since the last phase if memory moved in it.
  void Close();
  int64_t NowUs() const;

  MemoryTracker& tracker_;
  const std::chrono::steady_clock::time_point start_time_;
  std::optional<Open> open_;            // the phase in progress
  int64_t open_start_us_ = 0;           // when the phase in progress (or the gap) began
  MemorySnapshot::Table open_start_{};  // and the tracker's table then
  std::vector<MemoryPhase> phases_;
};

}  // namespace hoist::runtime
