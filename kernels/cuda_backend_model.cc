// CudaBackend's model ops: kernels/cuda/ on the stream they are given (the kernels check their
// arguments and name the op). Products and the direct attention go through the backend's one
// cuBLASLt handle, whose workspace only the compute stream may use.
#include <string>

#include "core/cuda/stream.h"
#include "kernels/cuda/attention.h"
#include "kernels/cuda/blas.h"
#include "kernels/cuda/cross_entropy.h"
#include "kernels/cuda/elementwise.h"
#include "kernels/cuda/encoder.h"
#include "kernels/cuda/layernorm.h"
#include "kernels/cuda/matmul.h"
#include "kernels/cuda_backend.h"

namespace hoist::kernels {
namespace {

cudaStream_t RawStream(const Stream& stream) {
  HOIST_CHECK(stream.kind() == DeviceKind::kCuda) << "a CUDA backend op on a host stream";
  return static_cast<const CudaStream&>(stream).get();
}

}  // namespace

Status CudaBackend::OnComputeStream(const char* op, const Stream& stream) const {
  if (&stream == &compute_) return Status::Ok();
  return InvalidArgumentError(std::string(op) +
                              ": runs on the backend's compute stream only (its BLAS workspace "
                              "serves that stream)");
}

Status CudaBackend::EncoderForward(void* out, const int32_t* tokens, const void* wte,
                                   const void* wpe, int B, int T, int C, DType type,
                                   const Stream& stream) {
  return cuda::EncoderForward(out, tokens, wte, wpe, B, T, C, type, RawStream(stream));
}

Status CudaBackend::EncoderBackward(float* dwte, float* dwpe, const void* dout,
                                    const int32_t* tokens, int B, int T, int C, DType type,
                                    const Stream& stream) {
  return cuda::EncoderBackward(dwte, dwpe, dout, tokens, B, T, C, type, RawStream(stream));
}

Status CudaBackend::LayerNormForward(void* out, float* mean, float* rstd, const void* inp,
                                     const void* weight, const void* bias, int N, int C,
                                     DType type, const Stream& stream) {
  return cuda::LayerNormForward(out, mean, rstd, inp, weight, bias, N, C, type,
                                RawStream(stream));
}

Status CudaBackend::LayerNormBackward(void* dinp, float* dweight, float* dbias, const void* dout,
                                      const void* inp, const void* weight, const float* mean,
                                      const float* rstd, int N, int C, DType type,
                                      const Stream& stream) {
  return cuda::LayerNormBackward(dinp, dweight, dbias, dout, inp, weight, mean, rstd, N, C, type,
                                 RawStream(stream));
}

Status CudaBackend::MatmulForward(void* out, const void* inp, const void* weight,
                                  const void* bias, int N, int C, int OC, DType type,
                                  void* gelu_out, const Stream& stream) {
  HOIST_RETURN_IF_ERROR(OnComputeStream("MatmulForward", stream));
  return cuda::MatmulForward(*blas_, out, inp, weight, bias, N, C, OC, type, RawStream(stream),
                             gelu_out);
}

Status CudaBackend::MatmulBackward(void* dinp, float* dweight, float* dbias, const void* dout,
                                   const void* inp, const void* weight, int N, int C, int OC,
                                   DType type, const Stream& stream) {
  HOIST_RETURN_IF_ERROR(OnComputeStream("MatmulBackward", stream));
  return cuda::MatmulBackward(*blas_, dinp, dweight, dbias, dout, inp, weight, N, C, OC, type,
                              RawStream(stream));
}

int64_t CudaBackend::AttentionWorkspaceBytes(int B, int T, int C, int NH, DType type) const {
  return cuda::AttentionWorkspaceBytes(B, T, C, NH, type);
}

Status CudaBackend::AttentionForward(void* out, float* att, const void* qkv, void* workspace,
                                     int B, int T, int C, int NH, DType type,
                                     const Stream& stream) {
  HOIST_RETURN_IF_ERROR(OnComputeStream("AttentionForward", stream));
  return cuda::AttentionForward(*blas_, out, att, qkv, workspace, B, T, C, NH, type,
                                RawStream(stream));
}

Status CudaBackend::AttentionBackward(void* dqkv, const void* dout, const void* qkv,
                                      const float* att, void* workspace, int B, int T, int C,
                                      int NH, DType type, const Stream& stream) {
  HOIST_RETURN_IF_ERROR(OnComputeStream("AttentionBackward", stream));
  return cuda::AttentionBackward(*blas_, dqkv, dout, qkv, att, workspace, B, T, C, NH, type,
                                 RawStream(stream));
}

int64_t CudaBackend::TiledAttentionWorkspaceBytes(int B, int T, int NH) const {
  return cuda::TiledAttentionBackwardWorkspaceBytes(B, T, NH);
}

Status CudaBackend::AttentionForwardTiled(void* out, float* lse, const void* qkv, int B, int T,
                                          int C, int NH, DType type, const Stream& stream) {
  return cuda::AttentionForwardTiled(out, lse, qkv, B, T, C, NH, type, RawStream(stream));
}

Status CudaBackend::AttentionBackwardTiled(void* dqkv, const void* dout, const void* qkv,
                                           const void* out, const float* lse, void* workspace,
                                           int B, int T, int C, int NH, DType type,
                                           const Stream& stream) {
  return cuda::AttentionBackwardTiled(dqkv, dout, qkv, out, lse, workspace, B, T, C, NH, type,
                                      RawStream(stream));
}

Status CudaBackend::GeluForward(void* out, const void* inp, int64_t n, DType type,
                                const Stream& stream) {
  return cuda::GeluForward(out, inp, n, type, RawStream(stream));
}

Status CudaBackend::GeluBackward(void* dinp, const void* inp, const void* dout, int64_t n,
                                 DType type, const Stream& stream) {
  return cuda::GeluBackward(dinp, inp, dout, n, type, RawStream(stream));
}

Status CudaBackend::ResidualForward(void* out, const void* a, const void* b, int64_t n,
                                    DType type, const Stream& stream) {
  return cuda::ResidualForward(out, a, b, n, type, RawStream(stream));
}

Status CudaBackend::ResidualBackward(void* da, void* db, const void* dout, int64_t n, DType type,
                                     const Stream& stream) {
  return cuda::ResidualBackward(da, db, dout, n, type, RawStream(stream));
}

Status CudaBackend::SoftmaxCrossEntropy(float* losses, void* dlogits, const void* logits,
                                        const int32_t* targets, float dloss, int N, int V, int Vp,
                                        DType type, const Stream& stream) {
  return cuda::SoftmaxCrossEntropy(losses, dlogits, logits, targets, dloss, N, V, Vp, type,
                                   RawStream(stream));
}

}  // namespace hoist::kernels
