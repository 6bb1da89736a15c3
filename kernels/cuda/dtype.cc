#include "kernels/cuda/dtype.h"

#include <string>

namespace hoist::kernels::cuda {

cudaDataType_t CudaDataType(DType type) {
  switch (type) {
    case DType::kFloat32: return CUDA_R_32F;
    case DType::kBFloat16: return CUDA_R_16BF;
    case DType::kFloat16: break;
  }
  return CUDA_R_16F;
}

Status CheckPointer(const char* op, const char* name, const void* p) {
  if (p != nullptr) return Status::Ok();
  return InvalidArgumentError(std::string(op) + ": " + name + " is null");
}

Status CheckPositive(const char* op, const char* name, int64_t value) {
  if (value > 0) return Status::Ok();
  return InvalidArgumentError(std::string(op) + ": " + name + " must be positive, got " +
                              std::to_string(value));
}

Status CheckStream(const char* op, cudaStream_t stream) {
  if (stream != nullptr) return Status::Ok();
  return InvalidArgumentError(std::string(op) +
                              ": the null (legacy default) stream is refused; pass a CudaStream");
}

}  // namespace hoist::kernels::cuda
