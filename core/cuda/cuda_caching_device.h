// CudaCachingDevice: one GPU as a hoist::Device whose Buffers come from a CachingAllocator
// (core/caching_allocator.h) over cudaMalloc, so that a training step which frees and allocates
// the same sizes every iteration stops calling cudaMalloc/cudaFree (both synchronise the device)
// once the cache is warm. Plain device memory; never managed memory. CudaDevice
// (core/cuda/cuda_device.h) is the same GPU without a cache.
//
// Streams. The device serves one stream, given at Open:
//  - Allocate zero-fills the block with cudaMemsetAsync on the served stream and returns without
//    waiting, so the memory is ready for work issued to that stream afterwards. Work on any other
//    stream must first wait on an event recorded on the served stream after Allocate.
//  - Releasing a Buffer returns its block to the cache at once, and the next Allocate may hand it
//    out again. That is safe for work on the served stream, which runs in issue order. A Buffer
//    that another stream used must be released only once that stream's work is ordered before
//    the served stream (an event recorded there and waited on by the served stream); the trainer
//    does this with its events. Otherwise the next user's zero-fill may overwrite memory that is
//    still being read.
//
// Memory accounting. The MemoryTracker sees the bytes requested, by category, as for every
// Device (Device::Allocate). The cache's own figures come from this object: memory_allocated()
// (blocks handed out, rounded to 512 bytes), memory_reserved() (segments held from cudaMalloc,
// which is what cudaMemGetInfo sees gone). reserved - allocated is cached, not in use; it is not
// reported to the tracker, whose figures stay what the model needs, by category, and add up the
// same on a caching and a plain device. memory_reserved() is the figure to compare with
// cudaMemGetInfo.
//
// Thread-safe: Allocate and release may come from several threads (the cache has one mutex);
// each call makes this GPU current on the calling thread only for its duration. Allocate blocks
// only when a new segment is needed (cudaMalloc, and cudaFree of cached segments when that
// fails); EmptyCache blocks in cudaFree.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <memory>
#include <string>

#include "core/caching_allocator.h"
#include "core/cuda/stream.h"
#include "core/device.h"
#include "core/memory_tracker.h"
#include "core/status.h"

namespace hoist {

// What cudaMemGetInfo reports for one GPU, in bytes.
struct CudaMemInfo {
  int64_t free_bytes = 0;
  int64_t total_bytes = 0;
};

class CudaCachingDevice final : public Device {
 public:
  // Opens GPU `ordinal` to serve `stream`, which must be a stream on that GPU and must outlive
  // the device (the device borrows it). No GPU, or no usable driver, is kUnavailable with a
  // message that says what to do; an ordinal past the last GPU, or a stream on another GPU, is
  // kInvalidArgument. Opening allocates nothing. The device must outlive every Buffer it hands
  // out (checked when it is destroyed).
  static StatusOr<std::unique_ptr<CudaCachingDevice>> Open(
      int ordinal, const CudaStream& stream, MemoryTracker* tracker = &MemoryTracker::Global());

  // Gives every segment back with cudaFree, which waits for the device to finish its work.
  ~CudaCachingDevice() override;

  DeviceKind kind() const override { return DeviceKind::kCuda; }
  // "cuda:0 (NVIDIA H100 80GB HBM3) caching".
  std::string name() const override;
  int ordinal() const { return ordinal_; }
  const std::string& product_name() const { return product_name_; }
  // The served stream (borrowed).
  cudaStream_t stream() const { return stream_; }

  // torch.cuda's figures for this device, in bytes; see the header comment.
  int64_t memory_allocated() const { return allocator_->stats().allocated_bytes; }
  int64_t memory_reserved() const { return allocator_->stats().reserved_bytes; }
  int64_t max_memory_allocated() const { return allocator_->stats().peak_allocated_bytes; }
  int64_t max_memory_reserved() const { return allocator_->stats().peak_reserved_bytes; }
  // Restarts the two maxima from the current values (the tracker's peaks are not touched).
  void reset_peaks() { allocator_->ResetPeaks(); }
  CachingAllocatorStats stats() const { return allocator_->stats(); }

  // Gives every cached segment that holds no live block back to the GPU (cudaFree, which waits
  // for the device's work). For other processes, or before measuring with cudaMemGetInfo.
  void EmptyCache() { allocator_->EmptyCache(); }

  // cudaMemGetInfo for this GPU: free memory as the driver sees it (all processes, and this
  // cache's reserve counted as used).
  StatusOr<CudaMemInfo> MemGetInfo() const;
  // The driver's free memory plus this cache's blocks not in use.
  std::optional<int64_t> FreeBytes() const override;

 protected:
  void* RawAllocate(int64_t bytes) override;
  void RawFree(void* data) override;

 private:
  CudaCachingDevice(int ordinal, std::string product_name, cudaStream_t stream,
                    MemoryTracker* tracker);

  int ordinal_;
  std::string product_name_;
  cudaStream_t stream_;  // borrowed; never the legacy default stream
  // cudaMalloc/cudaFree on this GPU. Declared before the allocator, which frees its segments
  // through it when destroyed.
  std::unique_ptr<SegmentSource> source_;
  std::unique_ptr<CachingAllocator> allocator_;
};

}  // namespace hoist
