// The GPU path of `hoist train`: a DeviceTraining (runtime/device_training.h) whose model,
// gradients and optimizer states all live on this rank's GPU — GPU local_rank modulo the
// visible GPUs — with the CudaGpt2Model, CudaAdamW and, between ranks, an NcclCommunicator formed
// over the job's host communicator. Memory comes from a caching allocator on the compute stream
// and is counted in the trainer's tracker under place kDevice.
#pragma once

#include <memory>

#include "comm/communicator.h"
#include "core/memory_tracker.h"
#include "core/status.h"
#include "runtime/config.h"
#include "runtime/device_training.h"

namespace hoist::runtime {

// A DeviceTrainingFactory. No visible GPU is kUnavailable saying so (and that --device cpu
// trains on the CPU); a job the GPU path cannot run is SupportsDeviceTraining's refusal.
StatusOr<std::unique_ptr<DeviceTraining>> CreateCudaTraining(const Config& config,
                                                             comm::Communicator* comm,
                                                             int local_rank,
                                                             MemoryTracker* tracker);

}  // namespace hoist::runtime
