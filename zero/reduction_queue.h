// ReductionQueue: the gradient reductions of stages 2/3 in flight, oldest first: each unit's
// reduction from its ReleaseGrads until it is finished (waited for and accumulated into the owned
// gradient shard), with the elements in flight and the rule of when the oldest is due: while more
// than `keep` elements are in flight (after each ReleaseGrads ReductionsKeptElements, which is
// reduce_bucket_size under overlap_comm and 0 otherwise; 0 at the end of the passes).
// ZeroEngine keeps its collectives and buffers in one; the memory estimate replays the model's
// calls through one holding their byte counts, so the two finish the same reductions at the
// same calls.
//
// `Payload` is what a reduction carries (movable). Not thread-safe.
#pragma once

#include <cstdint>
#include <deque>
#include <optional>
#include <utility>
#include <vector>

#include "core/check.h"
#include "zero/partition.h"

namespace hoist::zero {

template <typename Payload>
class ReductionQueue {
 public:
  struct Entry {
    int unit;
    Payload payload;
  };

  // `plan` (whose units' padded sizes count) must outlive the queue.
  explicit ReductionQueue(const PartitionPlan& plan) : plan_(plan) {}

  // The unit's reduction started.
  void Push(int unit, Payload payload) {
    in_flight_ += plan_.unit(unit).padded;
    entries_.push_back(Entry{unit, std::move(payload)});
  }
  // The oldest reduction, taken off the queue, if more than `keep` elements are in flight;
  // nullopt when none is due.
  std::optional<Entry> PopDue(int64_t keep) {
    if (entries_.empty() || in_flight_ <= keep) return std::nullopt;
    Entry entry = std::move(entries_.front());
    entries_.pop_front();
    in_flight_ -= plan_.unit(entry.unit).padded;
    HOIST_CHECK_GE(in_flight_, 0);
    return entry;
  }
  int64_t in_flight() const { return in_flight_; }
  bool empty() const { return entries_.empty(); }
  // Per unit, whether a reduction of it is in flight.
  std::vector<char> Reducing() const {
    std::vector<char> reducing(static_cast<size_t>(plan_.num_units()), 0);
    for (const Entry& entry : entries_) reducing[static_cast<size_t>(entry.unit)] = 1;
    return reducing;
  }
  // The reductions in flight, oldest first.
  auto begin() { return entries_.begin(); }
  auto end() { return entries_.end(); }

 private:
  const PartitionPlan& plan_;
  std::deque<Entry> entries_;
  int64_t in_flight_ = 0;  // elements
};

}  // namespace hoist::zero
