// The argument checks of Backend::Gemm and Backend::Dropout (kernels/backend.h), shared by the
// CPU backend and the CUDA entries so that both refuse the same calls with the same messages:
// kInvalidArgument "<op>: <argument> ...". Header-only; host code.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <limits>
#include <string>
#include <utility>

#include "core/dtype.h"
#include "core/status.h"

namespace hoist::kernels::lora_args {

// A matrix of Gemm as it is stored: `rows` rows of `cols` elements, `ld` apart.
struct StoredMatrix {
  int64_t rows = 0, cols = 0;
  // Bytes from the first element to one past the last (0 for an empty matrix).
  int64_t Bytes(int64_t ld, DType type) const {
    if (rows == 0 || cols == 0) return 0;
    return ((rows - 1) * ld + cols) * static_cast<int64_t>(DTypeSize(type));
  }
};

inline StoredMatrix StoredA(bool trans_a, int M, int K) {
  return trans_a ? StoredMatrix{K, M} : StoredMatrix{M, K};
}
inline StoredMatrix StoredB(bool trans_b, int N, int K) {
  return trans_b ? StoredMatrix{N, K} : StoredMatrix{K, N};
}

inline Status CheckLeadingDimension(const char* op, const char* name, int64_t ld,
                                    const char* row_name, int64_t row) {
  if (ld < row || ld < 0) {
    return InvalidArgumentError(std::string(op) + ": " + name + " (" + std::to_string(ld) +
                                ") is smaller than its stored rows' length " + row_name + " (" +
                                std::to_string(row) + ")");
  }
  // The BLAS libraries take leading dimensions as 32-bit integers.
  if (ld > std::numeric_limits<int32_t>::max()) {
    return InvalidArgumentError(std::string(op) + ": " + name + " (" + std::to_string(ld) +
                                ") exceeds the 32-bit range the BLAS takes");
  }
  return Status::Ok();
}

inline Status CheckGemm(const char* op, bool trans_a, bool trans_b, int M, int N, int K,
                        const void* A, int64_t lda, const void* B, int64_t ldb, const void* C,
                        int64_t ldc, DType type, DType c_type) {
  for (auto [name, value] : {std::pair<const char*, int>{"M", M}, {"N", N}, {"K", K}}) {
    if (value < 0) {
      return InvalidArgumentError(std::string(op) + ": " + name + " is negative (" +
                                  std::to_string(value) + ")");
    }
  }
  if (c_type != DType::kFloat32 && c_type != type) {
    return InvalidArgumentError(std::string(op) + ": c_type " + DTypeName(c_type) +
                                " is neither fp32 nor the operands' type " + DTypeName(type));
  }
  HOIST_RETURN_IF_ERROR(
      CheckLeadingDimension(op, "lda", lda, trans_a ? "M" : "K", trans_a ? M : K));
  HOIST_RETURN_IF_ERROR(
      CheckLeadingDimension(op, "ldb", ldb, trans_b ? "K" : "N", trans_b ? K : N));
  HOIST_RETURN_IF_ERROR(CheckLeadingDimension(op, "ldc", ldc, "N", N));
  const auto null = [op](const char* name) {
    return InvalidArgumentError(std::string(op) + ": " + name + " is null");
  };
  if (A == nullptr && int64_t{M} * K > 0) return null("A");
  if (B == nullptr && int64_t{K} * N > 0) return null("B");
  if (C == nullptr && int64_t{M} * N > 0) return null("C");
  return Status::Ok();
}

inline Status CheckDropout(const char* op, const void* out, const void* inp, int64_t n, float p) {
  if (n < 0) {
    return InvalidArgumentError(std::string(op) + ": n is negative (" + std::to_string(n) + ")");
  }
  if (!(p >= 0.0f && p < 1.0f)) {
    return InvalidArgumentError(std::string(op) + ": p (" + std::to_string(p) +
                                ") is not a drop probability in [0, 1)");
  }
  if (n == 0) return Status::Ok();
  if (out == nullptr) return InvalidArgumentError(std::string(op) + ": out is null");
  if (inp == nullptr) return InvalidArgumentError(std::string(op) + ": inp is null");
  return Status::Ok();
}

}  // namespace hoist::kernels::lora_args
