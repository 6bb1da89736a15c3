// The CPU as an accelerator, one device among the others (runtime/train/device_registry.h registers
// it as "cpu", the device that takes any job): the CPU backend (kernels/cpu_backend.h) computing in
// the host's own memory, counted under Place::kDevice, its collectives the job's host
// communicator itself. What the trainer computes on unless it is given another device.
#pragma once

#include "runtime/train/accelerator.h"

namespace hoist::runtime {

// Never fails; every rank has a CPU.
AcceleratorFactory CpuAccelerator();

}  // namespace hoist::runtime
