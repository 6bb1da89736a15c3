// Internal to CpuBackend's model ops (cpu_backend_model.cc, cpu_backend_llama.cc): argument
// checks and the fp32 views through which 16-bit arrays reach the fp32 CPU kernels.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <string>
#include <vector>

#include "kernels/cpu/convert.h"
#include "kernels/cpu_backend.h"

namespace hoist::kernels::cpu_backend_detail {

inline const HostStream& HostStreamOf(const Stream& stream) {
  HOIST_CHECK(stream.kind() == DeviceKind::kCpu) << "a CPU backend op on a device stream";
  return static_cast<const HostStream&>(stream);
}

inline Status NotNull(const char* op, const char* name, const void* p) {
  if (p != nullptr) return Status::Ok();
  return InvalidArgumentError(std::string(op) + ": " + name + " is null");
}

inline Status Positive(const char* op, const char* name, int64_t value) {
  if (value > 0) return Status::Ok();
  return InvalidArgumentError(std::string(op) + ": " + name + " must be positive, got " +
                              std::to_string(value));
}

inline Status NonNegative(const char* op, const char* name, int64_t value) {
  if (value >= 0) return Status::Ok();
  return InvalidArgumentError(std::string(op) + ": " + name + " is negative (" +
                              std::to_string(value) + ")");
}

// An array an op is given, with its size in bytes: a null one is refused unless optional.
constexpr bool kOptional = true;
struct Arg {
  const char* name;
  const void* data;
  int64_t bytes;
  bool optional = false;
};

// The arrays' nulls, then (while live_memory records allocations) their memory.
inline Status CheckArgs(const char* op, std::initializer_list<Arg> args) {
  for (const Arg& a : args) {
    if (!a.optional) HOIST_RETURN_IF_ERROR(NotNull(op, a.name, a.data));
  }
  for (const Arg& a : args) {
    HOIST_RETURN_IF_ERROR(CheckDeviceArrays(op, {{a.name, a.data, a.bytes}}));
  }
  return Status::Ok();
}

// How an op uses an array it is given in `type`.
enum class Use {
  kIn,     // read
  kOut,    // written whole, not read
  kInOut,  // read, added to, written back
};

// An fp32 view of n elements of `type` at p (null stays null): fp32 arrays are used in place; a
// 16-bit one is widened into a copy (kIn, kInOut) or given a zeroed scratch (kOut), which Finish
// rounds back into the array (kOut, kInOut).
class Wide {
 public:
  Wide(const void* p, DType type, int64_t n, Use use)
      : array_(const_cast<void*>(p)), type_(type), n_(n), use_(use) {
    if (p == nullptr || type == DType::kFloat32) return;
    copy_.resize(static_cast<size_t>(n));
    if (use != Use::kOut) cpu::ToFloat(p, type, copy_.data(), n);
  }
  float* get() {
    if (array_ == nullptr) return nullptr;
    return type_ == DType::kFloat32 ? static_cast<float*>(array_) : copy_.data();
  }
  void Finish() {
    if (array_ == nullptr || type_ == DType::kFloat32 || use_ == Use::kIn) return;
    cpu::FromFloat(copy_.data(), array_, type_, n_);
  }

 private:
  void* array_;
  DType type_;
  int64_t n_;
  Use use_;
  std::vector<float> copy_;
};

}  // namespace hoist::kernels::cpu_backend_detail
