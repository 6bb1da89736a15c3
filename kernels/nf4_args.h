// The argument checks of Backend's NF4 ops (kernels/backend.h), shared by the CPU backend and
// the CUDA entry so that both refuse the same calls with the same messages: kInvalidArgument
// "DequantizeNf4: <argument> ...". Header-only; host code.
#pragma once

#include <cmath>
#include <cstdint>
#include <string>

#include "core/status.h"
#include "kernels/nf4.h"

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

// MatmulForwardNf4 / MatmulBackwardNf4's arguments: `out` is out or dinp, `in` is inp or dout.
inline Status CheckMatmulNf4(const char* op, const void* out, const void* in,
                             const nf4::Matrix& weight, int N, int C, int OC, const void* workspace,
                             int64_t workspace_bytes) {
  const auto fail = [&](const std::string& what) {
    return InvalidArgumentError(std::string(op) + ": " + what);
  };
  if (N <= 0 || C <= 0 || OC <= 0) {
    return fail("N, C and OC must be positive (got " + std::to_string(N) + ", " +
                std::to_string(C) + ", " + std::to_string(OC) + ")");
  }
  if (out == nullptr) return fail("the output is null");
  if (in == nullptr) return fail("the input is null");
  if (weight.codes == nullptr) return fail("the weight's codes are null");
  if (weight.absmax == nullptr &&
      (weight.absmax_codes == nullptr || weight.absmax_scales == nullptr)) {
    return fail("the weight has neither fp32 absmaxes nor 8-bit absmax codes and scales");
  }
  if (weight.absmax == nullptr && !std::isfinite(weight.absmax_offset)) {
    return fail("the weight's absmax offset is " + std::to_string(weight.absmax_offset) +
                ", not a finite number");
  }
  if (weight.first < 0) {
    return fail("the weight's first element is negative (" + std::to_string(weight.first) + ")");
  }
  if (workspace == nullptr) return fail("the workspace is null");
  const int64_t line = int64_t{4} * (C > OC ? C : OC);
  if (workspace_bytes < line) {
    return fail("a workspace of " + std::to_string(workspace_bytes) +
                " bytes holds no panel of this " + std::to_string(OC) + " x " + std::to_string(C) +
                " weight (it needs " + std::to_string(line) + "; nf4::WorkspaceBytes sizes it)");
  }
  return Status::Ok();
}

}  // namespace hoist::kernels::nf4_args
