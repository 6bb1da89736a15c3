// Accelerator: what a rank of `hoist train --device X` computes on. The trainer runs the same
// ZeRO engine and the same model on every device; an accelerator only supplies what differs: the
// backend whose ops they call (kernels/backend.h), how the engine's collectives reach the other
// ranks' devices, and whether the device's memory is the host's.
//
// Collectives: a communicator between the devices (NCCL between GPUs), or, where there is none
// (ranks sharing one GPU, a build without NCCL), the host-staged communicator over the job's
// host communicator (comm/staged_communicator.h), whose staging buffers come from `staging`; a
// device computing in host memory (the CPU) takes the job's host communicator itself.
//
// Every device is one: the CPU's (runtime/train/cpu_accelerator.h) and the GPU's
// (runtime/cuda/cuda_accelerator.h), which their libraries register by name
// (runtime/train/device_registry.h) for `hoist train --device`; tests pass CPU backends whose
// streams run on worker threads and that stand for a device of its own, so that the trainer's
// staging and ordering run without a GPU.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>

#include "comm/communicator.h"
#include "core/device.h"
#include "core/memory_tracker.h"
#include "core/status.h"
#include "kernels/backend.h"
#include "runtime/config/config.h"

namespace hoist::runtime {

// A device allocator's figures, as torch.cuda names them (bytes).
struct DeviceMemoryStats {
  int64_t allocated = 0;      // in blocks handed out
  int64_t reserved = 0;       // held from the device, cached blocks included
  int64_t max_allocated = 0;  // peaks since the start
  int64_t max_reserved = 0;
};

struct Accelerator {
  // The device the backend allocates from, where the backend does not own it (the CPU's); null
  // otherwise. Outlives the backend.
  std::unique_ptr<Device> memory;
  std::unique_ptr<kernels::Backend> backend;
  // Between the ranks' devices; null: host-staged through `staging` over the job's
  // communicator, or for a device computing in host memory the job's communicator itself.
  std::unique_ptr<comm::Communicator> collectives;
  // Host memory for the host-staged communicator's buffers (pinned for a GPU); null with
  // `collectives`, and for a device computing in host memory.
  std::unique_ptr<Device> staging;
  // Whether the backend computes in the host's own memory (the CPU): the trainer's host buffers
  // (the batch, the loaders') then count as its device's memory, the job's host communicator
  // reaches its buffers (no `collectives`, no `staging`), the job is checked against the node's
  // memory before anything is allocated, and the progress line names no device. False: a device
  // with memory of its own, which its allocator guards.
  bool in_host_memory = false;
  // The device allocator's figures for the end record; empty when it keeps none beyond the
  // tracker's.
  std::function<DeviceMemoryStats()> memory_stats;
};

// Builds a rank's accelerator: `comm` is the job's host communicator (collectives may be formed
// over it; every rank calls the factory), local_rank picks the device, allocations count in
// `tracker`. Failing on one rank is agreed by the caller.
using AcceleratorFactory = std::function<StatusOr<Accelerator>(
    const Config& config, comm::Communicator* comm, int local_rank, MemoryTracker* tracker)>;

}  // namespace hoist::runtime
