#include "runtime/train/cpu_accelerator.h"

#include <memory>

#include "kernels/cpu_backend.h"
#include "runtime/train/device_registry.h"

namespace hoist::runtime {

AcceleratorFactory CpuAccelerator() {
  return [](const Config&, comm::Communicator*, int, MemoryTracker* tracker) {
    Accelerator accelerator;
    accelerator.memory = std::make_unique<CpuDevice>(Place::kDevice, tracker);
    accelerator.backend = std::make_unique<kernels::CpuBackend>(accelerator.memory.get());
    accelerator.in_host_memory = true;
    return StatusOr<Accelerator>(std::move(accelerator));
  };
}

namespace {

// Registered like every other device, from this library linked whole (hoist_plugin).
[[maybe_unused]] const bool kRegistered = [] {
  AcceleratorDevice cpu;
  cpu.name = "cpu";
  cpu.kind = DeviceKind::kCpu;
  cpu.noun = "CPU";
  cpu.preference = 0;
  cpu.factory = [](const DeviceUse&, std::ostream*) { return CpuAccelerator(); };
  return RegisterAcceleratorDevice(std::move(cpu));
}();

}  // namespace
}  // namespace hoist::runtime
