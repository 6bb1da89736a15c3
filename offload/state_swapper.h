// StateSwapper: arrays of fp32 state that live in a scratch file (NVMe) and are worked on a
// sub-group at a time through a few page-aligned host buffers. The optimizer swapper of
// ZeRO-Infinity is one: a rank's shard of the fp32 master weights and the two Adam moments, three
// arrays of the same length, is updated sub-group by sub-group while the next sub-group is read
// and the previous one written.
//
// File layout: sub-group g (elements [g * S, min((g + 1) * S, n)), S = sub_group_size) occupies
// bytes [g * stride, (g + 1) * stride), one aligned run per array:
//   [array 0: S floats, rounded up to 4096 bytes][array 1 ...]...
// so one sub-group is `arrays` contiguous requests, each cut into aio block_size pieces by the
// storage. The file is sized for every sub-group up front (preallocated), so a full disk is found
// when the swapper is created, not in the middle of a step.
//
// The pipeline over G sub-groups with k = buffer_count slots (sub-group g uses slot g mod k):
//   k = 1: read g; visit g; write g                      (nothing overlaps)
//   k = 2: read g+1 runs during visit g; write g after   (reads hidden)
//   k >= 3: read g+1 and write g-1 run during visit g    (reads and writes hidden)
// Each visit is followed by waiting for the I/O started with it, so sub-group g+1's slot never
// holds data still being written: with k >= 3 it last held g+1-k <= g-2, whose write finished
// before visit g-1 ended. A fourth slot would add nothing to this lockstep schedule, so a
// buffer_count above 3 allocates three.
//
// The bytes moved are counted (read, written) and so is the time ForEachSubGroup spent blocked on
// I/O rather than visiting, which tells how much of the I/O the visits hid.
//
// Arrays of other element sizes, cut into sub-groups of their own lengths (the 8-bit optimizer's
// codes and absmaxes next to its fp32 master weights), take an explicit layout: per array, its
// element size and the first element of every sub-group. Each array of sub-group g then takes
// its own aligned run, sized for the array's longest sub-group:
//   [array 0: its longest sub-group, rounded up to 4096 bytes][array 1 ...]...
// and ForEachSubGroupView hands each array's piece of the sub-group to the visit.
//
// The slots are allocated once, from the PinnedHostPool, as `category` (place host_pinned); the
// file's bytes count in the tracker as Place::kNvme under `category` while the swapper lives.
// The file is removed with the swapper if the swapper created it.
//
// Not thread-safe: one thread drives it. Blocking.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "core/memory_tracker.h"
#include "core/status.h"
#include "core/tunables.h"
#include "offload/block_storage.h"
#include "offload/pinned_pool.h"

namespace hoist::offload {

// One array of an explicit layout.
struct SwapArray {
  int64_t element_bytes = 4;  // > 0
  // The first element of each sub-group in this array, then the array's length: G + 1
  // non-decreasing values from 0. A sub-group may hold none of an array's elements.
  std::vector<int64_t> bounds;
};

struct StateSwapperOptions {
  std::string path;      // the scratch file
  int64_t elements = 0;  // n: length of every array (> 0)
  int arrays = 3;        // how many arrays of n floats (> 0)
  int64_t sub_group_size = tunables::kSubGroupSize.default_value;  // S (> 0; capped at n)
  // When not empty, the arrays and their sub-groups (every array with the same G >= 1); then
  // elements, arrays and sub_group_size are not read.
  std::vector<SwapArray> layout;
  // k: sub-group slots in host memory (>= 1; more than 3 allocate 3).
  int buffer_count = static_cast<int>(tunables::kOptimizerBufferCount.default_value);
  Category category = Category::kOptimizer;
};

// One array's part of a sub-group in its slot: elements [first, first + count) of the array,
// `count * element_bytes` bytes at `data` (writable up to the array's longest sub-group).
struct SwapPiece {
  int64_t first = 0;
  int64_t count = 0;
  int64_t element_bytes = 4;
  std::byte* data = nullptr;
  int64_t bytes() const { return count * element_bytes; }
  float* floats() const { return reinterpret_cast<float*>(data); }
};

class StateSwapper {
 public:
  // What ForEachSubGroup does around each visit: read the sub-group in first, write it back
  // after, or both.
  enum class Access { kRead, kWrite, kReadWrite };

  // visit(begin, count, arrays): the sub-group [begin, begin + count) is in arrays[0..arrays),
  // each pointing at `count` floats (and writable up to the sub-group size). A visit under
  // kWrite must fill every array (the slot holds a previous sub-group's values).
  using Visit = std::function<Status(int64_t begin, int64_t count, std::span<float* const> arrays)>;
  // The same for any layout: the sub-group's index and its piece of every array.
  using ViewVisit = std::function<Status(int64_t group, std::span<const SwapPiece> arrays)>;

  // Opens the file through `open` (or OpenBlockStorage's default choice when empty) and
  // allocates the slots from `pool`. `pool` and `tracker` must outlive the swapper.
  static StatusOr<std::unique_ptr<StateSwapper>> Create(const StateSwapperOptions& options,
                                                        const StorageFactory& open,
                                                        PinnedHostPool& pool,
                                                        MemoryTracker& tracker);
  ~StateSwapper();
  StateSwapper(const StateSwapper&) = delete;
  StateSwapper& operator=(const StateSwapper&) = delete;

  // Visits every sub-group in order with the pipeline above. The first error (an I/O failure
  // naming the file, offset, size and errno, or the visit's own) stops the walk; I/O already in
  // flight is waited for before returning, so no slot is touched after the call ends. A write
  // that failed leaves the file's sub-groups partly old and partly new: the caller must treat the
  // states as lost (the job stops and resumes from its last checkpoint).
  // Visit's arrays are those of a layout of equal fp32 arrays (the one elements/arrays/
  // sub_group_size give, or an explicit one of that shape; checked).
  Status ForEachSubGroup(Access access, const Visit& visit);
  Status ForEachSubGroupView(Access access, const ViewVisit& visit);

  // Elements of array 0; its longest sub-group.
  int64_t elements() const { return arrays_.front().bounds.back(); }
  int64_t sub_group_size() const { return layout_.sub_group; }
  int64_t num_sub_groups() const { return layout_.sub_groups; }
  int buffer_count() const { return static_cast<int>(slots_.size()); }
  int64_t file_bytes() const { return storage_->size_bytes(); }
  // Host bytes of the slots.
  int64_t slot_bytes() const;
  const std::string& path() const { return storage_->path(); }

  // Totals since creation.
  int64_t bytes_read() const { return bytes_read_; }
  int64_t bytes_written() const { return bytes_written_; }
  double io_wait_seconds() const { return io_wait_s_; }
  double visit_seconds() const { return visit_s_; }

  // What a swapper for `options` lays out, computed without creating it (for memory and disk
  // checks before anything is allocated).
  struct Layout {
    int64_t sub_group = 0;   // S, capped at the elements (explicit: array 0's longest sub-group)
    int64_t sub_groups = 0;  // G
    // Bytes of each array in one sub-group: its longest sub-group's bytes rounded up to 4 KiB
    // (4 S rounded up for the equal fp32 arrays), and their sum, one sub-group's run.
    std::vector<int64_t> array_strides;
    int64_t group_stride = 0;
    int64_t slots = 0;       // at most three (the schedule uses no more), at most G
    int64_t slot_bytes = 0;  // host bytes of all slots, as the pool allocates them
    int64_t file_bytes = 0;  // G x group_stride
  };
  static Layout LayoutFor(const StateSwapperOptions& options);
  // The explicit layout of `options` (built from elements/arrays/sub_group_size when it has
  // none), or an error naming what is wrong with it.
  static StatusOr<std::vector<SwapArray>> ArraysFor(const StateSwapperOptions& options);

 private:
  StateSwapper(const StateSwapperOptions& options, std::vector<SwapArray> arrays,
               std::unique_ptr<BlockStorage> storage, MemoryTracker& tracker);
  // Appends the requests that move sub-group g between its slot and the file.
  void AddRequests(IoOp op, int64_t group, std::vector<IoRequest>* batch);
  Status SubmitAndWait(const std::vector<IoRequest>& batch);
  Status Submit(const std::vector<IoRequest>& batch);
  Status Wait();
  Status CallVisit(const ViewVisit& visit, int64_t group);

  StateSwapperOptions options_;
  std::vector<SwapArray> arrays_;
  bool equal_fp32_ = false;  // every array fp32 with the same bounds (what Visit needs)
  std::unique_ptr<BlockStorage> storage_;
  MemoryTracker& tracker_;
  Layout layout_;
  std::vector<PinnedBuffer> slots_;  // each: one sub-group's run (group_stride bytes)
  int64_t bytes_read_ = 0, bytes_written_ = 0;
  double io_wait_s_ = 0, visit_s_ = 0;
};

}  // namespace hoist::offload
