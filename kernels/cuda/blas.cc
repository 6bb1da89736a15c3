#include "kernels/cuda/blas.h"

#include <cstdint>
#include <string>
#include <utility>

#include "core/cuda/cuda_status.h"

namespace hoist::kernels::cuda {

size_t LtPlanKeyHash::operator()(const LtPlanKey& key) const {
  // An FNV-1a-style mix of the fields, a 64-bit word at a time.
  uint64_t h = 14695981039346656037ull;
  const auto mix = [&h](int64_t value) {
    h ^= static_cast<uint64_t>(value);
    h *= 1099511628211ull;
  };
  for (int64_t value : {int64_t{key.trans_a},
                        int64_t{key.trans_b},
                        int64_t{key.m},
                        int64_t{key.n},
                        int64_t{key.k},
                        key.lda,
                        key.ldb,
                        key.ldd,
                        int64_t{key.ab_type},
                        int64_t{key.d_type},
                        int64_t{key.epilogue},
                        int64_t{key.has_bias},
                        int64_t{key.has_aux},
                        key.aux_ld,
                        int64_t{key.beta_nonzero},
                        int64_t{key.align_a},
                        int64_t{key.align_b},
                        int64_t{key.align_d},
                        int64_t{key.align_bias},
                        int64_t{key.align_aux}}) {
    mix(value);
  }
  return static_cast<size_t>(h);
}

StatusOr<std::unique_ptr<BlasHandle>> BlasHandle::Create(int64_t workspace_bytes) {
  if (workspace_bytes < 0) {
    return InvalidArgumentError("BlasHandle::Create: workspace_bytes must not be negative, got " +
                                std::to_string(workspace_bytes));
  }
  int devices = 0;
  const cudaError_t count_error = cudaGetDeviceCount(&devices);
  if (count_error != cudaSuccess) {
    return CudaError(count_error, "cudaGetDeviceCount(&devices)", __FILE__, __LINE__);
  }
  if (devices == 0) return UnavailableError("BlasHandle::Create: no CUDA GPU visible");
  // Built in place so that a failure half-way releases what was already made (the destructor
  // skips null members).
  std::unique_ptr<BlasHandle> handle(new BlasHandle());
  HOIST_CUBLAS_RETURN_IF_ERROR(cublasLtCreate(&handle->lt_));
  HOIST_CUBLAS_RETURN_IF_ERROR(cublasCreate(&handle->blas_));
  // cuBLAS's own products (the attention's batched GEMMs) ask for fp32 exactly as given: the
  // default math mode, never TF32, whatever NVIDIA_TF32_OVERRIDE the process inherits aside.
  HOIST_CUBLAS_RETURN_IF_ERROR(cublasSetMathMode(handle->blas_, CUBLAS_DEFAULT_MATH));
  if (workspace_bytes > 0) {
    HOIST_CUDA_RETURN_IF_ERROR(
        cudaMalloc(&handle->workspace_, static_cast<size_t>(workspace_bytes)));
    handle->workspace_bytes_ = workspace_bytes;
  }
  return handle;
}

BlasHandle::~BlasHandle() {
  // Work enqueued with the workspace may still be running on a caller's stream; cudaFree waits
  // for the device, so the memory is not reused under it.
  lt_plans_.clear();  // descriptors and layouts go before the handle that used them
  if (workspace_ != nullptr) cudaFree(workspace_);
  if (blas_ != nullptr) cublasDestroy(blas_);
  if (lt_ != nullptr) cublasLtDestroy(lt_);
}

Status CublasError(cublasStatus_t status, const char* what, const char* file, int line) {
  StatusCode code = StatusCode::kInternal;
  switch (status) {
    case CUBLAS_STATUS_ALLOC_FAILED: code = StatusCode::kResourceExhausted; break;
    case CUBLAS_STATUS_NOT_INITIALIZED:
      // The library found no usable GPU or driver.
      code = StatusCode::kUnavailable;
      break;
    default: break;
  }
  std::string message = std::string(what) + " failed: " + cublasGetStatusName(status) + " (" +
                        cublasGetStatusString(status) + ") at " + file + ":" + std::to_string(line);
  return Status(code, std::move(message));
}

}  // namespace hoist::kernels::cuda
