// CudaBackend: the Backend (kernels/backend.h) of a GPU rank, over kernels/cuda/. Its memory comes
// from a caching allocator (core/cuda/cuda_caching_device.h) that serves the compute stream; its
// copy stream is a second CUDA stream on the same GPU, for host<->device transfers that overlap
// the compute. Every op enqueues on the stream it is given and returns without waiting.
//
// Arithmetic against the CPU backend (its oracle): casts, accumulation and AdamW give the same
// bits (the kernels repeat the CPU twins' operations, without fused multiply-adds); the sum of
// squares is a double whose additions run in another order, so it agrees to rounding.
//
// Thread-safety as Backend's. The GPU is made current for the calling thread by Create; a
// backend is used from that thread.
#pragma once

#include <memory>
#include <string>

#include "core/cuda/cuda_caching_device.h"
#include "core/cuda/event.h"
#include "core/cuda/stream.h"
#include "kernels/backend.h"

namespace hoist::kernels {

namespace cuda {
class BlasHandle;
}  // namespace cuda

class CudaBackend final : public Backend {
 public:
  // GPU `ordinal`'s streams, allocator and workspace; allocations count in `tracker`. No GPU
  // there is kUnavailable.
  static StatusOr<std::unique_ptr<CudaBackend>> Create(int ordinal, MemoryTracker* tracker);
  ~CudaBackend() override;

  DeviceKind kind() const override { return DeviceKind::kCuda; }
  std::string name() const override { return device_->name(); }
  Device& device() override { return *device_; }
  CudaCachingDevice& caching_device() { return *device_; }

  const Stream& compute_stream() const override { return compute_; }
  const Stream& copy_stream() const override { return copy_; }
  StatusOr<std::unique_ptr<Event>> CreateEvent() override;
  bool IsDeviceMemory(const void* p) const override;
  bool OperatesOnHostMemory() const override { return false; }

  Status Zero(void* dst, int64_t bytes, const Stream& stream) override;
  Status Copy(void* dst, const void* src, int64_t bytes, CopyDirection direction,
              const Stream& stream) override;
  Status Cast(void* dst, DType dst_type, const void* src, DType src_type, int64_t n,
              const Stream& stream) override;
  Status Accumulate(void* acc, DType acc_type, const void* add, DType add_type, float scale,
                    int64_t n, const Stream& stream) override;
  Status SumOfSquares(const void* x, DType type, float scale, int64_t n, double* sum,
                      const Stream& stream) override;
  Status AdamW(std::span<const AdamWTensorRef> tensors, DType grad_type, DType copy_type,
               const AdamWStepScalars& scalars, const Stream& stream) override;
  Status AdamW8bit(std::span<const AdamW8bitTensorRef> tensors, DType grad_type, DType copy_type,
                   const AdamWStepScalars& scalars, const Stream& stream) override;

  // The model's ops (kernels/backend.h), over kernels/cuda/.
  Status EncoderForward(void* out, const int32_t* tokens, const void* wte, const void* wpe, int B,
                        int T, int C, DType type, const Stream& stream) override;
  Status EncoderBackward(float* dwte, float* dwpe, const void* dout, const int32_t* tokens, int B,
                         int T, int C, DType type, const Stream& stream) override;
  Status LayerNormForward(void* out, float* mean, float* rstd, const void* inp, const void* weight,
                          const void* bias, int N, int C, DType type,
                          const Stream& stream) override;
  Status LayerNormBackward(void* dinp, float* dweight, float* dbias, const void* dout,
                           const void* inp, const void* weight, const float* mean,
                           const float* rstd, int N, int C, DType type,
                           const Stream& stream) override;
  Status MatmulForward(void* out, const void* inp, const void* weight, const void* bias, int N,
                       int C, int OC, DType type, void* gelu_out, const Stream& stream) override;
  Status MatmulBackward(void* dinp, float* dweight, float* dbias, const void* dout, const void* inp,
                        const void* weight, int N, int C, int OC, DType type,
                        const Stream& stream) override;
  int64_t AttentionWorkspaceBytes(int B, int T, int C, int NH, DType type) const override;
  Status AttentionForward(void* out, float* att, const void* qkv, void* workspace, int B, int T,
                          int C, int NH, DType type, const Stream& stream) override;
  Status AttentionBackward(void* dqkv, const void* dout, const void* qkv, const float* att,
                           void* workspace, int B, int T, int C, int NH, DType type,
                           const Stream& stream) override;
  int64_t TiledAttentionWorkspaceBytes(int B, int T, int NH) const override;
  Status AttentionForwardTiled(void* out, float* lse, const void* qkv, int B, int T, int C, int NH,
                               DType type, const Stream& stream) override;
  Status AttentionBackwardTiled(void* dqkv, const void* dout, const void* qkv, const void* out,
                                const float* lse, void* workspace, int B, int T, int C, int NH,
                                DType type, const Stream& stream) override;
  int64_t GqaAttentionWorkspaceBytes(int B, int T, int NH, int NKV, int hd,
                                     DType type) const override;
  Status GqaAttentionForward(void* out, float* att, const void* qkv, void* workspace, int B, int T,
                             int NH, int NKV, int hd, const AttentionOptions& options, DType type,
                             const Stream& stream) override;
  Status GqaAttentionBackward(void* dqkv, const void* dout, const void* qkv, const float* att,
                              void* workspace, int B, int T, int NH, int NKV, int hd,
                              const AttentionOptions& options, DType type,
                              const Stream& stream) override;
  int64_t GqaTiledAttentionWorkspaceBytes(int B, int T, int NH) const override;
  Status GqaAttentionForwardTiled(void* out, float* lse, const void* qkv, int B, int T, int NH,
                                  int NKV, int hd, const AttentionOptions& options, DType type,
                                  const Stream& stream) override;
  Status GqaAttentionBackwardTiled(void* dqkv, const void* dout, const void* qkv, const void* out,
                                   const float* lse, void* workspace, int B, int T, int NH, int NKV,
                                   int hd, const AttentionOptions& options, DType type,
                                   const Stream& stream) override;
  Status RmsNormForward(void* out, float* rstd, const void* inp, const void* weight, int N, int C,
                        float eps, RmsNormStyle style, DType type, const Stream& stream) override;
  Status RmsNormBackward(void* dinp, float* dweight, const void* dout, const void* inp,
                         const void* weight, const float* rstd, int N, int C, RmsNormStyle style,
                         DType type, const Stream& stream) override;
  Status HeadRmsNormForward(void* out, float* rstd, const void* inp, const void* q_weight,
                            const void* k_weight, int N, int NH, int NKV, int hd, float eps,
                            RmsNormStyle style, DType type, const Stream& stream) override;
  Status HeadRmsNormBackward(void* dinp, float* dq_weight, float* dk_weight, const void* dout,
                             const void* inp, const void* q_weight, const void* k_weight,
                             const float* rstd, int N, int NH, int NKV, int hd, RmsNormStyle style,
                             DType type, const Stream& stream) override;
  Status RopeForward(void* qkv, const float* cos, const float* sin, int B, int T, int NH, int NKV,
                     int hd, DType type, const Stream& stream) override;
  Status RopeBackward(void* dqkv, const float* cos, const float* sin, int B, int T, int NH, int NKV,
                      int hd, DType type, const Stream& stream) override;
  Status GluForward(void* out, const void* inp, int N, int I, GluActivation activation, DType type,
                    const Stream& stream) override;
  Status GluBackward(void* dinp, const void* inp, const void* dout, int N, int I,
                     GluActivation activation, DType type, const Stream& stream) override;
  Status GeluForward(void* out, const void* inp, int64_t n, DType type,
                     const Stream& stream) override;
  Status GeluBackward(void* dinp, const void* inp, const void* dout, int64_t n, DType type,
                      const Stream& stream) override;
  Status ResidualForward(void* out, const void* a, const void* b, int64_t n, DType type,
                         const Stream& stream) override;
  Status ResidualBackward(void* da, void* db, const void* dout, int64_t n, DType type,
                          const Stream& stream) override;
  Status Scale(void* out, const void* inp, int64_t n, float scale, DType type,
               const Stream& stream) override;
  Status SoftcapForward(void* x, int64_t n, float cap, DType type, const Stream& stream) override;
  Status SoftmaxCrossEntropy(float* losses, void* dlogits, const void* logits,
                             const int32_t* targets, float dloss, int N, int V, int Vp,
                             float softcap, DType type, const Stream& stream) override;
  // The LoRA ops, over kernels/cuda/lora.h; Gemm on the compute stream only (cuBLAS's handle).
  Status Gemm(bool trans_a, bool trans_b, int M, int N, int K, float alpha, const void* A,
              int64_t lda, const void* B, int64_t ldb, float beta, void* C, int64_t ldc, DType type,
              DType c_type, const Stream& stream) override;
  Status Dropout(void* out, const void* inp, int64_t n, float p, uint64_t seed, DType type,
                 const Stream& stream) override;
  // NF4, over kernels/cuda/nf4.h.
  Status DequantizeNf4(void* out, DType type, const uint8_t* codes, const float* absmax, int64_t n,
                       const Stream& stream) override;
  Status DequantizeNf4Absmax(float* out, const uint8_t* codes, const float* scales, float offset,
                             int64_t n, const Stream& stream) override;
  Status MatmulForwardNf4(void* out, const void* inp, const nf4::Matrix& weight, const void* bias,
                          int N, int C, int OC, DType type, void* workspace,
                          int64_t workspace_bytes, const Stream& stream) override;
  Status MatmulBackwardNf4(void* dinp, const void* dout, const nf4::Matrix& weight, int N, int C,
                           int OC, DType type, void* workspace, int64_t workspace_bytes,
                           const Stream& stream) override;

 private:
  CudaBackend() = default;
  // kInvalidArgument naming `op` unless `stream` is the compute stream.
  Status OnComputeStream(const char* op, const Stream& stream) const;

  // Declared in the order they are built; destroyed in reverse: the streams outlive the
  // allocator that serves one of them, the allocator the workspace.
  CudaStream compute_, copy_;
  std::unique_ptr<CudaCachingDevice> device_;
  Buffer workspace_;  // the sum of squares' partials (compute stream only)
  // cuBLASLt for the products and the direct attention, on the compute stream only. Its 32 MiB
  // workspace is its own cudaMalloc, outside the tracker.
  std::unique_ptr<cuda::BlasHandle> blas_;
};

}  // namespace hoist::kernels
