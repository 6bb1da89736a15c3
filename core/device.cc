#include "core/device.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <utility>

#include "core/host_stream.h"
#include "core/live_memory.h"

namespace hoist {

Buffer::Buffer(Buffer&& other) noexcept
    : owner_(std::exchange(other.owner_, nullptr)),
      data_(std::exchange(other.data_, nullptr)),
      bytes_(std::exchange(other.bytes_, 0)),
      category_(other.category_) {}

Buffer& Buffer::operator=(Buffer&& other) noexcept {
  if (this != &other) {
    Reset();
    owner_ = std::exchange(other.owner_, nullptr);
    data_ = std::exchange(other.data_, nullptr);
    bytes_ = std::exchange(other.bytes_, 0);
    category_ = other.category_;
  }
  return *this;
}

Buffer::~Buffer() { Reset(); }

void Buffer::Reset() {
  if (owner_ != nullptr) owner_->Release(*this);
  owner_ = nullptr;
  data_ = nullptr;
  bytes_ = 0;
}

Place Buffer::place() const {
  HOIST_CHECK(owner_ != nullptr) << "place() of an empty Buffer";
  return owner_->place();
}

StatusOr<Buffer> Device::Allocate(int64_t bytes, Category category) {
  HOIST_CHECK_GE(bytes, 0);
  // A zero-byte request still gets a distinct pointer so that empty() means "not allocated".
  void* data = RawAllocate(bytes > 0 ? bytes : 1);
  if (data == nullptr) {
    MemorySnapshot snap = tracker_->Snapshot();
    const std::optional<int64_t> free = FreeBytes();
    return ResourceExhaustedError(
        "cannot allocate " + FormatBytes(bytes) + " of " + CategoryName(category) + " on " +
        name() + " (" + PlaceName(place_) + " holds " + FormatBytes(snap.CurrentTotal(place_)) +
        " already" + (free ? ", " + FormatBytes(*free) + " free" : std::string()) + ")");
  }
  tracker_->Add(place_, category, bytes);
  live_memory::Add(data, bytes > 0 ? bytes : 1, place_ == Place::kDevice);
  return Buffer(this, data, bytes, category);
}

void Device::Release(Buffer& buffer) {
  live_memory::Remove(buffer.data_);
  RawFree(buffer.data_);
  tracker_->Remove(place_, buffer.category_, buffer.bytes_);
}

int64_t CpuDevice::held() const { return tracker()->Snapshot().CurrentTotal(place()); }

void* CpuDevice::RawAllocate(int64_t bytes) {
  if (capacity_bytes_ > 0 && held() + bytes > capacity_bytes_) return nullptr;
  constexpr int64_t kAlign = 64;
  int64_t rounded = (bytes + kAlign - 1) / kAlign * kAlign;
  void* data = std::aligned_alloc(kAlign, static_cast<size_t>(rounded));
  if (data != nullptr) std::memset(data, 0, static_cast<size_t>(rounded));
  return data;
}

void CpuDevice::RawFree(void* data) {
  const HostStream* served = served_.load();
  if (served == nullptr) {
    std::free(data);
    return;
  }
  // Nothing to report: a free cannot fail, and the stream's earlier errors are its users'.
  (void)served->Enqueue([data] {
    std::free(data);
    return Status::Ok();
  });
}

void CpuDevice::ServeStream(const HostStream* stream) { served_.store(stream); }

void CpuDevice::StopServing(const HostStream* stream) {
  const HostStream* expected = stream;
  served_.compare_exchange_strong(expected, nullptr);
}

std::optional<int64_t> CpuDevice::FreeBytes() const {
  std::optional<int64_t> host = HostMemAvailableBytes();
  if (capacity_bytes_ <= 0) return host;
  const int64_t left = std::max<int64_t>(0, capacity_bytes_ - held());
  return host ? std::min(*host, left) : left;
}

std::optional<int64_t> HostMemAvailableBytes(const std::string& path) {
  std::ifstream meminfo(path);
  std::string key, unit;
  int64_t kb = 0;
  while (meminfo >> key >> kb) {
    std::getline(meminfo, unit);
    if (key == "MemAvailable:") return kb * 1024;
  }
  return std::nullopt;
}

}  // namespace hoist
