// Accelerator: what a rank of `hoist train --device X` computes on when X is not the CPU. The
// trainer runs the same ZeRO engine and the same model on every device; an accelerator only
// supplies what differs: the backend whose ops they call (kernels/backend.h) and how the
// engine's collectives reach the other ranks' devices.
//
// Collectives: a communicator between the devices (NCCL between GPUs), or, where there is none
// (ranks sharing one GPU, a build without NCCL), the host-staged communicator over the job's
// host communicator (comm/staged_communicator.h), whose staging buffers come from `staging`.
//
// The hoist binary passes the CUDA one (runtime/cuda/cuda_accelerator.h) for --device cuda;
// tests pass CPU backends whose streams run on worker threads, so that the trainer's accelerator
// path runs, ordering and all, without a GPU.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>

#include "comm/communicator.h"
#include "core/device.h"
#include "core/memory_tracker.h"
#include "core/status.h"
#include "kernels/backend.h"
#include "runtime/config.h"

namespace hoist::runtime {

// A device allocator's figures, as torch.cuda names them (bytes).
struct DeviceMemoryStats {
  int64_t allocated = 0;      // in blocks handed out
  int64_t reserved = 0;       // held from the device, cached blocks included
  int64_t max_allocated = 0;  // peaks since the start
  int64_t max_reserved = 0;
};

struct Accelerator {
  std::unique_ptr<kernels::Backend> backend;
  // Between the ranks' devices; null: host-staged over the job's communicator.
  std::unique_ptr<comm::Communicator> collectives;
  // Host memory for the host-staged communicator's buffers (pinned for a GPU); null with
  // `collectives`.
  std::unique_ptr<Device> staging;
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
