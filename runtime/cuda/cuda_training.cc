#include "runtime/cuda/cuda_training.h"

#include <chrono>
#include <string>
#include <utility>

#include "comm/agree.h"
#include "core/cuda/cuda_caching_device.h"
#include "core/cuda/cuda_device.h"
#include "core/cuda/cuda_status.h"
#include "core/cuda/stream.h"
#include "core/logging.h"
#include "runtime/cuda/cuda_adamw.h"
#include "runtime/cuda/gpt2_cuda.h"
#if defined(HOIST_HAVE_NCCL)
#include "comm/nccl_communicator.h"
#endif

namespace hoist::runtime {
namespace {

namespace kc = ::hoist::kernels::cuda;

class CudaTraining final : public DeviceTraining {
 public:
  // Members are declared in the order they must be built and, reversed, destroyed: the stream
  // outlives the caching device that serves it, the device every buffer.
  CudaStream stream;
  std::unique_ptr<CudaCachingDevice> device;
  std::unique_ptr<comm::Communicator> nccl;  // null for one rank
  std::unique_ptr<CudaGpt2Model> model;
  std::unique_ptr<CudaAdamW> optimizer;
  comm::Communicator* host = nullptr;

  ~CudaTraining() override {
    // A pending gradient reduction is waited for with its deadline (the optimizer's handle)
    // before the stream: a peer that never comes must not hold the stream for ever. Then queued
    // work may still read the buffers: finish it before they go.
    optimizer.reset();
    if (!stream.empty()) (void)stream.Synchronize();
  }

  std::string name() const override { return device->name(); }
  int64_t num_parameters() const override { return model->layout().total; }
  Status InitializeWeights(uint64_t seed) override { return model->InitializeWeights(seed); }
  Status ZeroGrads() override { return model->ZeroGradients(); }
  StatusOr<float> Forward(const int32_t* inputs, const int32_t* targets, int B, int T,
                          float dloss) override {
    return model->Forward(inputs, targets, B, T, dloss);
  }
  Status Backward() override { return model->Backward(); }
  StatusOr<zero::StepResult> Step(float lr, float loss_scale, float max_norm) override {
    using Clock = std::chrono::steady_clock;
    const auto start = Clock::now();
    HOIST_RETURN_IF_ERROR(optimizer->ReduceGradients(nccl != nullptr ? nccl.get() : host));
    HOIST_ASSIGN_OR_RETURN(CudaAdamW::Result r, optimizer->Step(lr, loss_scale, max_norm));
    HOIST_RETURN_IF_ERROR(stream.Synchronize());
    zero::StepResult result;
    result.grad_norm = r.grad_norm;
    result.overflow = r.overflow;
    // The reduction, the norm and the update run back to back on the GPU; the host sees them as
    // one span, reported as the optimizer's.
    result.optimizer_s = std::chrono::duration<double>(Clock::now() - start).count();
    return result;
  }
  int64_t step_count() const override { return optimizer->step_count(); }
  DeviceMemoryStats memory_stats() const override {
    DeviceMemoryStats stats;
    stats.allocated = device->memory_allocated();
    stats.reserved = device->memory_reserved();
    stats.max_allocated = device->max_memory_allocated();
    stats.max_reserved = device->max_memory_reserved();
    return stats;
  }
  int64_t state_elements() const override { return model->layout().total; }
  Status ReadState(float* master, float* m, float* v) override {
    HOIST_RETURN_IF_ERROR(model->ReadParameters(master));
    return optimizer->ReadMoments(m, v);
  }
  Status RestoreState(const float* master, const float* m, const float* v,
                      int64_t step_count) override {
    HOIST_RETURN_IF_ERROR(model->LoadParameters(master));
    return optimizer->LoadMoments(m, v, step_count);
  }
};

Status OpenDevice(int local_rank, MemoryTracker* tracker, CudaTraining* training) {
  const int gpus = CudaDeviceCount();
  if (gpus == 0) {
    return UnavailableError("--device cuda: no CUDA GPU is visible (driver " +
                            CudaDriverVersionString() +
                            "); check CUDA_VISIBLE_DEVICES, or train with --device cpu");
  }
  const int ordinal = local_rank % gpus;
  // The stream is created on the current device: make it this rank's GPU first.
  HOIST_CUDA_RETURN_IF_ERROR(cudaSetDevice(ordinal));
  HOIST_ASSIGN_OR_RETURN(training->stream, CudaStream::Create());
  HOIST_ASSIGN_OR_RETURN(training->device,
                         CudaCachingDevice::Open(ordinal, training->stream, tracker));
  return Status::Ok();
}

Status BuildModel(const Config& config, CudaTraining* training) {
  const int B = static_cast<int>(config.train_micro_batch_size_per_gpu);
  HOIST_ASSIGN_OR_RETURN(
      training->model,
      CudaGpt2Model::Create(config.model, B, config.model.seq_len, config.precision(),
                            training->device.get(), training->stream));
  zero::AdamWParams adam;
  adam.beta1 = config.optimizer.beta1;
  adam.beta2 = config.optimizer.beta2;
  adam.eps = config.optimizer.eps;
  adam.weight_decay = config.optimizer.weight_decay;
  HOIST_ASSIGN_OR_RETURN(training->optimizer,
                         CudaAdamW::Create(training->model.get(), adam, training->device.get()));
  return Status::Ok();
}

}  // namespace

StatusOr<std::unique_ptr<DeviceTraining>> CreateCudaTraining(const Config& config,
                                                             comm::Communicator* comm,
                                                             int local_rank,
                                                             MemoryTracker* tracker) {
  HOIST_RETURN_IF_ERROR(SupportsDeviceTraining(config, "cuda"));
  auto training = std::make_unique<CudaTraining>();
  training->host = comm;
  // Opening the GPU can fail on one rank alone; every rank must know before the NCCL group is
  // formed, which would otherwise wait for that rank until comm.timeout_s.
  Status opened = OpenDevice(local_rank, tracker, training.get());
  if (comm != nullptr) opened = comm::AgreeOnStatus(*comm, opened);
  HOIST_RETURN_IF_ERROR(opened);
  if (comm != nullptr && comm->world_size() > 1) {
#if defined(HOIST_HAVE_NCCL)
    comm::NcclOptions options;
    options.local_rank = local_rank;
    options.timeout_s = config.comm.timeout_s;
    // Connecting can fail on one rank alone too; the others must not go on to the next
    // agreement below with one rank fewer.
    StatusOr<std::unique_ptr<comm::NcclCommunicator>> nccl =
        comm::NcclCommunicator::Create(comm, options);
    HOIST_RETURN_IF_ERROR(comm::AgreeOnStatus(*comm, nccl.ok() ? Status::Ok() : nccl.status()));
    training->nccl = std::move(nccl).value();
#else
    return UnimplementedError("--device cuda on " + std::to_string(comm->world_size()) +
                              " ranks needs NCCL, which this build of hoist lacks; rebuild with "
                              "NCCL or train with --device cpu");
#endif
  }
  // A rank out of device memory says so while every rank's NCCL group is still alive, so that
  // no rank tears its group down while the others wait in it.
  Status built = BuildModel(config, training.get());
  if (comm != nullptr) built = comm::AgreeOnStatus(*comm, built);
  HOIST_RETURN_IF_ERROR(built);
  if (comm != nullptr && comm->world_size() > 1 && comm->rank() == 0 &&
      config.communication_data_type != DType::kFloat32) {
    HOIST_LOG(INFO) << "communication_data_type " << DTypeName(config.communication_data_type)
                    << ": the GPU path reduces its fp32 gradients in fp32";
  }
  return std::unique_ptr<DeviceTraining>(std::move(training));
}

}  // namespace hoist::runtime
