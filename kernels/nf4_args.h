// The argument checks of Backend::DequantizeNf4 (kernels/backend.h), shared by the CPU backend and
// the CUDA entry so that both refuse the same calls with the same messages: kInvalidArgument
// "DequantizeNf4: <argument> ...". Header-only; host code.
#pragma once

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

}  // namespace hoist::kernels::nf4_args
