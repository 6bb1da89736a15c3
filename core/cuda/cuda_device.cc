#include "core/cuda/cuda_device.h"

#include <string>
#include <utility>

#include "core/check.h"
#include "core/cuda/cuda_status.h"
#include "core/cuda/scoped_device.h"
#include "core/logging.h"

namespace hoist {
namespace {

std::string FormatCudaVersion(int version) {
  return std::to_string(version / 1000) + "." + std::to_string(version % 1000 / 10);
}

// Device memory on `ordinal`, zero-filled before it is returned: the fill runs on `fill_stream`
// and is waited for here, so work on any other stream sees zeros without an event.
Status AllocateZeroed(int ordinal, const CudaStream& fill_stream, size_t bytes, void** data) {
  ScopedCurrentDevice current;
  HOIST_CUDA_RETURN_IF_ERROR(current.SetDevice(ordinal));
  // cudaMalloc aligns to at least 256 bytes, which covers Device's 64-byte promise.
  HOIST_CUDA_RETURN_IF_ERROR(cudaMalloc(data, bytes));
  cudaError_t error = cudaMemsetAsync(*data, 0, bytes, fill_stream.get());
  if (error == cudaSuccess) error = cudaStreamSynchronize(fill_stream.get());
  if (error != cudaSuccess) {
    (void)cudaFree(*data);
    *data = nullptr;
    return CudaError(error, "cudaMemsetAsync(*data, 0, bytes, fill_stream) and its sync", __FILE__,
                     __LINE__);
  }
  return Status::Ok();
}

}  // namespace

int CudaDeviceCount() {
  int count = 0;
  cudaError_t error = cudaGetDeviceCount(&count);
  if (error != cudaSuccess) {
    (void)cudaGetLastError();  // "no GPU" is an answer here, not an error for the next check
    return 0;
  }
  return count;
}

std::string CudaDriverVersionString() {
  int version = 0;
  cudaError_t error = cudaDriverGetVersion(&version);
  if (error != cudaSuccess) {
    (void)cudaGetLastError();
    return std::string("none (") + cudaGetErrorString(error) + ")";
  }
  if (version == 0) return "none (no CUDA driver installed)";
  return FormatCudaVersion(version);
}

std::string CudaRuntimeVersionString() {
  int version = 0;
  if (cudaRuntimeGetVersion(&version) != cudaSuccess) {
    (void)cudaGetLastError();
    return "unknown";
  }
  return FormatCudaVersion(version);
}

StatusOr<std::string> CudaDeviceName(int ordinal) {
  cudaDeviceProp prop{};
  HOIST_CUDA_RETURN_IF_ERROR(cudaGetDeviceProperties(&prop, ordinal));
  return std::string(prop.name);
}

StatusOr<std::string> CudaDevicePciBusId(int ordinal) {
  char id[32] = {};
  HOIST_CUDA_RETURN_IF_ERROR(cudaDeviceGetPCIBusId(id, static_cast<int>(sizeof(id)), ordinal));
  return std::string(id);
}

StatusOr<std::unique_ptr<CudaDevice>> CudaDevice::Open(int ordinal, MemoryTracker* tracker) {
  HOIST_CHECK_GE(ordinal, 0);
  HOIST_CHECK(tracker != nullptr);
  int count = 0;
  cudaError_t error = cudaGetDeviceCount(&count);
  if (error != cudaSuccess || count == 0) {
    std::string reason = error != cudaSuccess ? cudaGetErrorString(error) : "no device found";
    (void)cudaGetLastError();
    return UnavailableError("cannot open GPU " + std::to_string(ordinal) +
                            ": no usable CUDA GPU (" + reason + ", driver " +
                            CudaDriverVersionString() +
                            "); run on a machine with a GPU and its driver, check "
                            "CUDA_VISIBLE_DEVICES, or train on the CPU device");
  }
  if (ordinal >= count) {
    return InvalidArgumentError("cannot open GPU " + std::to_string(ordinal) + ": only " +
                                std::to_string(count) + " visible (ordinals 0.." +
                                std::to_string(count - 1) + "; check CUDA_VISIBLE_DEVICES)");
  }
  HOIST_CUDA_RETURN_IF_ERROR(cudaSetDevice(ordinal));
  cudaDeviceProp prop{};
  HOIST_CUDA_RETURN_IF_ERROR(cudaGetDeviceProperties(&prop, ordinal));
  HOIST_ASSIGN_OR_RETURN(CudaStream fill_stream, CudaStream::Create());
  return std::unique_ptr<CudaDevice>(new CudaDevice(ordinal, prop.name,
                                                    static_cast<int64_t>(prop.totalGlobalMem),
                                                    std::move(fill_stream), tracker));
}

CudaDevice::CudaDevice(int ordinal, std::string product_name, int64_t total_bytes,
                       CudaStream fill_stream, MemoryTracker* tracker)
    : Device(Place::kDevice, tracker),
      ordinal_(ordinal),
      product_name_(std::move(product_name)),
      total_bytes_(total_bytes),
      fill_stream_(std::move(fill_stream)) {}

std::string CudaDevice::name() const {
  return "cuda:" + std::to_string(ordinal_) + " (" + product_name_ + ")";
}

Status CudaDevice::MakeCurrent() const {
  HOIST_CUDA_RETURN_IF_ERROR(cudaSetDevice(ordinal_));
  return Status::Ok();
}

void* CudaDevice::RawAllocate(int64_t bytes) {
  void* data = nullptr;
  Status status = AllocateZeroed(ordinal_, fill_stream_, static_cast<size_t>(bytes), &data);
  if (status.ok()) return data;
  // Device::Allocate reports nullptr as out of memory; any other cause gets its own line so that
  // it is not hidden behind that message.
  if (status.code() != StatusCode::kResourceExhausted) HOIST_LOG(ERROR) << status.ToString();
  return nullptr;
}

void CudaDevice::RawFree(void* data) {
  ScopedCurrentDevice current;
  cudaError_t error = current.SetDevice(ordinal_);
  if (error == cudaSuccess) error = cudaFree(data);
  if (error != cudaSuccess) {
    HOIST_LOG(ERROR) << CudaError(error, "cudaFree(data)", __FILE__, __LINE__).ToString();
  }
}

}  // namespace hoist
