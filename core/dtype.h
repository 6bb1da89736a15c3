// DType: the element types of the runtime's arrays, one enum for every layer (the config's
// precision, the engine's compute and wire types, the collectives, the CPU and CUDA kernels).
// 16-bit values are the IEEE fp16 and bfloat16 bit patterns, held as uint16_t on the host and as
// __half / __nv_bfloat16 on a GPU (the same bits).
#pragma once

#include <cstddef>
#include <cstdint>

namespace hoist {

enum class DType { kFloat32, kBFloat16, kFloat16 };

// Bytes per element.
constexpr size_t DTypeSize(DType type) { return type == DType::kFloat32 ? 4 : 2; }
// True for bf16 and fp16.
constexpr bool IsHalf(DType type) { return type != DType::kFloat32; }
// "fp32", "bf16", "fp16": DeepSpeed's spellings (communication_data_type), used in every message.
const char* DTypeName(DType type);

// Bytes of `n` elements of `type` at element offset `offset` of `base`.
inline void* ElementPtr(void* base, DType type, int64_t offset) {
  return static_cast<char*>(base) + offset * static_cast<int64_t>(DTypeSize(type));
}
inline const void* ElementPtr(const void* base, DType type, int64_t offset) {
  return static_cast<const char*>(base) + offset * static_cast<int64_t>(DTypeSize(type));
}

}  // namespace hoist
