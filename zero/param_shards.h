// ParamShards: where ZeRO stage 3 keeps this rank's compute-type parameter shards when
// `offload_param` moves them off the device (ZeRO-Infinity's parameter offload).
//
//   kHost: every unit's shard in one host buffer (pinned through the pool, or pageable). Reading
//          and writing are plain pointers.
//   kNvme: the first units, in unit order, whose shards fit in max_in_cpu elements stay in host
//          memory as with kHost; every later unit's shard lives in a scratch file (one 4
//          KiB-aligned run per unit) and passes through a few page-aligned staging buffers
//          (buffer_count of them, each holding buffer_size elements or the largest such shard,
//          whichever is smaller; a buffer_size below the largest shard is refused).
//
// The engine uses a shard in three ways:
//   - to gather it: Prefetch(unit) starts reading it on a background thread (the model announces
//     the next unit one ahead), Acquire(unit) waits for it and returns it, Release(unit) gives its
//     buffer back once the all-gather has copied it;
//   - to rewrite it after the optimizer step (and at initialisation and restore): BeginWrite(unit)
//     returns a zero-filled buffer, CommitWrite(unit) makes it the shard (for NVMe: writes it on a
//     background thread), FinishWrites() waits for every write and returns the first error.
// A read that fails cannot be returned through Acquire (the model's ParamStore calls have no
// Status): the buffer is zero-filled, the error is kept, and TakeDeferredError() hands it to the
// engine, which agrees on it with every rank at the next step boundary so that all stop together.
//
// When every staging buffer is busy, the oldest write is waited for, then a prefetch nobody has
// acquired yet gives way; only when all are handed out at once (not in the engine's use) is one
// more allocated, and freed on release.
//
// One thread (the engine's) calls every method; the background threads only move bytes between a
// staging buffer and the file.
#pragma once

#include <cstdint>
#include <future>
#include <memory>
#include <string>
#include <vector>

#include "comm/communicator.h"
#include "core/device.h"
#include "core/memory_tracker.h"
#include "core/placement.h"
#include "core/status.h"
#include "core/tunables.h"
#include "offload/block_storage.h"
#include "offload/pinned_pool.h"
#include "offload/state_swapper.h"
#include "zero/partition.h"

namespace hoist::zero {

struct ParamOffload {
  Placement place = Placement::kDevice;
  bool pin_memory = true;
  std::string nvme_file;  // kNvme: this rank's parameter scratch file
  // The tunables (core/tunables.h says what each counts).
  int buffer_count = static_cast<int>(tunables::kParamBufferCount.default_value);
  int64_t buffer_size = tunables::kParamBufferSize.default_value;
  int64_t max_in_cpu = tunables::kParamMaxInCpu.default_value;
  offload::StorageFactory open_storage;
};

// Byte counts of what ParamShards moved since creation.
struct ParamShardStats {
  int64_t nvme_read_bytes = 0;
  int64_t nvme_write_bytes = 0;
};

// What ParamShards::Create will allocate, in bytes.
struct ParamShardFootprint {
  int64_t resident_bytes = 0;  // host memory (pinned unless pin_memory is false)
  int64_t staging_bytes = 0;   // pinned staging buffers (kNvme), as the pool allocates them
  int64_t file_bytes = 0;      // the scratch file (kNvme)
};

class ParamShards {
 public:
  static ParamShardFootprint Footprint(const PartitionPlan& plan, DType type,
                                       const ParamOffload& options);
  // The refusal Create gives for options that cannot hold `plan` (a buffer_size below the
  // largest shard on NVMe), without allocating anything; Ok otherwise.
  static Status Validate(const PartitionPlan& plan, DType type, const ParamOffload& options);
  // Per unit of `plan`, whether Create puts its shard in the file (on_nvme below).
  static std::vector<bool> UnitsOnNvme(const PartitionPlan& plan, const ParamOffload& options);
  // The staging buffers allocated for `buffer_count`: at least two (the unit being gathered and
  // the next one).
  static int StagingCount(int buffer_count);

  // `plan` gives every unit's shard (size and order); `type` the compute type. `pool`, `tracker`
  // must outlive the object. `options.place` must not be kDevice.
  static StatusOr<std::unique_ptr<ParamShards>> Create(const PartitionPlan& plan, DType type,
                                                       const ParamOffload& options,
                                                       offload::PinnedHostPool& pool,
                                                       MemoryTracker& tracker);
  ~ParamShards();
  ParamShards(const ParamShards&) = delete;
  ParamShards& operator=(const ParamShards&) = delete;

  void Prefetch(int unit);
  const void* Acquire(int unit);
  void Release(int unit);

  void* BeginWrite(int unit);
  void CommitWrite(int unit);
  Status FinishWrites();

  // The first read error since the last call (Ok if none), and clears it.
  Status TakeDeferredError();

  // Bytes of every shard (the compute-type weights this rank owns), wherever they are.
  int64_t shard_bytes() const { return shard_bytes_; }
  // Bytes on NVMe and kept in host memory.
  int64_t file_bytes() const;
  int64_t resident_bytes() const { return resident_bytes_; }
  ParamShardStats stats() const { return stats_; }
  // Whether `unit`'s shard is in the file (kNvme, beyond max_in_cpu).
  bool on_nvme(int unit) const { return file_offset_[static_cast<size_t>(unit)] >= 0; }

 private:
  struct Staging;  // a staging buffer and what it is doing
  ParamShards(const PartitionPlan& plan, DType type, const ParamOffload& options,
              offload::PinnedHostPool& pool, MemoryTracker& tracker);
  Status Allocate();
  int64_t unit_bytes(int unit) const;
  // A staging buffer not in use (waiting for the oldest write when all are busy).
  Staging* FreeStaging();
  Staging* FindStaging(int unit, bool writing);
  void Recycle(Staging* staging);
  void StartRead(int unit, Staging* staging);
  void Defer(const Status& status);

  PartitionPlan plan_;
  DType type_;
  ParamOffload options_;
  offload::PinnedHostPool& pool_;
  MemoryTracker& tracker_;
  size_t csize_;
  int64_t shard_bytes_ = 0;
  int64_t resident_bytes_ = 0;

  std::unique_ptr<Device> host_device_;  // pageable resident shards (pin_memory false)
  Buffer pageable_;
  offload::PinnedBuffer pinned_;
  std::byte* resident_ = nullptr;         // the resident shards
  std::vector<int64_t> resident_offset_;  // per unit, in resident_ (-1: on NVMe)
  std::vector<int64_t> file_offset_;      // per unit, in the file (-1: resident)
  std::unique_ptr<offload::BlockStorage> storage_;
  int64_t staging_bytes_ = 0;
  std::vector<std::unique_ptr<Staging>> staging_;
  Status deferred_;
  ParamShardStats stats_;
  uint64_t write_order_ = 0;  // counts writes, so the oldest in flight is waited for first
};

}  // namespace hoist::zero
