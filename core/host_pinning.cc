#include "core/host_pinning.h"

#include <atomic>

namespace hoist {
namespace {

std::atomic<HostPinner*>& Installed() {
  // Constant-initialized: a pinner installed by another library's static initializer finds it
  // ready, whichever runs first.
  static constinit std::atomic<HostPinner*> installed{nullptr};
  return installed;
}

}  // namespace

HostPinner* SetHostPinner(HostPinner* pinner) { return Installed().exchange(pinner); }

HostPinner* InstalledHostPinner() { return Installed().load(); }

HostPinner* AvailableHostPinner() {
  HostPinner* pinner = Installed().load();
  return pinner != nullptr && pinner->Available() ? pinner : nullptr;
}

}  // namespace hoist
