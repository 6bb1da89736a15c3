#include "core/cuda/cuda_caching_device.h"

#include <string>
#include <utility>

#include "core/check.h"
#include "core/cuda/cuda_device.h"
#include "core/cuda/cuda_status.h"
#include "core/cuda/scoped_device.h"
#include "core/logging.h"

namespace hoist {
namespace {

// Segments for the cache: plain device memory on one GPU. Called under the allocator's lock.
class CudaSegmentSource final : public SegmentSource {
 public:
  explicit CudaSegmentSource(int ordinal) : ordinal_(ordinal) {}

  void* Allocate(int64_t bytes) override {
    ScopedCurrentDevice current;
    void* data = nullptr;
    cudaError_t error = current.SetDevice(ordinal_);
    if (error == cudaSuccess) error = cudaMalloc(&data, static_cast<size_t>(bytes));
    if (error == cudaSuccess) return data;
    Status status = CudaError(error, "cudaMalloc(&data, bytes)", __FILE__, __LINE__);
    // Out of memory is the allocator's to handle (empty the cache, retry, then report through
    // Device::Allocate); any other cause gets its own line so that it is not hidden behind that.
    if (status.code() != StatusCode::kResourceExhausted) HOIST_LOG(ERROR) << status.ToString();
    return nullptr;
  }

  void Free(void* p) override {
    ScopedCurrentDevice current;
    cudaError_t error = current.SetDevice(ordinal_);
    if (error == cudaSuccess) error = cudaFree(p);
    if (error != cudaSuccess) {
      HOIST_LOG(ERROR) << CudaError(error, "cudaFree(p)", __FILE__, __LINE__).ToString();
    }
  }

 private:
  int ordinal_;
};

}  // namespace

StatusOr<std::unique_ptr<CudaCachingDevice>> CudaCachingDevice::Open(int ordinal,
                                                                     const CudaStream& stream,
                                                                     MemoryTracker* tracker) {
  HOIST_CHECK_GE(ordinal, 0);
  HOIST_CHECK(tracker != nullptr);
  int count = 0;
  cudaError_t error = cudaGetDeviceCount(&count);
  if (error != cudaSuccess || count == 0) {
    std::string reason = error != cudaSuccess ? cudaGetErrorString(error) : "no device found";
    (void)cudaGetLastError();
    return UnavailableError("cannot open GPU " + std::to_string(ordinal) +
                            " with a caching allocator: no usable CUDA GPU (" + reason +
                            ", driver " + CudaDriverVersionString() +
                            "); run on a machine with a GPU and its driver, check "
                            "CUDA_VISIBLE_DEVICES, or train on the CPU device");
  }
  if (ordinal >= count) {
    return InvalidArgumentError("cannot open GPU " + std::to_string(ordinal) + ": only " +
                                std::to_string(count) + " visible (ordinals 0.." +
                                std::to_string(count - 1) + "; check CUDA_VISIBLE_DEVICES)");
  }
  // Checked here, after the no-GPU answer: without a GPU no stream can exist, and an empty one
  // is a bug (get() checks).
  cudaStream_t served = stream.get();
#if CUDART_VERSION >= 12080
  int stream_ordinal = -1;
  HOIST_CUDA_RETURN_IF_ERROR(cudaStreamGetDevice(served, &stream_ordinal));
  if (stream_ordinal != ordinal) {
    return InvalidArgumentError("cannot open GPU " + std::to_string(ordinal) +
                                " to serve a stream of GPU " + std::to_string(stream_ordinal) +
                                ": create the stream with GPU " + std::to_string(ordinal) +
                                " current");
  }
#endif
  cudaDeviceProp prop{};
  HOIST_CUDA_RETURN_IF_ERROR(cudaGetDeviceProperties(&prop, ordinal));
  return std::unique_ptr<CudaCachingDevice>(
      new CudaCachingDevice(ordinal, prop.name, served, tracker));
}

CudaCachingDevice::CudaCachingDevice(int ordinal, std::string product_name, cudaStream_t stream,
                                     MemoryTracker* tracker)
    : Device(Place::kDevice, tracker),
      ordinal_(ordinal),
      product_name_(std::move(product_name)),
      stream_(stream),
      source_(std::make_unique<CudaSegmentSource>(ordinal)),
      allocator_(std::make_unique<CachingAllocator>(source_.get())) {}

// The allocator goes first (it frees its segments through the source); the member order says so,
// and this reset makes it explicit.
CudaCachingDevice::~CudaCachingDevice() { allocator_.reset(); }

std::string CudaCachingDevice::name() const {
  return "cuda:" + std::to_string(ordinal_) + " (" + product_name_ + ") caching";
}

StatusOr<CudaMemInfo> CudaCachingDevice::MemGetInfo() const {
  ScopedCurrentDevice current;
  HOIST_CUDA_RETURN_IF_ERROR(current.SetDevice(ordinal_));
  size_t free_bytes = 0, total_bytes = 0;
  HOIST_CUDA_RETURN_IF_ERROR(cudaMemGetInfo(&free_bytes, &total_bytes));
  return CudaMemInfo{static_cast<int64_t>(free_bytes), static_cast<int64_t>(total_bytes)};
}

std::optional<int64_t> CudaCachingDevice::FreeBytes() const {
  StatusOr<CudaMemInfo> info = MemGetInfo();
  if (!info.ok()) return std::nullopt;
  return info->free_bytes + (memory_reserved() - memory_allocated());
}

void* CudaCachingDevice::RawAllocate(int64_t bytes) {
  void* data = allocator_->Allocate(bytes);
  if (data == nullptr) return nullptr;  // Device::Allocate reports it as out of memory
  ScopedCurrentDevice current;
  cudaError_t error = current.SetDevice(ordinal_);
  // On the served stream and not waited for: the block may have been used by earlier work on this
  // stream, which the fill then follows in order (header: "Streams").
  if (error == cudaSuccess) error = cudaMemsetAsync(data, 0, static_cast<size_t>(bytes), stream_);
  if (error != cudaSuccess) {
    allocator_->Free(data);
    HOIST_LOG(ERROR) << CudaError(error, "cudaMemsetAsync(data, 0, bytes, stream_)", __FILE__,
                                  __LINE__)
                            .ToString();
    return nullptr;
  }
  return data;
}

void CudaCachingDevice::RawFree(void* data) { allocator_->Free(data); }

}  // namespace hoist
