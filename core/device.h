// The device abstraction: where a training step's memory lives and who allocates it.
// A Device hands out Buffers: owning, movable, non-copyable handles whose bytes are counted in the
// MemoryTracker under (device place, category) from allocation until the Buffer dies. The CPU
// device is implemented here; the CUDA device, streams and events are in core/cuda/.
// Devices are thread-safe for Allocate; a Buffer is owned by one thread at a time.
#pragma once

#include <atomic>
#include <cstdint>
#include <optional>
#include <string>

#include "core/memory_tracker.h"
#include "core/status.h"

namespace hoist {

class Device;
class HostStream;

class Buffer {
 public:
  Buffer() = default;
  Buffer(Buffer&& other) noexcept;
  Buffer& operator=(Buffer&& other) noexcept;
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;
  ~Buffer();

  void* data() const { return data_; }
  template <typename T>
  T* as() const {
    return static_cast<T*>(data_);
  }
  int64_t bytes() const { return bytes_; }
  Category category() const { return category_; }
  Place place() const;
  bool empty() const { return data_ == nullptr; }
  // Gives the bytes back now (as the destructor would).
  void Reset();

 private:
  friend class Device;
  Buffer(Device* owner, void* data, int64_t bytes, Category category)
      : owner_(owner), data_(data), bytes_(bytes), category_(category) {}

  Device* owner_ = nullptr;
  void* data_ = nullptr;
  int64_t bytes_ = 0;
  Category category_ = Category::kWorkspace;
};

enum class DeviceKind { kCpu, kCuda };

class Device {
 public:
  explicit Device(Place place, MemoryTracker* tracker) : place_(place), tracker_(tracker) {}
  virtual ~Device() = default;
  Device(const Device&) = delete;
  Device& operator=(const Device&) = delete;

  virtual DeviceKind kind() const = 0;
  virtual std::string name() const = 0;
  Place place() const { return place_; }
  MemoryTracker* tracker() const { return tracker_; }

  // `bytes` of memory, zero-filled, aligned to 64 bytes, counted as `category`. A failure (the
  // device is full) is kResourceExhausted naming the request, what is held already and, where
  // the device knows it, what is free.
  StatusOr<Buffer> Allocate(int64_t bytes, Category category);
  // The bytes the device could still hand out, as far as it can tell (host memory: MemAvailable;
  // a GPU: the driver's free memory plus this allocator's cache); nullopt when unknown.
  virtual std::optional<int64_t> FreeBytes() const { return std::nullopt; }

 protected:
  virtual void* RawAllocate(int64_t bytes) = 0;  // nullptr when out of memory
  virtual void RawFree(void* data) = 0;

 private:
  friend class Buffer;
  void Release(Buffer& buffer);

  Place place_;
  MemoryTracker* tracker_;
};

// Plain (pageable) host memory. As the compute device of a CPU run its place is kDevice; as the
// home of host-side state it is kHost. With a capacity, allocations beyond `capacity_bytes` held
// in the place (as the tracker counts it) fail as a full device would: a CPU rank can stand in
// for an accelerator of that size.
class CpuDevice final : public Device {
 public:
  explicit CpuDevice(Place place = Place::kDevice,
                     MemoryTracker* tracker = &MemoryTracker::Global(), int64_t capacity_bytes = 0)
      : Device(place, tracker), capacity_bytes_(capacity_bytes) {}
  DeviceKind kind() const override { return DeviceKind::kCpu; }
  std::string name() const override { return "cpu"; }
  std::optional<int64_t> FreeBytes() const override;
  // 0: no capacity but the host's.
  int64_t capacity_bytes() const { return capacity_bytes_; }
  void set_capacity_bytes(int64_t capacity_bytes) { capacity_bytes_ = capacity_bytes; }

  // From now on the memory of a released Buffer goes back in the order of `stream`'s work, as a
  // GPU's caching allocator serving one stream hands a freed block only to that stream's later
  // work (core/cuda/cuda_caching_device.h): work enqueued on the stream before the release may
  // still use it. The tracker counts it gone at the release, as there. For a backend whose
  // streams run on worker threads (kernels/cpu_backend.h), so that its users free buffers as they
  // would on a GPU. The stream must outlive the setting; StopServing(stream) ends it (frees at
  // once again, the default) if that stream is still the one served.
  void ServeStream(const HostStream* stream);
  void StopServing(const HostStream* stream);

 protected:
  void* RawAllocate(int64_t bytes) override;
  void RawFree(void* data) override;

 private:
  int64_t held() const;
  int64_t capacity_bytes_;
  std::atomic<const HostStream*> served_{nullptr};
};

// MemAvailable from /proc/meminfo (or another file of its format) in bytes: what the kernel can
// give without swapping; nullopt where it cannot be read.
std::optional<int64_t> HostMemAvailableBytes(const std::string& meminfo = "/proc/meminfo");

}  // namespace hoist
