// The argument checks of Backend::DequantizeNf4 (kernels/backend.h), shared by the CPU backend and
// the CUDA entry so that both refuse the same calls with the same messages: kInvalidArgument
// "DequantizeNf4: <argument> ...". Header-only; host code.
#pragma once

#include <cmath>
#include <cstdint>
#include <string>

#include "core/status.h"

namespace hoist::kernels::nf4_args {

inline Status CheckDequantizeNf4(const char* op, const void* out, const uint8_t* codes,
                                 const float* absmax, int64_t n) {
  if (n < 0) {
    return InvalidArgumentError(std::string(op) + ": n is negative (" + std::to_string(n) + ")");
  }
  if (n == 0) return Status::Ok();
  if (out == nullptr) return InvalidArgumentError(std::string(op) + ": out is null");
  if (codes == nullptr) return InvalidArgumentError(std::string(op) + ": codes is null");
  if (absmax == nullptr) return InvalidArgumentError(std::string(op) + ": absmax is null");
  return Status::Ok();
}

inline Status CheckDequantizeNf4Absmax(const char* op, const float* out, const uint8_t* codes,
                                       const float* scales, float offset, int64_t n) {
  if (n < 0) {
    return InvalidArgumentError(std::string(op) + ": n is negative (" + std::to_string(n) + ")");
  }
  if (n == 0) return Status::Ok();
  if (out == nullptr) return InvalidArgumentError(std::string(op) + ": out is null");
  if (codes == nullptr) return InvalidArgumentError(std::string(op) + ": codes is null");
  if (scales == nullptr) return InvalidArgumentError(std::string(op) + ": scales is null");
  if (!std::isfinite(offset)) {
    return InvalidArgumentError(std::string(op) + ": offset is " + std::to_string(offset) +
                                ", not a finite number");
  }
  return Status::Ok();
}

}  // namespace hoist::kernels::nf4_args
