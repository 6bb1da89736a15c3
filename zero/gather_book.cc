#include "zero/gather_book.h"

#include "core/check.h"
#include "zero/memory_estimate.h"

namespace hoist::zero {

GatherBook::GatherBook(const PartitionPlan& plan, const ZeroOptions& options,
                       std::vector<bool> on_nvme)
    : plan_(plan), options_(options), on_nvme_(std::move(on_nvme)) {
  const auto n = static_cast<size_t>(plan.num_units());
  if (on_nvme_.empty()) on_nvme_.assign(n, false);
  HOIST_CHECK_EQ(on_nvme_.size(), n);
  sharded_.resize(n);
  for (int u = 0; u < plan.num_units(); ++u) {
    sharded_[static_cast<size_t>(u)] =
        options.stage == 3 && !IsPersistentUnit(plan.unit(u), options);
  }
  gathering_.assign(n, false);
  holds_.assign(n, 0);
}

bool GatherBook::Hold(int unit) { return holds_[static_cast<size_t>(unit)]++ == 0; }

bool GatherBook::Unhold(int unit) {
  int& holds = holds_[static_cast<size_t>(unit)];
  HOIST_CHECK_GT(holds, 0) << "unit " << unit << " released but not acquired";
  return --holds == 0;
}

GatherBook::Prefetch GatherBook::PrefetchAction(int unit) const {
  const auto u = static_cast<size_t>(unit);
  if (!sharded_[u] || gathering_[u] || holds_[u] > 0) return Prefetch::kNothing;
  // A shard in the NVMe file is read into the (resident) staging buffers and gathered at
  // AcquireParams; one in host or device memory is gathered ahead, unless the device staging
  // still holds another's shard for a gather not yet waited for.
  if (on_nvme_[u]) return Prefetch::kReadAhead;
  if (staged_unit_ >= 0) return Prefetch::kNothing;
  if (!PrefetchGathers(plan_.unit(unit), live_, options_)) return Prefetch::kNothing;
  return Prefetch::kGather;
}

void GatherBook::Started(int unit) {
  const auto u = static_cast<size_t>(unit);
  HOIST_CHECK(!gathering_[u]) << "unit " << unit << " gathered twice";
  gathering_[u] = true;
  live_ += plan_.unit(unit).padded;
}

void GatherBook::Dropped(int unit) {
  const auto u = static_cast<size_t>(unit);
  HOIST_CHECK(gathering_[u]) << "unit " << unit << " dropped but not gathered";
  gathering_[u] = false;
  live_ -= plan_.unit(unit).padded;
}

std::vector<int> GatherBook::PrefetchedNotHeld() const {
  std::vector<int> units;
  for (int u = 0; u < plan_.num_units(); ++u) {
    if (gathering_[static_cast<size_t>(u)] && holds_[static_cast<size_t>(u)] == 0) {
      units.push_back(u);
    }
  }
  return units;
}

}  // namespace hoist::zero
