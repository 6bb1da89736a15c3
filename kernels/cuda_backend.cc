#include "kernels/cuda_backend.h"

#include <string>
#include <vector>

#include "core/cuda/cuda_device.h"
#include "core/cuda/cuda_status.h"
#include "kernels/cuda/accumulate.h"
#include "kernels/cuda/adamw.h"
#include "kernels/cuda/adamw8bit.h"
#include "kernels/cuda/attention.h"
#include "kernels/cuda/blas.h"
#include "kernels/cuda/cast.h"
#include "kernels/cuda/cross_entropy.h"
#include "kernels/cuda/elementwise.h"
#include "kernels/cuda/encoder.h"
#include "kernels/cuda/layernorm.h"
#include "kernels/cuda/llama.h"
#include "kernels/cuda/lora.h"
#include "kernels/cuda/matmul.h"
#include "kernels/cuda/nf4.h"

namespace hoist::kernels {
namespace {

cudaStream_t RawStream(const Stream& stream) {
  HOIST_CHECK(stream.kind() == DeviceKind::kCuda) << "a CUDA backend op on a host stream";
  return static_cast<const CudaStream&>(stream).get();
}

cudaMemcpyKind KindOf(CopyDirection direction) {
  switch (direction) {
    case CopyDirection::kHostToDevice: return cudaMemcpyHostToDevice;
    case CopyDirection::kDeviceToHost: return cudaMemcpyDeviceToHost;
    case CopyDirection::kDeviceToDevice: return cudaMemcpyDeviceToDevice;
    case CopyDirection::kHostToHost: break;
  }
  return cudaMemcpyHostToHost;
}

}  // namespace

StatusOr<std::unique_ptr<CudaBackend>> CudaBackend::Create(int ordinal, MemoryTracker* tracker) {
  const int gpus = CudaDeviceCount();
  if (ordinal < 0 || ordinal >= gpus) {
    return UnavailableError("CUDA GPU " + std::to_string(ordinal) + " is not visible (" +
                            std::to_string(gpus) + " GPUs, driver " + CudaDriverVersionString() +
                            "); check CUDA_VISIBLE_DEVICES, or train with --device cpu");
  }
  // The streams are created on the current device: make it this GPU first.
  HOIST_CUDA_RETURN_IF_ERROR(cudaSetDevice(ordinal));
  std::unique_ptr<CudaBackend> backend(new CudaBackend());
  HOIST_ASSIGN_OR_RETURN(backend->compute_, CudaStream::Create());
  HOIST_ASSIGN_OR_RETURN(backend->copy_, CudaStream::Create());
  HOIST_ASSIGN_OR_RETURN(backend->device_,
                         CudaCachingDevice::Open(ordinal, backend->compute_, tracker));
  HOIST_ASSIGN_OR_RETURN(
      backend->workspace_,
      backend->device_->Allocate(cuda::BackendWorkspaceBytes(), Category::kWorkspace));
  HOIST_ASSIGN_OR_RETURN(backend->blas_, cuda::BlasHandle::Create());
  return backend;
}

CudaBackend::~CudaBackend() {
  // Queued work may still use the workspace and the caller's buffers.
  if (!compute_.empty()) (void)compute_.Synchronize();
  if (!copy_.empty()) (void)copy_.Synchronize();
}

bool CudaBackend::IsDeviceMemory(const void* p) const {
  cudaPointerAttributes attributes{};
  if (cudaPointerGetAttributes(&attributes, p) != cudaSuccess) {
    (void)cudaGetLastError();  // a pointer the driver does not know: host memory
    return false;
  }
  return attributes.type == cudaMemoryTypeDevice || attributes.type == cudaMemoryTypeManaged;
}

StatusOr<std::unique_ptr<Event>> CudaBackend::CreateEvent() {
  HOIST_ASSIGN_OR_RETURN(CudaEvent event, CudaEvent::Create());
  return std::unique_ptr<Event>(std::make_unique<CudaEvent>(std::move(event)));
}

Status CudaBackend::Zero(void* dst, int64_t bytes, const Stream& stream) {
  if (bytes < 0) return InvalidArgumentError("Zero: negative length");
  if (bytes == 0) return Status::Ok();
  if (dst == nullptr) return InvalidArgumentError("Zero: dst is null");
  HOIST_CUDA_RETURN_IF_ERROR(
      cudaMemsetAsync(dst, 0, static_cast<size_t>(bytes), RawStream(stream)));
  return Status::Ok();
}

Status CudaBackend::Copy(void* dst, const void* src, int64_t bytes, CopyDirection direction,
                         const Stream& stream) {
  if (bytes < 0) return InvalidArgumentError("Copy: negative length");
  if (bytes == 0 || dst == src) return Status::Ok();
  if (dst == nullptr || src == nullptr) return InvalidArgumentError("Copy: dst or src is null");
  HOIST_CUDA_RETURN_IF_ERROR(
      cudaMemcpyAsync(dst, src, static_cast<size_t>(bytes), KindOf(direction), RawStream(stream)));
  return Status::Ok();
}

Status CudaBackend::Cast(void* dst, DType dst_type, const void* src, DType src_type, int64_t n,
                         const Stream& stream) {
  if (n == 0) return Status::Ok();
  if (dst == src && dst_type == src_type) return Status::Ok();
  return cuda::Cast(dst, dst_type, src, src_type, n, RawStream(stream));
}

Status CudaBackend::Accumulate(void* acc, DType acc_type, const void* add, DType add_type,
                               float scale, int64_t n, const Stream& stream) {
  if (n == 0) return Status::Ok();
  return cuda::Accumulate(acc, acc_type, add, add_type, scale, n, RawStream(stream));
}

Status CudaBackend::SumOfSquares(const void* x, DType type, float scale, int64_t n, double* sum,
                                 const Stream& stream) {
  // The partials are shared by every call: only the compute stream orders them.
  if (&stream != &compute_) {
    return InvalidArgumentError("SumOfSquares: runs on the backend's compute stream");
  }
  return cuda::ScaledSumOfSquares(x, type, scale, n, sum, workspace_.as<double>(),
                                  RawStream(stream));
}

Status CudaBackend::AdamW(std::span<const AdamWTensorRef> tensors, DType grad_type, DType copy_type,
                          const AdamWStepScalars& scalars, const Stream& stream) {
  std::vector<cuda::AdamWTensor> list;
  list.reserve(tensors.size());
  for (const AdamWTensorRef& t : tensors) {
    if (t.n == 0) continue;
    cuda::AdamWTensor& out = list.emplace_back();
    out.param = t.param;
    out.m = t.m;
    out.v = t.v;
    out.grad = t.grad;
    out.copy = t.copy;
    out.n = t.n;
    out.weight_decay = t.weight_decay;
  }
  if (list.empty()) return Status::Ok();
  cuda::AdamWStepParams params;
  params.lr = scalars.lr;
  params.beta1 = scalars.beta1;
  params.beta2 = scalars.beta2;
  params.eps = scalars.eps;
  params.grad_scale = scalars.grad_scale;
  params.step = scalars.step;
  return cuda::AdamWMultiTensor(list, grad_type, copy_type, params, RawStream(stream));
}

Status CudaBackend::AdamW8bit(std::span<const AdamW8bitTensorRef> tensors, DType grad_type,
                              DType copy_type, const AdamWStepScalars& scalars,
                              const Stream& stream) {
  std::vector<cuda::AdamW8bitTensor> list;
  list.reserve(tensors.size());
  for (const AdamW8bitTensorRef& t : tensors) {
    if (t.n == 0) continue;
    list.push_back(
        {t.param, t.m, t.v, t.absmax_m, t.absmax_v, t.grad, t.copy, t.n, t.weight_decay});
  }
  if (list.empty()) return Status::Ok();
  cuda::AdamWStepParams params;
  params.lr = scalars.lr;
  params.beta1 = scalars.beta1;
  params.beta2 = scalars.beta2;
  params.eps = scalars.eps;
  params.grad_scale = scalars.grad_scale;
  params.step = scalars.step;
  return cuda::AdamW8bitMultiTensor(list, grad_type, copy_type, params, RawStream(stream));
}

// The model's ops: kernels/cuda/ on the stream they are given (the kernels check their arguments
// and name the op). Products and the direct attention go through the one cuBLASLt handle, whose
// workspace only the compute stream may use.

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
                                     const void* weight, const void* bias, int N, int C, DType type,
                                     const Stream& stream) {
  return cuda::LayerNormForward(out, mean, rstd, inp, weight, bias, N, C, type, RawStream(stream));
}

Status CudaBackend::LayerNormBackward(void* dinp, float* dweight, float* dbias, const void* dout,
                                      const void* inp, const void* weight, const float* mean,
                                      const float* rstd, int N, int C, DType type,
                                      const Stream& stream) {
  return cuda::LayerNormBackward(dinp, dweight, dbias, dout, inp, weight, mean, rstd, N, C, type,
                                 RawStream(stream));
}

Status CudaBackend::MatmulForward(void* out, const void* inp, const void* weight, const void* bias,
                                  int N, int C, int OC, DType type, void* gelu_out,
                                  const Stream& stream) {
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

Status CudaBackend::AttentionForward(void* out, float* att, const void* qkv, void* workspace, int B,
                                     int T, int C, int NH, DType type, const Stream& stream) {
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

Status CudaBackend::ResidualForward(void* out, const void* a, const void* b, int64_t n, DType type,
                                    const Stream& stream) {
  return cuda::ResidualForward(out, a, b, n, type, RawStream(stream));
}

Status CudaBackend::ResidualBackward(void* da, void* db, const void* dout, int64_t n, DType type,
                                     const Stream& stream) {
  return cuda::ResidualBackward(da, db, dout, n, type, RawStream(stream));
}

Status CudaBackend::Scale(void* out, const void* inp, int64_t n, float scale, DType type,
                          const Stream& stream) {
  return cuda::Scale(out, inp, n, scale, type, RawStream(stream));
}

Status CudaBackend::SoftcapForward(void* x, int64_t n, float cap, DType type,
                                   const Stream& stream) {
  return cuda::SoftcapForward(x, n, cap, type, RawStream(stream));
}

Status CudaBackend::SoftmaxCrossEntropy(float* losses, void* dlogits, const void* logits,
                                        const int32_t* targets, float dloss, int N, int V, int Vp,
                                        float softcap, DType type, const Stream& stream) {
  return cuda::SoftmaxCrossEntropy(losses, dlogits, logits, targets, dloss, N, V, Vp, softcap, type,
                                   RawStream(stream));
}

// The Llama family's ops. The direct attention's products use the one BLAS handle: compute stream
// only, as the multi-head ones.
int64_t CudaBackend::GqaAttentionWorkspaceBytes(int B, int T, int NH, int NKV, int hd,
                                                DType type) const {
  return cuda::GqaAttentionWorkspaceBytes(B, T, NH, NKV, hd, type);
}
Status CudaBackend::GqaAttentionForward(void* out, float* att, const void* qkv, void* workspace,
                                        int B, int T, int NH, int NKV, int hd,
                                        const AttentionOptions& options, DType type,
                                        const Stream& stream) {
  HOIST_RETURN_IF_ERROR(OnComputeStream("GqaAttentionForward", stream));
  return cuda::GqaAttentionForward(*blas_, out, att, qkv, workspace, B, T, NH, NKV, hd, options,
                                   type, RawStream(stream));
}
Status CudaBackend::GqaAttentionBackward(void* dqkv, const void* dout, const void* qkv,
                                         const float* att, void* workspace, int B, int T, int NH,
                                         int NKV, int hd, const AttentionOptions& options,
                                         DType type, const Stream& stream) {
  HOIST_RETURN_IF_ERROR(OnComputeStream("GqaAttentionBackward", stream));
  return cuda::GqaAttentionBackward(*blas_, dqkv, dout, qkv, att, workspace, B, T, NH, NKV, hd,
                                    options, type, RawStream(stream));
}
int64_t CudaBackend::GqaTiledAttentionWorkspaceBytes(int B, int T, int NH) const {
  return cuda::TiledAttentionBackwardWorkspaceBytes(B, T, NH);
}
Status CudaBackend::GqaAttentionForwardTiled(void* out, float* lse, const void* qkv, int B, int T,
                                             int NH, int NKV, int hd,
                                             const AttentionOptions& options, DType type,
                                             const Stream& stream) {
  return cuda::GqaAttentionForwardTiled(out, lse, qkv, B, T, NH, NKV, hd, options, type,
                                        RawStream(stream));
}
Status CudaBackend::GqaAttentionBackwardTiled(void* dqkv, const void* dout, const void* qkv,
                                              const void* out, const float* lse, void* workspace,
                                              int B, int T, int NH, int NKV, int hd,
                                              const AttentionOptions& options, DType type,
                                              const Stream& stream) {
  return cuda::GqaAttentionBackwardTiled(dqkv, dout, qkv, out, lse, workspace, B, T, NH, NKV, hd,
                                         options, type, RawStream(stream));
}
Status CudaBackend::RmsNormForward(void* out, float* rstd, const void* inp, const void* weight,
                                   int N, int C, float eps, RmsNormStyle style, DType type,
                                   const Stream& stream) {
  return cuda::RmsNormForward(out, rstd, inp, weight, N, C, eps, style, type, RawStream(stream));
}
Status CudaBackend::RmsNormBackward(void* dinp, float* dweight, const void* dout, const void* inp,
                                    const void* weight, const float* rstd, int N, int C,
                                    RmsNormStyle style, DType type, const Stream& stream) {
  return cuda::RmsNormBackward(dinp, dweight, dout, inp, weight, rstd, N, C, style, type,
                               RawStream(stream));
}
Status CudaBackend::HeadRmsNormForward(void* out, float* rstd, const void* inp,
                                       const void* q_weight, const void* k_weight, int N, int NH,
                                       int NKV, int hd, float eps, RmsNormStyle style, DType type,
                                       const Stream& stream) {
  return cuda::HeadRmsNormForward(out, rstd, inp, q_weight, k_weight, N, NH, NKV, hd, eps, style,
                                  type, RawStream(stream));
}
Status CudaBackend::HeadRmsNormBackward(void* dinp, float* dq_weight, float* dk_weight,
                                        const void* dout, const void* inp, const void* q_weight,
                                        const void* k_weight, const float* rstd, int N, int NH,
                                        int NKV, int hd, RmsNormStyle style, DType type,
                                        const Stream& stream) {
  return cuda::HeadRmsNormBackward(dinp, dq_weight, dk_weight, dout, inp, q_weight, k_weight, rstd,
                                   N, NH, NKV, hd, style, type, RawStream(stream));
}
Status CudaBackend::RopeForward(void* qkv, const float* cos, const float* sin, int B, int T, int NH,
                                int NKV, int hd, DType type, const Stream& stream) {
  return cuda::RopeForward(qkv, cos, sin, B, T, NH, NKV, hd, type, RawStream(stream));
}
Status CudaBackend::RopeBackward(void* dqkv, const float* cos, const float* sin, int B, int T,
                                 int NH, int NKV, int hd, DType type, const Stream& stream) {
  return cuda::RopeBackward(dqkv, cos, sin, B, T, NH, NKV, hd, type, RawStream(stream));
}
Status CudaBackend::GluForward(void* out, const void* inp, int N, int I, GluActivation activation,
                               DType type, const Stream& stream) {
  return cuda::GluForward(out, inp, N, I, activation, type, RawStream(stream));
}
Status CudaBackend::GluBackward(void* dinp, const void* inp, const void* dout, int N, int I,
                                GluActivation activation, DType type, const Stream& stream) {
  return cuda::GluBackward(dinp, inp, dout, N, I, activation, type, RawStream(stream));
}

Status CudaBackend::Gemm(bool trans_a, bool trans_b, int M, int N, int K, float alpha,
                         const void* A, int64_t lda, const void* B, int64_t ldb, float beta,
                         void* C, int64_t ldc, DType type, DType c_type, const Stream& stream) {
  HOIST_RETURN_IF_ERROR(OnComputeStream("Gemm", stream));
  return cuda::Gemm(*blas_, trans_a, trans_b, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc, type,
                    c_type, RawStream(stream));
}

Status CudaBackend::Dropout(void* out, const void* inp, int64_t n, float p, uint64_t seed,
                            DType type, const Stream& stream) {
  return cuda::Dropout(out, inp, n, p, seed, type, RawStream(stream));
}

Status CudaBackend::DequantizeNf4(void* out, DType type, const uint8_t* codes, const float* absmax,
                                  int64_t n, const Stream& stream) {
  return cuda::DequantizeNf4(out, type, codes, absmax, n, RawStream(stream));
}

Status CudaBackend::DequantizeNf4Absmax(float* out, const uint8_t* codes, const float* scales,
                                        float offset, int64_t n, const Stream& stream) {
  return cuda::DequantizeNf4Absmax(out, codes, scales, offset, n, RawStream(stream));
}

Status CudaBackend::MatmulForwardNf4(void* out, const void* inp, const nf4::Matrix& weight,
                                     const void* bias, int N, int C, int OC, DType type,
                                     void* workspace, int64_t workspace_bytes,
                                     const Stream& stream) {
  HOIST_RETURN_IF_ERROR(OnComputeStream("MatmulForwardNf4", stream));
  return cuda::MatmulForwardNf4(*blas_, out, inp, weight, bias, N, C, OC, type, workspace,
                                workspace_bytes, RawStream(stream));
}

Status CudaBackend::MatmulBackwardNf4(void* dinp, const void* dout, const nf4::Matrix& weight,
                                      int N, int C, int OC, DType type, void* workspace,
                                      int64_t workspace_bytes, const Stream& stream) {
  HOIST_RETURN_IF_ERROR(OnComputeStream("MatmulBackwardNf4", stream));
  return cuda::MatmulBackwardNf4(*blas_, dinp, dout, weight, N, C, OC, type, workspace,
                                 workspace_bytes, RawStream(stream));
}

}  // namespace hoist::kernels
