// CudaAdamW: the optimizer step of a CudaGpt2Model on its GPU — the global gradient norm,
// clipping, fp16's unscale and overflow check, and AdamW with decoupled weight decay on the
// decayed tensors (ParamLayout::Decayed), in one fused multi-tensor launch that also writes the
// parameters' compute-type copy. The same arithmetic as the CPU engine's step (zero/zero_engine.h:
// ClipScale, the unscaled norm, torch.optim.AdamW's update), so a GPU run follows a CPU run.
//
// Data parallelism: ReduceGradients averages the gradients over the ranks of an
// NcclCommunicator. The all-reduce runs on NCCL's comm stream after an event recorded on the
// model's compute stream, and the compute stream waits for it with another event: the host never
// waits for the reduction.
//
// The moments live on the same device as the model (Category::kOptimizer). Step waits for the
// norm (one double copied back) and otherwise only enqueues. Not thread-safe.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "comm/communicator.h"
#include "core/device.h"
#include "core/status.h"
#include "kernels/cuda/adamw.h"
#include "runtime/cuda/gpt2_cuda.h"
#include "zero/zero_engine.h"

namespace hoist::runtime {

class CudaAdamW {
 public:
  static StatusOr<std::unique_ptr<CudaAdamW>> Create(CudaGpt2Model* model,
                                                     const zero::AdamWParams& adam, Device* device);
  ~CudaAdamW();
  CudaAdamW(const CudaAdamW&) = delete;
  CudaAdamW& operator=(const CudaAdamW&) = delete;

  // Averages the model's gradients over `comm`'s ranks (an NcclCommunicator for more than one
  // rank: the buffers are device memory; a group of one needs nothing). Enqueues only.
  Status ReduceGradients(comm::Communicator* comm);

  struct Result {
    double grad_norm = 0;   // of the unscaled gradients, before clipping
    bool overflow = false;  // an inf or NaN: no update was made
  };
  // One step: the norm of the gradients divided by loss_scale, clipping to max_norm (0: off), and
  // AdamW at `lr` with step count step_count() + 1 unless the gradients overflowed.
  StatusOr<Result> Step(float lr, float loss_scale, float max_norm);

  int64_t step_count() const { return step_count_; }
  // The moments, copied out and in (flat unit-major, layout().total each; blocking), and the
  // step count, for checkpoints.
  Status ReadMoments(float* m, float* v) const;
  Status LoadMoments(const float* m, const float* v, int64_t step_count);

 private:
  CudaAdamW(CudaGpt2Model* model, const zero::AdamWParams& adam) : model_(model), adam_(adam) {}

  CudaGpt2Model* model_;
  zero::AdamWParams adam_;
  Buffer moments_;    // m then v, fp32, layout().total each
  Buffer workspace_;  // the norm's partial sums and its double result
  std::vector<kernels::cuda::AdamWTensor> tensors_;
  int64_t step_count_ = 0;
  // The gradients' all-reduce issued by ReduceGradients, until Step has waited for it.
  comm::CommHandle pending_reduction_;
};

}  // namespace hoist::runtime
