#include "runtime/cuda/cuda_adamw.h"

#include <cuda_runtime_api.h>

#include <cmath>
#include <string>

#include "core/cuda/cuda_status.h"
#include "core/cuda/event.h"
#include "kernels/cuda/reduce.h"
#if defined(HOIST_HAVE_NCCL)
#include "comm/nccl_communicator.h"
#endif

namespace hoist::runtime {
namespace {

namespace kc = ::hoist::kernels::cuda;

// The workspace: the norm's double result, then the per-block partial sums.
constexpr int64_t kPartialsOffset = 256;

}  // namespace

CudaAdamW::~CudaAdamW() = default;

StatusOr<std::unique_ptr<CudaAdamW>> CudaAdamW::Create(CudaGpt2Model* model,
                                                       const zero::AdamWParams& adam,
                                                       Device* device) {
  std::unique_ptr<CudaAdamW> optimizer(new CudaAdamW(model, adam));
  const ParamLayout& layout = model->layout();
  const int64_t total = layout.total;
  HOIST_ASSIGN_OR_RETURN(optimizer->moments_, device->Allocate(2 * total * int64_t{sizeof(float)},
                                                               Category::kOptimizer));
  HOIST_ASSIGN_OR_RETURN(
      optimizer->workspace_,
      device->Allocate(kPartialsOffset + kc::SumOfSquaresWorkspaceFloats() * int64_t{sizeof(float)},
                       Category::kWorkspace));
  // One tensor per (unit, tensor slice), each with its own weight decay.
  float* m = optimizer->moments_.as<float>();
  float* v = m + total;
  const size_t e = DTypeSize(model->compute_type());
  const bool copies = model->compute_type() != DType::kFloat32;
  for (int tensor = 0; tensor < kNumParamTensors; ++tensor) {
    const int layers = ParamLayout::PerBlock(tensor) ? layout.n_layer : 1;
    for (int l = 0; l < layers; ++l) {
      const int64_t offset = layout.Offset(tensor, l);
      kc::AdamWTensor t;
      t.param = model->params() + offset;
      t.m = m + offset;
      t.v = v + offset;
      t.grad = model->grads() + offset;
      t.copy = copies ? static_cast<char*>(model->compute_params()) + offset * e : nullptr;
      t.n = layout.unit_sizes[tensor];
      t.weight_decay = ParamLayout::Decayed(tensor) ? adam.weight_decay : 0.0f;
      optimizer->tensors_.push_back(t);
    }
  }
  return optimizer;
}

Status CudaAdamW::ReduceGradients(comm::Communicator* comm) {
  if (comm == nullptr || comm->world_size() == 1) return Status::Ok();
#if defined(HOIST_HAVE_NCCL)
  auto* nccl = dynamic_cast<comm::NcclCommunicator*>(comm);
  if (nccl == nullptr) {
    return FailedPreconditionError(
        "GPU training on " + std::to_string(comm->world_size()) +
        " ranks reduces its gradients with NCCL; the job's communicator is not NCCL "
        "(set comm.backend to nccl, or train with --device cpu)");
  }
  const CudaStream& compute = model_->stream();
  HOIST_ASSIGN_OR_RETURN(CudaEvent produced, CudaEvent::Create());
  HOIST_RETURN_IF_ERROR(produced.Record(compute));
  HOIST_RETURN_IF_ERROR(nccl->WaitFor(produced));
  pending_reduction_ = nccl->AllReduceAsync(model_->grads(), model_->layout().total,
                                            DType::kFloat32, comm::ReduceOp::kAvg);
  auto* nccl_work = dynamic_cast<comm::NcclWork*>(pending_reduction_.get());
  HOIST_CHECK(nccl_work != nullptr) << "an NcclCommunicator returned a foreign handle";
  return nccl_work->StreamWait(compute);
#else
  return UnimplementedError("GPU training on " + std::to_string(comm->world_size()) +
                            " ranks needs NCCL, which this build of hoist lacks");
#endif
}

StatusOr<CudaAdamW::Result> CudaAdamW::Step(float lr, float loss_scale, float max_norm) {
  // The reduction first, before anything that blocks the host on the compute stream (which
  // waits for it): NcclWork::Wait polls with comm.timeout_s and aborts NCCL when a peer never
  // comes, where a stream synchronisation, or the copy of the sum below into pageable memory,
  // would wait for ever.
  if (pending_reduction_ != nullptr) {
    const Status reduced = pending_reduction_->Wait();
    pending_reduction_.reset();
    HOIST_RETURN_IF_ERROR(reduced);
  }
  cudaStream_t stream = model_->stream().get();
  const float inv_scale = 1.0f / loss_scale;
  double* sum_device = workspace_.as<double>();
  float* partials = reinterpret_cast<float*>(workspace_.as<char>() + kPartialsOffset);
  HOIST_RETURN_IF_ERROR(
      kc::SumOfSquares({{model_->grads(), model_->layout().total}}, sum_device, partials, stream));
  double sum = 0;
  HOIST_CUDA_RETURN_IF_ERROR(
      cudaMemcpyAsync(&sum, sum_device, sizeof(double), cudaMemcpyDeviceToHost, stream));
  HOIST_RETURN_IF_ERROR(model_->stream().Synchronize());
  Result result;
  // The norm of the unscaled gradients: the scale comes out of the square root exactly.
  const double total = sum * static_cast<double>(inv_scale) * static_cast<double>(inv_scale);
  result.grad_norm = std::sqrt(total);
  result.overflow = !std::isfinite(total);
  if (result.overflow) return result;

  kc::AdamWStepParams p;
  p.lr = lr;
  p.beta1 = adam_.beta1;
  p.beta2 = adam_.beta2;
  p.eps = adam_.eps;
  p.grad_scale = zero::ClipScale(result.grad_norm, max_norm) * inv_scale;
  p.step = ++step_count_;
  HOIST_RETURN_IF_ERROR(
      kc::AdamWMultiTensor(tensors_, DType::kFloat32, model_->compute_type(), p, stream));
  return result;
}

Status CudaAdamW::ReadMoments(float* m, float* v) const {
  const int64_t total = model_->layout().total;
  const size_t bytes = static_cast<size_t>(total) * sizeof(float);
  cudaStream_t stream = model_->stream().get();
  HOIST_CUDA_RETURN_IF_ERROR(
      cudaMemcpyAsync(m, moments_.as<float>(), bytes, cudaMemcpyDeviceToHost, stream));
  HOIST_CUDA_RETURN_IF_ERROR(
      cudaMemcpyAsync(v, moments_.as<float>() + total, bytes, cudaMemcpyDeviceToHost, stream));
  return model_->stream().Synchronize();
}

Status CudaAdamW::LoadMoments(const float* m, const float* v, int64_t step_count) {
  const int64_t total = model_->layout().total;
  const size_t bytes = static_cast<size_t>(total) * sizeof(float);
  cudaStream_t stream = model_->stream().get();
  HOIST_CUDA_RETURN_IF_ERROR(
      cudaMemcpyAsync(moments_.as<float>(), m, bytes, cudaMemcpyHostToDevice, stream));
  HOIST_CUDA_RETURN_IF_ERROR(
      cudaMemcpyAsync(moments_.as<float>() + total, v, bytes, cudaMemcpyHostToDevice, stream));
  step_count_ = step_count;
  return model_->stream().Synchronize();
}

}  // namespace hoist::runtime
