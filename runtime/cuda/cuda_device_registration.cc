// The GPU as a device ranks train on ("cuda", runtime/train/device_registry.h): its probe (a GPU is
// visible), what tells one GPU from another across the job (ranks sharing one cannot form an
// NCCL group), and the accelerator for the job (runtime/cuda/cuda_accelerator.h). Registered by a
// static initializer: this library is linked whole (hoist_plugin) into every binary that links
// it, the hoist binary among them.
#include <unistd.h>

#include <ostream>
#include <string>
#include <utility>
#include <vector>

#include "core/cuda/cuda_device.h"
#include "runtime/cuda/cuda_accelerator.h"
#include "runtime/train/device_registry.h"

namespace hoist::runtime {
namespace {

Status VisibleGpu(int /*local_rank*/) {
  if (CudaDeviceCount() == 0) {
    return UnavailableError("no CUDA GPU is visible (driver " + CudaDriverVersionString() +
                            "; check CUDA_VISIBLE_DEVICES)");
  }
  return Status::Ok();
}

// The host and the PCI bus id of the GPU this rank opens (local rank modulo the GPUs it sees),
// so that a launcher giving each rank its own CUDA_VISIBLE_DEVICES (every rank seeing "GPU 0")
// counts as one GPU per rank. Empty without a bus id: opening the GPU will say what is wrong.
std::string GpuIdentity(int local_rank) {
  const int gpus = CudaDeviceCount();
  if (gpus == 0) return "";
  const StatusOr<std::string> bus_id = CudaDevicePciBusId(local_rank % gpus);
  if (!bus_id.ok()) return "";
  char host[256] = {};
  gethostname(host, sizeof(host) - 1);
  return *bus_id + " on " + host;
}

// NCCL between the ranks' GPUs where each has its own and the build has NCCL; else the
// host-staged communicator, which rank 0 names as the slower path.
AcceleratorFactory GpuAccelerator(const DeviceUse& use, std::ostream* out) {
  CudaAcceleratorOptions options;
#if defined(HOIST_HAVE_NCCL)
  options.nccl = !use.shared;
#else
  options.nccl = false;
#endif
  if (out != nullptr && use.world_size > 1 && !options.nccl) {
    *out << "hoist: "
         << (use.shared ? "ranks share a GPU (NCCL needs one GPU per rank)"
                        : "this build of hoist has no NCCL")
         << ": the ranks' collectives go through host memory, slower than NCCL\n";
  }
  return CudaAccelerator(options);
}

// What `hoist report` shows of the GPUs: their number and names as the driver sees them (or why
// there are none), and the versions of the driver and of the runtime this hoist was built with.
std::vector<std::pair<std::string, std::string>> GpuReport() {
  std::string gpus;
  const int count = CudaDeviceCount();
  if (count == 0) {
    const std::string driver = CudaDriverVersionString();
    gpus = driver.rfind("none", 0) == 0
               ? driver  // already "none (<why>)"
               : "none (CUDA driver " + driver + " sees no GPU; check CUDA_VISIBLE_DEVICES)";
  } else {
    gpus = std::to_string(count) + ":";
    for (int i = 0; i < count; ++i) {
      const StatusOr<std::string> name = CudaDeviceName(i);
      gpus += (i == 0 ? " " : ", ") + std::to_string(i) + " " +
              (name.ok() ? *name : "(" + name.status().message() + ")");
    }
  }
  return {{"GPUs", gpus},
          {"CUDA runtime", CudaRuntimeVersionString()},
          {"CUDA driver", CudaDriverVersionString()}};
}

[[maybe_unused]] const bool kRegistered = [] {
  AcceleratorDevice gpu;
  gpu.name = "cuda";
  gpu.kind = DeviceKind::kCuda;
  gpu.noun = "GPU";
  gpu.preference = 100;
  gpu.probe = VisibleGpu;
  gpu.identity = GpuIdentity;
  gpu.factory = GpuAccelerator;
  gpu.report = GpuReport;
  return RegisterAcceleratorDevice(std::move(gpu));
}();

}  // namespace
}  // namespace hoist::runtime
