// Where a rank's optimizer states or parameter shards live: one enum for the config
// (zero_optimization.offload_optimizer / offload_param `device`), the planner, the engine and
// the estimate.
#pragma once

namespace hoist {

enum class Placement {
  kDevice,  // next to the model on the compute device: no offload (the config's "none")
  kHost,    // host memory (the config's "cpu")
  kNvme,    // a scratch file, streamed through host buffers (the config's "nvme")
};

// The config's spelling of a placement, DeepSpeed's offload `device`: "none", "cpu" or "nvme".
constexpr const char* OffloadDeviceName(Placement placement) {
  switch (placement) {
    case Placement::kDevice: return "none";
    case Placement::kHost: return "cpu";
    case Placement::kNvme: return "nvme";
  }
  return "unknown";
}

inline constexpr Placement kPlacements[] = {Placement::kDevice, Placement::kHost, Placement::kNvme};

}  // namespace hoist
