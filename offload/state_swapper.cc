#include "offload/state_swapper.h"

#include <algorithm>
#include <chrono>

#include "core/check.h"
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

StatusOr<std::vector<SwapArray>> StateSwapper::ArraysFor(const StateSwapperOptions& options) {
  if (options.layout.empty()) {
    if (options.elements <= 0 || options.arrays <= 0 || options.sub_group_size <= 0) {
      return InvalidArgumentError(
          "offload: a state swapper needs elements, arrays and sub_group_size > 0 (got " +
          std::to_string(options.elements) + ", " + std::to_string(options.arrays) + ", " +
          std::to_string(options.sub_group_size) + ")");
    }
    SwapArray array;
    const int64_t sub_group = std::min(options.sub_group_size, options.elements);
    for (int64_t first = 0; first < options.elements; first += sub_group) {
      array.bounds.push_back(first);
    }
    array.bounds.push_back(options.elements);
    return std::vector<SwapArray>(static_cast<size_t>(options.arrays), array);
  }
  const size_t bounds = options.layout.front().bounds.size();
  for (size_t a = 0; a < options.layout.size(); ++a) {
    const SwapArray& array = options.layout[a];
    const std::string name = "offload: the state swapper's array " + std::to_string(a);
    if (array.element_bytes <= 0) return InvalidArgumentError(name + " has no element size");
    if (array.bounds.size() < 2 || array.bounds.size() != bounds || array.bounds.front() != 0) {
      return InvalidArgumentError(name +
                                  " must give every sub-group's first element from 0 and its "
                                  "length, as many as the other arrays");
    }
    if (!std::is_sorted(array.bounds.begin(), array.bounds.end())) {
      return InvalidArgumentError(name + " has sub-groups that go backwards");
    }
  }
  if (options.layout.front().bounds.back() <= 0) {
    return InvalidArgumentError("offload: the state swapper's array 0 is empty");
  }
  return options.layout;
}

StateSwapper::Layout StateSwapper::LayoutFor(const StateSwapperOptions& options) {
  Layout layout;
  StatusOr<std::vector<SwapArray>> arrays = ArraysFor(options);
  if (!arrays.ok()) return layout;  // Create reports it
  const int64_t groups = static_cast<int64_t>(arrays->front().bounds.size()) - 1;
  layout.sub_groups = groups;
  for (const SwapArray& array : *arrays) {
    int64_t longest = 0;
    for (int64_t g = 0; g < groups; ++g) {
      const auto i = static_cast<size_t>(g);
      longest = std::max(longest, array.bounds[i + 1] - array.bounds[i]);
    }
    if (&array == &arrays->front()) layout.sub_group = longest;
    layout.array_strides.push_back(RoundUp(longest * array.element_bytes, kLayoutAlignment));
    layout.group_stride += layout.array_strides.back();
  }
  // Past three the lockstep schedule gains nothing, and past the sub-groups a slot stays empty.
  layout.slots = std::min<int64_t>({options.buffer_count, 3, layout.sub_groups});
  // What the pool hands out (and the tracker counts) for each slot: whole pages.
  layout.slot_bytes = layout.slots * PinnedHostPool::AllocationBytes(layout.group_stride);
  layout.file_bytes = layout.sub_groups * layout.group_stride;
  return layout;
}

StateSwapper::StateSwapper(const StateSwapperOptions& options, std::vector<SwapArray> arrays,
                           std::unique_ptr<BlockStorage> storage, MemoryTracker& tracker)
    : options_(options),
      arrays_(std::move(arrays)),
      storage_(std::move(storage)),
      tracker_(tracker),
      layout_(LayoutFor(options)) {
  equal_fp32_ = std::all_of(arrays_.begin(), arrays_.end(), [&](const SwapArray& array) {
    return array.element_bytes == int64_t{sizeof(float)} && array.bounds == arrays_.front().bounds;
  });
  tracker_.Add(Place::kNvme, options_.category, storage_->size_bytes());
}

StateSwapper::~StateSwapper() {
  tracker_.Remove(Place::kNvme, options_.category, storage_->size_bytes());
}

StatusOr<std::unique_ptr<StateSwapper>> StateSwapper::Create(const StateSwapperOptions& options,
                                                             const StorageFactory& open,
                                                             PinnedHostPool& pool,
                                                             MemoryTracker& tracker) {
  if (options.buffer_count < 1) {
    return InvalidArgumentError("offload: a state swapper needs buffer_count >= 1, not " +
                                std::to_string(options.buffer_count));
  }
  HOIST_ASSIGN_OR_RETURN(std::vector<SwapArray> arrays, ArraysFor(options));
  const Layout layout = LayoutFor(options);
  std::unique_ptr<BlockStorage> storage;
  if (open) {
    HOIST_ASSIGN_OR_RETURN(storage, open(options.path, layout.file_bytes));
  } else {
    HOIST_ASSIGN_OR_RETURN(storage, OpenBlockStorage(options.path, layout.file_bytes));
  }
  if (kLayoutAlignment % storage->alignment() != 0 || storage->size_bytes() < layout.file_bytes) {
    return InternalError("offload: the storage for " + options.path + " (alignment " +
                         std::to_string(storage->alignment()) + ", " +
                         std::to_string(storage->size_bytes()) +
                         " bytes) cannot hold the swapper's layout of " +
                         std::to_string(layout.file_bytes) + " bytes");
  }
  std::unique_ptr<StateSwapper> swapper(
      new StateSwapper(options, std::move(arrays), std::move(storage), tracker));
  for (int64_t s = 0; s < layout.slots; ++s) {
    HOIST_ASSIGN_OR_RETURN(PinnedBuffer slot, pool.Allocate(layout.group_stride, options.category));
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
  std::byte* slot =
      slots_[static_cast<size_t>(group % static_cast<int64_t>(slots_.size()))].bytes();
  int64_t offset = group * layout_.group_stride;  // in the file; in the slot from 0
  for (size_t a = 0; a < arrays_.size(); ++a) {
    const SwapArray& array = arrays_[a];
    const auto g = static_cast<size_t>(group);
    const int64_t count = array.bounds[g + 1] - array.bounds[g];
    const int64_t bytes = RoundUp(count * array.element_bytes, kLayoutAlignment);
    if (bytes > 0) batch->push_back(IoRequest{op, offset, slot, bytes});
    offset += layout_.array_strides[a];
    slot += layout_.array_strides[a];
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

Status StateSwapper::CallVisit(const ViewVisit& visit, int64_t group) {
  std::byte* slot =
      slots_[static_cast<size_t>(group % static_cast<int64_t>(slots_.size()))].bytes();
  std::vector<SwapPiece> pieces(arrays_.size());
  for (size_t a = 0; a < arrays_.size(); ++a) {
    const auto g = static_cast<size_t>(group);
    pieces[a] = {arrays_[a].bounds[g], arrays_[a].bounds[g + 1] - arrays_[a].bounds[g],
                 arrays_[a].element_bytes, slot};
    slot += layout_.array_strides[a];
  }
  const auto started = Clock::now();
  Status status = visit(group, pieces);
  visit_s_ += SecondsSince(started);
  return status;
}

Status StateSwapper::ForEachSubGroup(Access access, const Visit& visit) {
  HOIST_CHECK(equal_fp32_) << "ForEachSubGroup's visit takes equal fp32 arrays: use "
                              "ForEachSubGroupView for this layout";
  std::vector<float*> floats(arrays_.size());
  return ForEachSubGroupView(access, [&](int64_t, std::span<const SwapPiece> pieces) {
    for (size_t a = 0; a < pieces.size(); ++a) floats[a] = pieces[a].floats();
    return visit(pieces[0].first, pieces[0].count, floats);
  });
}

Status StateSwapper::ForEachSubGroupView(Access access, const ViewVisit& visit) {
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
