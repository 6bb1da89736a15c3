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
  std::map<uintptr_t, int64_t> allocations;  // start -> bytes
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

void Add(const void* data, int64_t bytes) {
  if (!Enabled() || data == nullptr) return;
  Record& record = TheRecord();
  std::lock_guard<std::mutex> lock(record.mu);
  record.allocations[reinterpret_cast<uintptr_t>(data)] = bytes;
}

void Remove(const void* data) {
  if (!Enabled() || data == nullptr) return;
  Record& record = TheRecord();
  std::lock_guard<std::mutex> lock(record.mu);
  record.allocations.erase(reinterpret_cast<uintptr_t>(data));
}

bool Contains(const void* p, int64_t bytes) {
  if (!Enabled()) return true;
  const auto at = reinterpret_cast<uintptr_t>(p);
  Record& record = TheRecord();
  std::lock_guard<std::mutex> lock(record.mu);
  auto it = record.allocations.upper_bound(at);
  if (it == record.allocations.begin()) return false;
  --it;
  return at + static_cast<uintptr_t>(bytes) <= it->first + static_cast<uintptr_t>(it->second);
}

}  // namespace hoist::live_memory
