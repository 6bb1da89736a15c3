// The GPU as `hoist train --device cuda` uses it: the CUDA backend (kernels/cuda_backend.h) of
// this rank's GPU (local_rank modulo the visible GPUs), under the same ZeRO engine and model as
// the CPU, with NCCL between the ranks' GPUs where each rank has a GPU of its own and the build
// has NCCL, and otherwise the host-staged communicator through pinned host memory (ranks sharing
// one GPU: slower, for tests and small jobs). Memory comes from the backend's caching allocator
// and is counted in the trainer's tracker under place kDevice. `hoist train --device cuda` finds
// it by name: runtime/cuda/cuda_device_registration.cc registers it
// (runtime/train/device_registry.h).
#pragma once

#include "runtime/train/accelerator.h"

namespace hoist::runtime {

struct CudaAcceleratorOptions {
  // Form an NCCL communicator between the ranks' GPUs (more than one rank, each on its own GPU,
  // a build with NCCL); false: the host-staged communicator.
  bool nccl = true;
};

// An AcceleratorFactory for `options`. No visible GPU is kUnavailable saying so (and that
// --device cpu trains on the CPU); what the GPU cannot run names its config key. Collective
// over `comm`: a rank that fails stops the others before any of them waits to connect to it.
AcceleratorFactory CudaAccelerator(const CudaAcceleratorOptions& options);

}  // namespace hoist::runtime
