// CudaGpt2Model: the GPT-2 of runtime/gpt2.h with every tensor on one GPU and every op a
// kernels/cuda/ kernel, for a training step that never leaves the device. Same parameters in the
// same flat unit-major order (ParamLayout), same initialisation, same forward and backward
// arithmetic as the CPU model, so the CPU run is its reference: in fp32 the losses agree to float
// rounding (cuBLAS runs true fp32, no TF32), in bf16/fp16 to the 16-bit type's tolerance.
//
// Parameters: an fp32 master copy and, for 16-bit compute, the compute-type copy the kernels
// read (the optimizer writes both, kernels/cuda/adamw.h). Gradients: fp32, accumulated over
// micro-batches (backward adds, as on the CPU). Activations: kept for backward in the compute
// type, sized once for the largest (B, T); layernorm statistics, attention probabilities (direct)
// or log-sum-exp rows (tiled) in fp32. Activation checkpointing is not supported here (Create
// refuses a policy other than none). Memory comes from `device` (a CudaDevice or the caching
// CudaCachingDevice), counted as params, grads, activations and workspace.
//
// Every call enqueues on `stream` and returns without waiting, except Forward with targets (it
// copies the per-position losses back to sum them on the host, as the CPU model sums them) and
// the host copies. Not thread-safe: one thread drives one model. The device, stream and
// tracker must outlive the model.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "core/cuda/stream.h"
#include "core/device.h"
#include "core/status.h"
#include "kernels/cuda/blas.h"
#include "kernels/cuda/dtype.h"
#include "runtime/config.h"
#include "runtime/gpt2.h"

namespace hoist::runtime {

class CudaGpt2Model {
 public:
  // Activations for micro-batches up to (max_B, max_T). `compute` is the type of the
  // activations and the parameters' compute copy.
  static StatusOr<std::unique_ptr<CudaGpt2Model>> Create(
      const ModelConfig& config, int max_B, int max_T, DType compute, Device* device,
      const CudaStream& stream, const ActivationCheckpointingConfig& checkpointing = {});
  ~CudaGpt2Model();
  CudaGpt2Model(const CudaGpt2Model&) = delete;
  CudaGpt2Model& operator=(const CudaGpt2Model&) = delete;

  // Device bytes Create allocates besides the parameters and gradients, for (max_B, max_T).
  static int64_t ActivationBytes(const ModelConfig& config, int max_B, int max_T, DType compute);

  // Copies fp32 weights (layout().total, flat unit-major, host memory) in, and writes the compute
  // copy. Blocks until the copy is done.
  Status LoadParameters(const float* host);
  // Copies the fp32 master weights out (blocks).
  Status ReadParameters(float* host) const;
  // Copies the fp32 gradients out (blocks).
  Status ReadGradients(float* host) const;
  // GPT-2's initialisation, the same values as Gpt2Model::InitializeWeights for `seed`.
  Status InitializeWeights(uint64_t seed);

  // Forward over host inputs (B,T). With targets, returns the mean cross-entropy over the B*T
  // positions (waits for it); with dloss > 0 it also leaves dloss * dLoss/dlogits for Backward.
  // Without targets it returns 0 and leaves the logits (logits()).
  StatusOr<float> Forward(const int32_t* inputs, const int32_t* targets, int B, int T,
                          float dloss = 0.0f);
  // Adds the last Forward's gradient (which had targets and dloss > 0) to grads().
  Status Backward();
  Status ZeroGradients();

  const ModelConfig& config() const { return config_; }
  const ParamLayout& layout() const { return layout_; }
  DType compute_type() const { return compute_; }
  const CudaStream& stream() const { return stream_; }
  // Device arrays of layout().total elements.
  float* params() const { return master_.as<float>(); }
  float* grads() const { return grads_.as<float>(); }
  // The compute-type copy of the parameters (params() itself in fp32).
  void* compute_params() const;
  // (B,T,Vp) logits of the last Forward without dloss, compute type, device memory.
  const void* logits() const { return logits_; }

 private:
  CudaGpt2Model(const ModelConfig& config, int max_B, int max_T, DType compute,
                const CudaStream& stream);
  Status Allocate(Device* device);
  // Points the activation and scratch arrays into the two buffers (null: only counts) and
  // returns the bytes each needs.
  void Carve(char* activations, char* scratch, int64_t* activation_bytes, int64_t* scratch_bytes);
  bool tiled() const { return config_.attention == AttentionKind::kTiled; }
  // The compute-type weights of `layer`'s slice of `tensor`, and its fp32 gradient.
  const void* W(int tensor, int layer = 0) const;
  float* G(int tensor, int layer = 0) const;
  // Zeroes `count` compute-type elements on the stream.
  Status Zero(void* p, int64_t count) const;

  ModelConfig config_;
  ParamLayout layout_;
  int max_B_, max_T_;
  DType compute_;
  const CudaStream& stream_;
  std::unique_ptr<kernels::cuda::BlasHandle> blas_;
  Buffer master_, copy_, grads_, activations_, scratch_;

  // Per layer, (L, ...) stacks: compute type unless marked fp32. Carved out of activations_.
  char* ln1_ = nullptr;        // (L,B,T,C)
  float* ln1_mean_ = nullptr;  // (L,B,T) fp32
  float* ln1_rstd_ = nullptr;  // (L,B,T) fp32
  char* qkv_ = nullptr;        // (L,B,T,3C)
  char* atty_ = nullptr;       // (L,B,T,C)
  float* att_ = nullptr;       // (L,B,NH,T,T) fp32, direct attention
  float* lse_ = nullptr;       // (L,B,NH,T) fp32, tiled attention
  char* residual2_ = nullptr;  // (L,B,T,C)
  char* ln2_ = nullptr;        // (L,B,T,C)
  float* ln2_mean_ = nullptr;  // (L,B,T) fp32
  float* ln2_rstd_ = nullptr;  // (L,B,T) fp32
  char* fch_ = nullptr;        // (L,B,T,4C)
  char* fch_gelu_ = nullptr;   // (L,B,T,4C)
  char* residual3_ = nullptr;  // (L,B,T,C)
  char* encoded_ = nullptr;    // (B,T,C)
  char* lnf_ = nullptr;        // (B,T,C)
  float* lnf_mean_ = nullptr;  // (B,T) fp32
  float* lnf_rstd_ = nullptr;  // (B,T) fp32
  char* logits_ = nullptr;     // (B,T,Vp); dlogits after a Forward with dloss
  float* losses_ = nullptr;    // (B,T) fp32
  int32_t* inputs_ = nullptr;  // (B,T)
  int32_t* targets_ = nullptr;
  // Backward scratch, carved out of scratch_ (compute type).
  char* dresidual_ = nullptr;  // (B,T,C); also each projection's output in forward
  char* dln_ = nullptr;        // (B,T,C)
  char* datty_ = nullptr;      // (B,T,C)
  char* dqkv_ = nullptr;       // (B,T,3C)
  char* dfch_ = nullptr;       // (B,T,4C)
  char* dfch_gelu_ = nullptr;  // (B,T,4C)
  void* attention_workspace_ = nullptr;
  std::vector<float> host_losses_;

  int last_B_ = 0, last_T_ = 0;
  bool backward_ready_ = false;
};

}  // namespace hoist::runtime
