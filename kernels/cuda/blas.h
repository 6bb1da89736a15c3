// BlasHandle: the cuBLASLt handle and the workspace its matmuls may use, one per device and
// stream user. Created once; the matmul and attention entries take it by reference.
// Not thread-safe: one thread issues its work at a time.
#pragma once

#include <cublasLt.h>
#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include <cstdint>
#include <memory>

#include "core/status.h"

namespace hoist::kernels::cuda {

class BlasHandle {
 public:
  // On the calling thread's current device; `workspace_bytes` of device memory for cuBLASLt's
  // algorithms (32 MiB suits Hopper). No GPU is kUnavailable.
  static StatusOr<std::unique_ptr<BlasHandle>> Create(int64_t workspace_bytes = 32 << 20);
  ~BlasHandle();
  BlasHandle(const BlasHandle&) = delete;
  BlasHandle& operator=(const BlasHandle&) = delete;

  cublasLtHandle_t lt() const { return lt_; }
  cublasHandle_t blas() const { return blas_; }
  void* workspace() const { return workspace_; }
  int64_t workspace_bytes() const { return workspace_bytes_; }

 private:
  BlasHandle() = default;
  cublasLtHandle_t lt_ = nullptr;
  cublasHandle_t blas_ = nullptr;
  void* workspace_ = nullptr;
  int64_t workspace_bytes_ = 0;
};

// The Status for a failed cuBLAS call, naming the statement (the foreign-API rule).
Status CublasError(cublasStatus_t status, const char* what, const char* file, int line);

}  // namespace hoist::kernels::cuda

#define HOIST_CUBLAS_RETURN_IF_ERROR(expr)                                                         \
  do {                                                                                             \
    const cublasStatus_t hoist_cublas_status_ = (expr);                                            \
    if (hoist_cublas_status_ != CUBLAS_STATUS_SUCCESS) {                                           \
      return ::hoist::kernels::cuda::CublasError(hoist_cublas_status_, #expr, __FILE__, __LINE__); \
    }                                                                                              \
  } while (0)
