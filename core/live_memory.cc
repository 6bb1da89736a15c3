#include "core/live_memory.h"

#include <atomic>
#include <cstdint>
#include <map>
#include <mutex>

namespace hoist::live_memory {
namespace {

std::atomic<bool> enabled{false};

struct Record {
  std::mutex mu;
  struct Allocation {
    int64_t bytes;
    bool device;
  };
  std::map<uintptr_t, Allocation> allocations;  // by start
};

Record& TheRecord() {
  static Record* record = new Record();  // never destroyed: buffers may die at exit
  return *record;
}

}  // namespace

void Enable(bool on) {
  Record& record = TheRecord();
  std::lock_guard<std::mutex> lock(record.mu);
  if (!on) record.allocations.clear();
  enabled.store(on, std::memory_order_release);
}

bool Enabled() { return enabled.load(std::memory_order_acquire); }

void Add(const void* data, int64_t bytes, bool device) {
  if (!Enabled() || data == nullptr) return;
  Record& record = TheRecord();
  std::lock_guard<std::mutex> lock(record.mu);
  record.allocations[reinterpret_cast<uintptr_t>(data)] = {bytes, device};
}

void Remove(const void* data) {
  if (!Enabled() || data == nullptr) return;
  Record& record = TheRecord();
  std::lock_guard<std::mutex> lock(record.mu);
  record.allocations.erase(reinterpret_cast<uintptr_t>(data));
}

namespace {

// The recorded allocation that holds [p, p + bytes), or null.
const Record::Allocation* Find(Record& record, const void* p, int64_t bytes) {
  const auto at = reinterpret_cast<uintptr_t>(p);
  auto it = record.allocations.upper_bound(at);
  if (it == record.allocations.begin()) return nullptr;
  --it;
  const bool inside =
      at + static_cast<uintptr_t>(bytes) <= it->first + static_cast<uintptr_t>(it->second.bytes);
  return inside ? &it->second : nullptr;
}

}  // namespace

bool Contains(const void* p, int64_t bytes) {
  if (!Enabled()) return true;
  Record& record = TheRecord();
  std::lock_guard<std::mutex> lock(record.mu);
  return Find(record, p, bytes) != nullptr;
}

bool OnDevice(const void* p) {
  if (!Enabled()) return true;
  Record& record = TheRecord();
  std::lock_guard<std::mutex> lock(record.mu);
  const Record::Allocation* allocation = Find(record, p, 1);
  return allocation != nullptr && allocation->device;
}

}  // namespace hoist::live_memory
