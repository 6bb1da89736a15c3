// DeviceFacts: what the runtime knows of a device's backend without opening it, so without the
// device: the device workspace its ops take, how its memory stands to the host's, what its
// allocator's numbers leave out. The memory estimate and the planner ask them for the device a
// job would train on, and a model counting its activations asks them for its workspace; a backend
// that is open gives the same numbers through its own methods (kernels/backend.h).
//
// Each backend registers its facts from a static initializer in a library linked whole
// (hoist_plugin): the CPU's (kernels/cpu_facts.cc) and the CUDA backend's
// (kernels/cuda_facts.cc), which are plain arithmetic and built into every hoist, with CUDA or
// without, so that a GPU job is estimated and planned where there is no GPU. Whether a build can
// also train on a device is the runtime's registry's (runtime/train/device_registry.h).
//
// The facts are immutable once registered; the functions below are thread-safe.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "core/device.h"
#include "core/dtype.h"

namespace hoist::kernels {

struct DeviceFacts {
  // What --device calls it: "cpu", "cuda".
  std::string name;
  DeviceKind kind = DeviceKind::kCpu;
  // Whether the backend computes in the host's own memory (the CPU): what the trainer keeps on
  // the host is then its device's memory (Place::kDevice), and nothing is staged between the
  // two. False for a device with memory of its own (Place::kDevice is then that memory).
  bool computes_in_host_memory = false;
  // Who must pin the host memory that the device's kernels read and write ("the CUDA driver");
  // empty where any host memory will do.
  std::string host_pinning_driver;
  // Device memory the backend allocates when it is created (Category::kWorkspace), in bytes.
  int64_t backend_workspace_bytes = 0;
  // The attention ops' device workspace in bytes, as the Backend methods of the same names
  // (AttentionWorkspaceBytes, ...) give it.
  std::function<int64_t(int B, int T, int C, int NH, DType type)> attention_workspace_bytes;
  std::function<int64_t(int B, int T, int NH)> tiled_attention_workspace_bytes;
  std::function<int64_t(int B, int T, int NH, int NKV, int hd, DType type)>
      gqa_attention_workspace_bytes;
  std::function<int64_t(int B, int T, int NH)> gqa_tiled_attention_workspace_bytes;
  // What the memory tracker does not see of a run on it, for the footnote of `hoist estimate`.
  std::string untracked_memory;
  // Why a build of hoist may lack the device's accelerator and how to get one that has it, for
  // the error of a --device this build cannot train on.
  std::string build_requirement;
};

// Adds `facts` to the process's list (a static initializer's call). A name or a kind registered
// twice is our bug (checked).
void RegisterDeviceFacts(DeviceFacts facts);
// The facts of the device called `name`; nullptr when no backend of that name is linked in.
const DeviceFacts* FindDeviceFacts(const std::string& name);
// The facts of the backends of `kind`; one is registered for every DeviceKind (checked).
const DeviceFacts& DeviceFactsOf(DeviceKind kind);
// The names of the registered devices, sorted.
std::vector<std::string> DeviceFactNames();

}  // namespace hoist::kernels
