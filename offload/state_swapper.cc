#include "offload/state_swapper.h"

#include <algorithm>
#include <chrono>

#include "offload/open_storage.h"

namespace hoist::offload {
namespace {

using Clock = std::chrono::steady_clock;

double SecondsSince(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

int64_t RoundUp(int64_t value, int64_t multiple) {
  return (value + multiple - 1) / multiple * multiple;
}

// Every file-backed storage aligns to at most this; using it always keeps the layout the same
// whichever storage (O_DIRECT or not) ends up behind the swapper.
constexpr int64_t kLayoutAlignment = 4096;

}  // namespace

StateSwapper::Layout StateSwapper::LayoutFor(const StateSwapperOptions& options) {
  Layout layout;
  layout.sub_group = std::min(options.sub_group_size, options.elements);
  layout.sub_groups = (options.elements + layout.sub_group - 1) / layout.sub_group;
  layout.array_stride = RoundUp(layout.sub_group * int64_t{sizeof(float)}, kLayoutAlignment);
  // Past three the lockstep schedule gains nothing, and past the sub-groups a slot stays empty.
  layout.slots = std::min<int64_t>({options.buffer_count, 3, layout.sub_groups});
  // What the pool hands out (and the tracker counts) for each slot: whole pages.
  layout.slot_bytes =
      layout.slots * PinnedHostPool::AllocationBytes(options.arrays * layout.array_stride);
  layout.file_bytes = layout.sub_groups * options.arrays * layout.array_stride;
  return layout;
}

StateSwapper::StateSwapper(const StateSwapperOptions& options,
                           std::unique_ptr<BlockStorage> storage, MemoryTracker& tracker)
    : options_(options),
      storage_(std::move(storage)),
      tracker_(tracker),
      layout_(LayoutFor(options)) {
  tracker_.Add(Place::kNvme, options_.category, storage_->size_bytes());
}

StateSwapper::~StateSwapper() {
  tracker_.Remove(Place::kNvme, options_.category, storage_->size_bytes());
}

StatusOr<std::unique_ptr<StateSwapper>> StateSwapper::Create(const StateSwapperOptions& options,
                                                             const StorageFactory& open,
                                                             PinnedHostPool& pool,
                                                             MemoryTracker& tracker) {
  if (options.elements <= 0 || options.arrays <= 0 || options.sub_group_size <= 0 ||
      options.buffer_count < 1) {
    return InvalidArgumentError(
        "offload: a state swapper needs elements, arrays and sub_group_size > 0 and "
        "buffer_count >= 1 (got " +
        std::to_string(options.elements) + ", " + std::to_string(options.arrays) + ", " +
        std::to_string(options.sub_group_size) + ", " + std::to_string(options.buffer_count) + ")");
  }
  const int64_t file_bytes = LayoutFor(options).file_bytes;
  std::unique_ptr<BlockStorage> storage;
  if (open) {
    HOIST_ASSIGN_OR_RETURN(storage, open(options.path, file_bytes));
  } else {
    HOIST_ASSIGN_OR_RETURN(storage, OpenBlockStorage(options.path, file_bytes));
  }
  if (kLayoutAlignment % storage->alignment() != 0 || storage->size_bytes() < file_bytes) {
    return InternalError(
        "offload: the storage for " + options.path + " (alignment " +
        std::to_string(storage->alignment()) + ", " + std::to_string(storage->size_bytes()) +
        " bytes) cannot hold the swapper's layout of " + std::to_string(file_bytes) + " bytes");
  }
  std::unique_ptr<StateSwapper> swapper(new StateSwapper(options, std::move(storage), tracker));
  for (int64_t s = 0; s < swapper->layout_.slots; ++s) {
    HOIST_ASSIGN_OR_RETURN(
        PinnedBuffer slot,
        pool.Allocate(options.arrays * swapper->layout_.array_stride, options.category));
    swapper->slots_.push_back(std::move(slot));
  }
  return swapper;
}

int64_t StateSwapper::slot_bytes() const {
  int64_t total = 0;
  for (const PinnedBuffer& slot : slots_) total += slot.size_bytes();
  return total;
}

void StateSwapper::AddRequests(IoOp op, int64_t group, std::vector<IoRequest>* batch) {
  const int64_t begin = group * layout_.sub_group;
  const int64_t count = std::min(layout_.sub_group, options_.elements - begin);
  const int64_t bytes = RoundUp(count * int64_t{sizeof(float)}, kLayoutAlignment);
  std::byte* slot =
      slots_[static_cast<size_t>(group % static_cast<int64_t>(slots_.size()))].bytes();
  const int64_t base = group * options_.arrays * layout_.array_stride;
  for (int a = 0; a < options_.arrays; ++a) {
    batch->push_back(
        IoRequest{op, base + a * layout_.array_stride, slot + a * layout_.array_stride, bytes});
  }
}

Status StateSwapper::Submit(const std::vector<IoRequest>& batch) {
  if (batch.empty()) return Status::Ok();
  for (const IoRequest& request : batch) {
    (request.op == IoOp::kRead ? bytes_read_ : bytes_written_) += request.bytes;
  }
  const auto started = Clock::now();
  Status status = storage_->Submit(batch);
  // A storage without a queue does the transfers inside Submit: that is I/O time too.
  io_wait_s_ += SecondsSince(started);
  return status;
}

Status StateSwapper::Wait() {
  const auto started = Clock::now();
  Status status = storage_->Wait();
  io_wait_s_ += SecondsSince(started);
  return status;
}

Status StateSwapper::SubmitAndWait(const std::vector<IoRequest>& batch) {
  Status submitted = Submit(batch);
  Status waited = Wait();
  return submitted.ok() ? waited : submitted;
}

Status StateSwapper::CallVisit(const Visit& visit, int64_t group) {
  const int64_t begin = group * layout_.sub_group;
  const int64_t count = std::min(layout_.sub_group, options_.elements - begin);
  std::byte* slot =
      slots_[static_cast<size_t>(group % static_cast<int64_t>(slots_.size()))].bytes();
  std::vector<float*> arrays(static_cast<size_t>(options_.arrays));
  for (int a = 0; a < options_.arrays; ++a) {
    arrays[static_cast<size_t>(a)] = reinterpret_cast<float*>(slot + a * layout_.array_stride);
  }
  const auto started = Clock::now();
  Status status = visit(begin, count, arrays);
  visit_s_ += SecondsSince(started);
  return status;
}

Status StateSwapper::ForEachSubGroup(Access access, const Visit& visit) {
  const bool read = access != Access::kWrite;
  const bool write = access != Access::kRead;
  const auto k = static_cast<int64_t>(slots_.size());
  const int64_t groups = layout_.sub_groups;
  std::vector<IoRequest> batch;

  if (read) {
    AddRequests(IoOp::kRead, 0, &batch);
    HOIST_RETURN_IF_ERROR(SubmitAndWait(batch));
  }
  for (int64_t g = 0; g < groups; ++g) {
    // What runs during this visit: the next sub-group's read when it has a free slot, and with
    // three or more slots the previous sub-group's write.
    batch.clear();
    const bool write_behind = write && k >= 3 && g >= 1;
    if (write_behind) AddRequests(IoOp::kWrite, g - 1, &batch);
    if (read && k >= 2 && g + 1 < groups) AddRequests(IoOp::kRead, g + 1, &batch);
    Status submitted = Submit(batch);
    Status visited = submitted.ok() ? CallVisit(visit, g) : Status::Ok();
    Status waited = Wait();
    HOIST_RETURN_IF_ERROR(submitted);
    HOIST_RETURN_IF_ERROR(visited);
    HOIST_RETURN_IF_ERROR(waited);

    batch.clear();
    const bool last = g + 1 == groups;
    // The current sub-group's write, when it cannot be left to the next visit.
    if (write && (k < 3 || last)) AddRequests(IoOp::kWrite, g, &batch);
    // With one slot the next read could not run during the visit: it runs now.
    if (read && k == 1 && !last) AddRequests(IoOp::kRead, g + 1, &batch);
    if (!batch.empty()) {
      if (k == 1) {
        // Write this sub-group out of the only slot before reading the next one into it.
        std::vector<IoRequest> writes, reads;
        for (const IoRequest& request : batch) {
          (request.op == IoOp::kWrite ? writes : reads).push_back(request);
        }
        HOIST_RETURN_IF_ERROR(SubmitAndWait(writes));
        HOIST_RETURN_IF_ERROR(SubmitAndWait(reads));
      } else {
        HOIST_RETURN_IF_ERROR(SubmitAndWait(batch));
      }
    }
  }
  return Status::Ok();
}

}  // namespace hoist::offload
