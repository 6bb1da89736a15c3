#include "kernels/device_facts.h"

#include <algorithm>
#include <utility>

#include "core/check.h"
#include "core/registry.h"

namespace hoist::kernels {
namespace {

Registry<DeviceFacts>& Facts() { return Registry<DeviceFacts>::Global(); }

}  // namespace

void RegisterDeviceFacts(DeviceFacts facts) {
  for (const DeviceFacts* other : Facts().Entries()) {
    HOIST_CHECK(other->kind != facts.kind)
        << "the devices " << other->name << " and " << facts.name << " register the same kind";
  }
  const std::string name = facts.name;
  HOIST_CHECK(Facts().Add(std::move(facts))) << "the device " << name << " registers twice";
}

const DeviceFacts* FindDeviceFacts(const std::string& name) { return Facts().Find(name); }

const DeviceFacts& DeviceFactsOf(DeviceKind kind) {
  const DeviceFacts* found = nullptr;
  for (const DeviceFacts* facts : Facts().Entries()) {
    if (facts->kind == kind) found = facts;
  }
  HOIST_CHECK(found != nullptr) << "no backend's facts are registered for device kind "
                                << static_cast<int>(kind)
                                << " (is its library linked whole? hoist_plugin)";
  return *found;
}

std::vector<std::string> DeviceFactNames() {
  std::vector<std::string> names;
  for (const DeviceFacts* facts : Facts().Entries()) names.push_back(facts->name);
  std::sort(names.begin(), names.end());
  return names;
}

}  // namespace hoist::kernels
