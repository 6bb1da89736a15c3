// CpuBackend: the Backend (kernels/backend.h) of a CPU rank, over kernels/cpu/. Its arithmetic is
// the reference every other backend is tested against, op by op.
//
// With HostStream::Mode::kInline (the product's) every op runs on the calling thread at the call,
// with the OpenMP team inside; the streams cost nothing. With kThreaded (tests only) each of its
// two streams runs its ops on a worker thread of its own, so the engine's events and
// synchronisations are exercised as on an accelerator: a buffer read on the host, or by a
// collective, before the event that orders it is a data race ThreadSanitizer reports.
//
// Thread-safety as Backend's. The device must outlive the backend.
#pragma once

#include <initializer_list>
#include <string>

#include "core/host_stream.h"
#include "core/live_memory.h"
#include "kernels/backend.h"

namespace hoist::kernels {

// An array an op reads or writes where the contract wants the backend's device memory.
struct DeviceArrayArg {
  const char* name;
  const void* data;  // null: not given, not checked
  int64_t bytes;
};
// While live_memory (core/live_memory.h) is enabled, as tests enable it: kInvalidArgument naming
// `op` and the first array that no hoist allocator handed out (pageable host memory, which a GPU
// cannot read). Ok otherwise, and always when it is off.
Status CheckDeviceArrays(const char* op, std::initializer_list<DeviceArrayArg> arrays);

class CpuBackend final : public Backend {
 public:
  // With kThreaded and a CpuDevice, the device frees in the compute stream's order while the
  // backend lives (CpuDevice::ServeStream), as a GPU's caching allocator does.
  explicit CpuBackend(Device* device, HostStream::Mode mode = HostStream::Mode::kInline);
  ~CpuBackend() override;

  DeviceKind kind() const override { return DeviceKind::kCpu; }
  std::string name() const override;
  Device& device() override { return *device_; }
  HostStream::Mode mode() const { return compute_.mode(); }

  const Stream& compute_stream() const override { return compute_; }
  const Stream& copy_stream() const override { return copy_; }
  StatusOr<std::unique_ptr<Event>> CreateEvent() override;
  bool IsDeviceMemory(const void* p) const override;
  bool OperatesOnHostMemory() const override { return !live_memory::Enabled(); }

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

  // The model's ops (kernels/backend.h); 16-bit arrays through fp32 copies (cpu_backend_model.cc).
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
  // The LoRA ops (cpu_backend_lora.cc): 16-bit operands widened into fp32 copies for sgemm.
  Status Gemm(bool trans_a, bool trans_b, int M, int N, int K, float alpha, const void* A,
              int64_t lda, const void* B, int64_t ldb, float beta, void* C, int64_t ldc, DType type,
              DType c_type, const Stream& stream) override;
  Status Dropout(void* out, const void* inp, int64_t n, float p, uint64_t seed, DType type,
                 const Stream& stream) override;
  // NF4 (cpu_backend_nf4.cc): cpu::DequantizeNf4, rounded once to `type`.
  Status DequantizeNf4(void* out, DType type, const uint8_t* codes, const float* absmax, int64_t n,
                       const Stream& stream) override;
  Status DequantizeNf4Absmax(float* out, const uint8_t* codes, const float* scales, float offset,
                             int64_t n, const Stream& stream) override;
  // The 4-bit matmuls (cpu_backend_nf4.cc): panels dequantized by cpu::DequantizeNf4Rect, in bf16
  // multiplied by oneDNN where bf16 matmuls take it, else in fp32 by the BLAS's sgemm.
  Status MatmulForwardNf4(void* out, const void* inp, const nf4::Matrix& weight, const void* bias,
                          int N, int C, int OC, DType type, void* workspace,
                          int64_t workspace_bytes, const Stream& stream) override;
  Status MatmulBackwardNf4(void* dinp, const void* dout, const nf4::Matrix& weight, int N, int C,
                           int OC, DType type, void* workspace, int64_t workspace_bytes,
                           const Stream& stream) override;

 private:
  Device* device_;
  HostStream compute_, copy_;
  CpuDevice* served_ = nullptr;  // the device freeing in compute_'s order, if any
};

}  // namespace hoist::kernels
