#include "zero/param_shards.h"

#include <algorithm>
#include <cstring>

#include "core/check.h"
#include "offload/open_storage.h"

namespace hoist::zero {
namespace {

constexpr int64_t kAlign = 4096;

int64_t RoundUp(int64_t value, int64_t multiple) {
  return (value + multiple - 1) / multiple * multiple;
}

}  // namespace

// A staging buffer: idle, holding a unit being read (or read), or a unit being written.
struct ParamShards::Staging {
  enum class State { kFree, kReading, kReady, kWriting };
  offload::PinnedBuffer buffer;
  State state = State::kFree;
  int unit = -1;
  bool in_use = false;  // handed out by Acquire or BeginWrite and not yet given back
  bool extra = false;   // beyond buffer_count: freed on release
  std::future<Status> io;
  uint64_t order = 0;  // when its write started, to wait for the oldest first
};

ParamShards::ParamShards(const PartitionPlan& plan, DType type, const ParamOffload& options,
                         offload::PinnedHostPool& pool, MemoryTracker& tracker)
    : plan_(plan),
      type_(type),
      options_(options),
      pool_(pool),
      tracker_(tracker),
      csize_(DTypeSize(type)) {}

ParamShards::~ParamShards() {
  // Background transfers own staging buffers until they finish.
  for (auto& staging : staging_) {
    if (staging->io.valid()) (void)staging->io.get();
  }
  if (storage_ != nullptr) tracker_.Remove(Place::kNvme, Category::kParam, storage_->size_bytes());
}

StatusOr<std::unique_ptr<ParamShards>> ParamShards::Create(const PartitionPlan& plan, DType type,
                                                           const ParamOffload& options,
                                                           offload::PinnedHostPool& pool,
                                                           MemoryTracker& tracker) {
  HOIST_CHECK(options.place != Placement::kDevice);
  std::unique_ptr<ParamShards> shards(new ParamShards(plan, type, options, pool, tracker));
  HOIST_RETURN_IF_ERROR(shards->Allocate());
  return shards;
}

int ParamShards::StagingCount(int buffer_count) {
  // The unit being gathered and the next one, at least.
  return std::max(buffer_count, 2);
}

int64_t ParamShards::unit_bytes(int unit) const {
  return plan_.unit(unit).shard * static_cast<int64_t>(csize_);
}

namespace {

// Where each unit's shard goes: units stay in host memory in order until one does not fit in
// max_in_cpu; every later one goes to the file, so that prefetching walks it front to back.
struct Layout {
  std::vector<int64_t> resident_offset, file_offset;                // per unit; -1 where it is not
  int64_t resident_bytes = 0, file_bytes = 0, largest_on_file = 0;  // largest in elements
};

Layout PlanLayout(const PartitionPlan& plan, size_t csize, const ParamOffload& options) {
  Layout layout;
  const auto n = static_cast<size_t>(plan.num_units());
  layout.resident_offset.assign(n, -1);
  layout.file_offset.assign(n, -1);
  int64_t resident_elements = 0;
  bool spilled = false;
  for (int u = 0; u < plan.num_units(); ++u) {
    const int64_t shard = plan.unit(u).shard;
    const int64_t bytes = shard * static_cast<int64_t>(csize);
    if (options.place == Placement::kHost ||
        (!spilled && resident_elements + shard <= options.max_in_cpu)) {
      layout.resident_offset[static_cast<size_t>(u)] = layout.resident_bytes;
      layout.resident_bytes += RoundUp(bytes, 64);
      resident_elements += shard;
    } else {
      spilled = true;
      layout.file_offset[static_cast<size_t>(u)] = layout.file_bytes;
      layout.file_bytes += RoundUp(bytes, kAlign);
      layout.largest_on_file = std::max(layout.largest_on_file, shard);
    }
  }
  return layout;
}

// Bytes of one staging buffer: the largest shard on NVMe, whole 4 KiB blocks.
int64_t StagingBytes(int64_t largest_on_file, size_t csize) {
  return RoundUp(largest_on_file * static_cast<int64_t>(csize), kAlign);
}

// A staging buffer must hold the largest shard on NVMe, `largest_on_file` elements.
Status CheckBufferSize(int64_t largest_on_file, const ParamOffload& options) {
  if (options.buffer_size >= largest_on_file) return Status::Ok();
  return InvalidArgumentError(
      "zero_optimization.offload_param.buffer_size is " + std::to_string(options.buffer_size) +
      " elements but this rank's largest parameter shard on NVMe has " +
      std::to_string(largest_on_file) + "; raise buffer_size to at least that");
}

}  // namespace

ParamShardFootprint ParamShards::Footprint(const PartitionPlan& plan, DType type,
                                           const ParamOffload& options) {
  const size_t csize = DTypeSize(type);
  const Layout layout = PlanLayout(plan, csize, options);
  ParamShardFootprint footprint;
  footprint.resident_bytes = layout.resident_bytes;
  footprint.file_bytes = layout.file_bytes;
  if (layout.file_bytes > 0) {
    footprint.staging_bytes =
        StagingCount(options.buffer_count) *
        offload::PinnedHostPool::AllocationBytes(StagingBytes(layout.largest_on_file, csize));
  }
  return footprint;
}

std::vector<bool> ParamShards::UnitsOnNvme(const PartitionPlan& plan, const ParamOffload& options) {
  const Layout layout = PlanLayout(plan, 1, options);
  std::vector<bool> on_nvme;
  for (int64_t offset : layout.file_offset) on_nvme.push_back(offset >= 0);
  return on_nvme;
}

Status ParamShards::Validate(const PartitionPlan& plan, DType type, const ParamOffload& options) {
  if (options.place == Placement::kDevice) return Status::Ok();
  const Layout layout = PlanLayout(plan, DTypeSize(type), options);
  if (layout.file_bytes == 0) return Status::Ok();
  return CheckBufferSize(layout.largest_on_file, options);
}

Status ParamShards::Allocate() {
  Layout layout = PlanLayout(plan_, csize_, options_);
  for (int u = 0; u < plan_.num_units(); ++u) shard_bytes_ += unit_bytes(u);
  resident_offset_ = std::move(layout.resident_offset);
  file_offset_ = std::move(layout.file_offset);
  resident_bytes_ = layout.resident_bytes;
  const int64_t file_bytes = layout.file_bytes, largest_on_file = layout.largest_on_file;
  if (resident_bytes_ > 0) {
    if (options_.pin_memory) {
      HOIST_ASSIGN_OR_RETURN(pinned_, pool_.Allocate(resident_bytes_, Category::kParam));
      resident_ = pinned_.bytes();
    } else {
      host_device_ = std::make_unique<CpuDevice>(Place::kHost, &tracker_);
      HOIST_ASSIGN_OR_RETURN(pageable_, host_device_->Allocate(resident_bytes_, Category::kParam));
      resident_ = static_cast<std::byte*>(pageable_.data());
    }
  }
  if (file_bytes == 0) return Status::Ok();
  HOIST_RETURN_IF_ERROR(CheckBufferSize(largest_on_file, options_));
  if (options_.nvme_file.empty()) {
    return InvalidArgumentError("offloading parameters to nvme needs a scratch file path");
  }
  if (options_.open_storage) {
    HOIST_ASSIGN_OR_RETURN(storage_, options_.open_storage(options_.nvme_file, file_bytes));
  } else {
    HOIST_ASSIGN_OR_RETURN(storage_, offload::OpenBlockStorage(options_.nvme_file, file_bytes));
  }
  tracker_.Add(Place::kNvme, Category::kParam, storage_->size_bytes());
  staging_bytes_ = StagingBytes(largest_on_file, csize_);
  for (int i = 0; i < StagingCount(options_.buffer_count); ++i) {
    auto staging = std::make_unique<Staging>();
    HOIST_ASSIGN_OR_RETURN(staging->buffer, pool_.Allocate(staging_bytes_, Category::kParam));
    staging_.push_back(std::move(staging));
  }
  return Status::Ok();
}

int64_t ParamShards::file_bytes() const { return storage_ != nullptr ? storage_->size_bytes() : 0; }

void ParamShards::Defer(const Status& status) {
  if (deferred_.ok() && !status.ok()) deferred_ = status;
}

Status ParamShards::TakeDeferredError() {
  Status status = deferred_;
  deferred_ = Status::Ok();
  return status;
}

ParamShards::Staging* ParamShards::FindStaging(int unit, bool writing) {
  for (auto& staging : staging_) {
    if (staging->unit != unit) continue;
    const bool is_write = staging->state == Staging::State::kWriting;
    if (is_write == writing && staging->state != Staging::State::kFree) return staging.get();
  }
  return nullptr;
}

ParamShards::Staging* ParamShards::FreeStaging() {
  for (auto& staging : staging_) {
    if (staging->state == Staging::State::kFree) return staging.get();
  }
  // All busy: finish the oldest write, if any, and take its buffer.
  Staging* oldest = nullptr;
  for (auto& staging : staging_) {
    if (staging->state == Staging::State::kWriting &&
        (oldest == nullptr || staging->order < oldest->order)) {
      oldest = staging.get();
    }
  }
  if (oldest != nullptr) {
    Defer(oldest->io.get());
    oldest->state = Staging::State::kFree;
    oldest->unit = -1;
    return oldest;
  }
  // A prefetch nobody has asked for yet gives way; its unit is read again when it is acquired.
  for (auto& staging : staging_) {
    if (staging->in_use) continue;
    if (staging->state == Staging::State::kReading) (void)staging->io.get();
    staging->state = Staging::State::kFree;
    staging->unit = -1;
    return staging.get();
  }
  // Every buffer handed out (more units held at once than buffers): one more, freed on release.
  auto extra = std::make_unique<Staging>();
  StatusOr<offload::PinnedBuffer> buffer = pool_.Allocate(staging_bytes_, Category::kParam);
  HOIST_CHECK(buffer.ok()) << "cannot allocate a parameter staging buffer: "
                           << buffer.status().ToString();
  extra->buffer = std::move(buffer).value();
  extra->extra = true;
  staging_.push_back(std::move(extra));
  return staging_.back().get();
}

void ParamShards::Recycle(Staging* staging) {
  staging->state = Staging::State::kFree;
  staging->unit = -1;
  staging->in_use = false;
  if (!staging->extra) return;
  auto it = std::find_if(staging_.begin(), staging_.end(),
                         [&](const std::unique_ptr<Staging>& s) { return s.get() == staging; });
  staging_.erase(it);
}

void ParamShards::StartRead(int unit, Staging* staging) {
  staging->state = Staging::State::kReading;
  staging->unit = unit;
  const int64_t offset = file_offset_[static_cast<size_t>(unit)];
  const int64_t bytes = RoundUp(unit_bytes(unit), kAlign);
  stats_.nvme_read_bytes += bytes;
  offload::BlockStorage* storage = storage_.get();
  void* data = staging->buffer.data();
  staging->io = std::async(std::launch::async, [storage, offset, data, bytes] {
    return storage->Read(offset, data, bytes);
  });
}

void ParamShards::Prefetch(int unit) {
  if (!on_nvme(unit) || FindStaging(unit, false) != nullptr) return;
  // A write of the same unit still in flight must land before it is read back.
  if (Staging* writing = FindStaging(unit, true)) {
    Defer(writing->io.get());
    Recycle(writing);
  }
  // Prefetching never grows the pool; Acquire will read it if no buffer is free now.
  for (auto& staging : staging_) {
    if (staging->state == Staging::State::kFree) {
      StartRead(unit, staging.get());
      return;
    }
  }
}

const void* ParamShards::Acquire(int unit) {
  if (!on_nvme(unit)) return resident_ + resident_offset_[static_cast<size_t>(unit)];
  Staging* staging = FindStaging(unit, false);
  if (staging == nullptr) {
    Prefetch(unit);  // settles a pending write of the unit first
    staging = FindStaging(unit, false);
    if (staging == nullptr) {
      staging = FreeStaging();
      StartRead(unit, staging);
    }
  }
  if (staging->state == Staging::State::kReading) {
    Status status = staging->io.get();
    if (!status.ok()) {
      // Zeros instead of the shard; the step boundary stops every rank with this error.
      std::memset(staging->buffer.data(), 0, static_cast<size_t>(staging_bytes_));
      Defer(status);
    }
    staging->state = Staging::State::kReady;
  }
  staging->in_use = true;
  return staging->buffer.data();
}

void ParamShards::Release(int unit) {
  if (!on_nvme(unit)) return;
  Staging* staging = FindStaging(unit, false);
  HOIST_CHECK(staging != nullptr) << "parameter shard of unit " << unit << " released twice";
  if (staging->state == Staging::State::kReading) Defer(staging->io.get());
  Recycle(staging);
}

void* ParamShards::BeginWrite(int unit) {
  void* data;
  if (!on_nvme(unit)) {
    data = resident_ + resident_offset_[static_cast<size_t>(unit)];
  } else {
    // A stale prefetch of this unit would otherwise be served after the new contents.
    if (Staging* reading = FindStaging(unit, false)) {
      if (reading->state == Staging::State::kReading) Defer(reading->io.get());
      Recycle(reading);
    }
    if (Staging* writing = FindStaging(unit, true)) {
      Defer(writing->io.get());
      Recycle(writing);
    }
    Staging* staging = FreeStaging();
    staging->state = Staging::State::kReady;  // being filled; written by CommitWrite
    staging->unit = unit;
    staging->in_use = true;
    data = staging->buffer.data();
  }
  std::memset(data, 0, static_cast<size_t>(unit_bytes(unit)));
  return data;
}

void ParamShards::CommitWrite(int unit) {
  if (!on_nvme(unit)) return;
  Staging* staging = FindStaging(unit, false);
  HOIST_CHECK(staging != nullptr && staging->state == Staging::State::kReady)
      << "CommitWrite of unit " << unit << " without BeginWrite";
  staging->state = Staging::State::kWriting;
  staging->in_use = false;
  staging->order = ++write_order_;
  const int64_t offset = file_offset_[static_cast<size_t>(unit)];
  const int64_t bytes = RoundUp(unit_bytes(unit), kAlign);
  stats_.nvme_write_bytes += bytes;
  offload::BlockStorage* storage = storage_.get();
  void* data = staging->buffer.data();
  staging->io = std::async(std::launch::async, [storage, offset, data, bytes] {
    return storage->Write(offset, data, bytes);
  });
}

Status ParamShards::FinishWrites() {
  Status first = Status::Ok();
  for (size_t i = 0; i < staging_.size();) {
    Staging* staging = staging_[i].get();
    if (staging->state != Staging::State::kWriting) {
      ++i;
      continue;
    }
    Status status = staging->io.get();
    if (first.ok()) first = status;
    const bool extra = staging->extra;
    Recycle(staging);
    if (!extra) ++i;  // an extra buffer was erased: the same index holds the next one
  }
  return first;
}

}  // namespace hoist::zero
