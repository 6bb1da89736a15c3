#include "core/dtype.h"

namespace hoist {

const char* DTypeName(DType type) {
  switch (type) {
    case DType::kFloat32: return "fp32";
    case DType::kBFloat16: return "bf16";
    case DType::kFloat16: return "fp16";
  }
  return "unknown";
}

}  // namespace hoist
