#include "runtime/cuda/cuda_accelerator.h"

#include <string>
#include <utility>

#include "comm/agree.h"
#include "core/cuda/cuda_device.h"
#include "core/cuda/pinned_host_device.h"
#include "kernels/cuda_backend.h"
#if defined(HOIST_HAVE_NCCL)
#include "comm/nccl_communicator.h"
#endif

namespace hoist::runtime {
namespace {

// This rank's GPU, or why not: what the CUDA backend cannot run (named by its key), no GPU.
StatusOr<std::unique_ptr<kernels::CudaBackend>> OpenBackend(const Config& config, int local_rank,
                                                            MemoryTracker* tracker) {
  const int head_size = config.model.n_embd / config.model.n_head;
  if (config.model.attention == AttentionKind::kTiled && head_size > 128) {
    return UnimplementedError("model.attention: tiled attention with heads of " +
                              std::to_string(head_size) +
                              " channels is not available on --device cuda (its kernel takes at "
                              "most 128); use \"direct\", or train with --device cpu");
  }
  const int gpus = CudaDeviceCount();
  if (gpus == 0) {
    return UnavailableError("--device cuda: no CUDA GPU is visible (driver " +
                            CudaDriverVersionString() +
                            "); check CUDA_VISIBLE_DEVICES, or train with --device cpu");
  }
  return kernels::CudaBackend::Create(local_rank % gpus, tracker);
}

StatusOr<Accelerator> Open(const CudaAcceleratorOptions& options, const Config& config,
                           comm::Communicator* comm, int local_rank, MemoryTracker* tracker) {
  StatusOr<std::unique_ptr<kernels::CudaBackend>> backend =
      OpenBackend(config, local_rank, tracker);
  // Opening the GPU can fail on one rank alone; every rank must know before an NCCL group is
  // formed, which would otherwise wait for that rank until comm.timeout_s.
  if (comm != nullptr) HOIST_RETURN_IF_ERROR(comm::AgreeOnStatus(*comm, backend.status()));
  HOIST_RETURN_IF_ERROR(backend.status());
  Accelerator accelerator;
  CudaCachingDevice* cache = &(*backend)->caching_device();
  accelerator.memory_stats = [cache] {
    DeviceMemoryStats stats;
    stats.allocated = cache->memory_allocated();
    stats.reserved = cache->memory_reserved();
    stats.max_allocated = cache->max_memory_allocated();
    stats.max_reserved = cache->max_memory_reserved();
    return stats;
  };
  accelerator.backend = std::move(backend).value();
  if (comm != nullptr && comm->world_size() > 1 && options.nccl) {
#if defined(HOIST_HAVE_NCCL)
    comm::NcclOptions nccl;
    nccl.local_rank = local_rank;
    nccl.timeout_s = config.comm.timeout_s;
    StatusOr<std::unique_ptr<comm::NcclCommunicator>> connected =
        comm::NcclCommunicator::Create(comm, nccl);
    // Connecting can fail on one rank alone too; the others must not go on with one rank fewer.
    HOIST_RETURN_IF_ERROR(comm::AgreeOnStatus(*comm, connected.status()));
    accelerator.collectives = std::move(connected).value();
    return accelerator;
#endif
  }
  HOIST_ASSIGN_OR_RETURN(accelerator.staging, PinnedHostDevice::Open(tracker));
  return accelerator;
}

}  // namespace

AcceleratorFactory CudaAccelerator(const CudaAcceleratorOptions& options) {
  return [options](const Config& config, comm::Communicator* comm, int local_rank,
                   MemoryTracker* tracker) {
    return Open(options, config, comm, local_rank, tracker);
  };
}

}  // namespace hoist::runtime
