// BlasHandle: the cuBLASLt handle and the workspace its matmuls may use, one per device and
// stream user, with the cuBLASLt plans its matmuls have prepared. Created once; the matmul and
// attention entries take it by reference.
// Not thread-safe (the plan cache included): one thread issues its work at a time.
#pragma once

#include <cublasLt.h>
#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <unordered_map>

#include "core/status.h"

namespace hoist::kernels::cuda {

// What decides a cuBLASLt product's descriptors and algorithm (kernels/cuda/matmul.cu): the
// shape, the types, the epilogue, whether C is read, and the alignments of A, B, C = D, the bias
// and the aux array (the heuristic sees the pointers it is given, so a plan made for a 256-byte
// aligned bias is not handed a 16-byte aligned one). Types and enums are held as their integer
// values.
struct LtPlanKey {
  int trans_a = 0, trans_b = 0;
  int m = 0, n = 0, k = 0;
  int64_t lda = 0, ldb = 0, ldd = 0;
  int ab_type = 0, d_type = 0;
  int epilogue = 0;
  bool has_bias = false, has_aux = false;
  int64_t aux_ld = 0;
  bool beta_nonzero = false;
  uint32_t align_a = 0, align_b = 0, align_d = 0, align_bias = 0, align_aux = 0;

  // Spelled out: the .cu files are C++17, without defaulted comparisons.
  bool operator==(const LtPlanKey& o) const {
    return trans_a == o.trans_a && trans_b == o.trans_b && m == o.m && n == o.n && k == o.k &&
           lda == o.lda && ldb == o.ldb && ldd == o.ldd && ab_type == o.ab_type &&
           d_type == o.d_type && epilogue == o.epilogue && has_bias == o.has_bias &&
           has_aux == o.has_aux && aux_ld == o.aux_ld && beta_nonzero == o.beta_nonzero &&
           align_a == o.align_a && align_b == o.align_b && align_d == o.align_d &&
           align_bias == o.align_bias && align_aux == o.align_aux;
  }
};

struct LtPlanKeyHash {
  size_t operator()(const LtPlanKey& key) const;
};

struct LtDeleter {
  void operator()(cublasLtMatmulDescOpaque_t* p) const { cublasLtMatmulDescDestroy(p); }
  void operator()(cublasLtMatrixLayoutOpaque_t* p) const { cublasLtMatrixLayoutDestroy(p); }
  void operator()(cublasLtMatmulPreferenceOpaque_t* p) const { cublasLtMatmulPreferenceDestroy(p); }
};
using LtMatmulDesc = std::unique_ptr<cublasLtMatmulDescOpaque_t, LtDeleter>;
using LtMatrixLayout = std::unique_ptr<cublasLtMatrixLayoutOpaque_t, LtDeleter>;
using LtMatmulPreference = std::unique_ptr<cublasLtMatmulPreferenceOpaque_t, LtDeleter>;

// A product prepared once for its key: the descriptor (transposes, epilogue, aux leading
// dimension; the bias and aux pointers are set on it per call), the layouts and the algorithm
// the heuristic chose, or, where it found none, `unsupported` with the heuristic's status.
struct LtPlan {
  LtMatmulDesc desc;
  LtMatrixLayout a, b, d;
  cublasLtMatmulAlgo_t algo = {};
  bool unsupported = false;
  cublasStatus_t search_status = CUBLAS_STATUS_SUCCESS;
};

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
  // The plans prepared so far, owned by the handle (matmul.cu fills it and bounds its size).
  using LtPlans = std::unordered_map<LtPlanKey, std::unique_ptr<LtPlan>, LtPlanKeyHash>;
  LtPlans& lt_plans() { return lt_plans_; }

 private:
  BlasHandle() = default;
  cublasLtHandle_t lt_ = nullptr;
  cublasHandle_t blas_ = nullptr;
  void* workspace_ = nullptr;
  int64_t workspace_bytes_ = 0;
  LtPlans lt_plans_;
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
