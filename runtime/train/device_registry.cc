#include "runtime/train/device_registry.h"

#include <algorithm>
#include <ostream>
#include <string>
#include <utility>
#include <vector>

#include "comm/agree.h"
#include "comm/node.h"

namespace hoist::runtime {
namespace {

std::string Join(const std::vector<std::string>& names) {
  std::string joined;
  for (const std::string& name : names) joined += (joined.empty() ? "" : ", ") + name;
  return joined;
}

// The devices by decreasing preference, ties by name: the order auto tries them in.
std::vector<const AcceleratorDevice*> ByPreference() {
  std::vector<const AcceleratorDevice*> devices = Registry<AcceleratorDevice>::Global().Entries();
  std::sort(devices.begin(), devices.end(), [](const auto* a, const auto* b) {
    return a->preference != b->preference ? a->preference > b->preference : a->name < b->name;
  });
  return devices;
}

// The device that takes any job (no probe), least preferred: where the others send a job they
// cannot take. nullptr when none is linked in.
const AcceleratorDevice* Fallback() {
  const std::vector<const AcceleratorDevice*> devices = ByPreference();
  for (auto it = devices.rbegin(); it != devices.rend(); ++it) {
    if (!(*it)->probe) return *it;
  }
  return nullptr;
}

// "; --device cpu trains on the CPU", or nothing where `device` is the fallback itself.
std::string FallbackHint(const AcceleratorDevice* device) {
  const AcceleratorDevice* fallback = Fallback();
  if (fallback == nullptr || fallback == device) return "";
  return "; --device " + fallback->name + " trains on the " + fallback->noun;
}

ChosenDevice Chosen(const AcceleratorDevice& device, const DeviceUse& use, std::ostream* out) {
  ChosenDevice chosen;
  chosen.name = device.name;
  chosen.kind = device.kind;
  chosen.factory = device.factory(use, out);
  return chosen;
}

// Collective, for a device with a probe or an identity: this rank's readiness (its probe), and
// whether any two ranks would open the same device, agreed by every rank.
struct Readiness {
  Status local;  // this rank's probe
  Status everywhere;
  bool shared = false;
};

StatusOr<Readiness> Probe(const AcceleratorDevice& device, int local_rank,
                          comm::Communicator& comm) {
  Readiness readiness;
  readiness.local = device.probe ? device.probe(local_rank) : Status::Ok();
  std::string mine;
  // Without the device this rank takes part naming nothing.
  if (readiness.local.ok() && device.identity) mine = device.identity(local_rank);
  const Status sharing = comm::RefuseSharedResource(comm, mine, "the " + device.noun);
  if (!sharing.ok() && sharing.code() != StatusCode::kUnavailable) return sharing;
  // Only the ranks that share know it: all of them must, or some would take another path.
  readiness.shared = !comm::AgreeOnStatus(comm, sharing).ok();
  readiness.everywhere = comm::AgreeOnStatus(comm, readiness.local);
  return readiness;
}

StatusOr<ChosenDevice> ChooseNamed(const AcceleratorDevice& device, int local_rank,
                                   comm::Communicator& comm, std::ostream* out) {
  DeviceUse use;
  use.world_size = comm.world_size();
  if (!device.probe && !device.identity) return Chosen(device, use, out);
  HOIST_ASSIGN_OR_RETURN(const Readiness readiness, Probe(device, local_rank, comm));
  if (!readiness.everywhere.ok()) {
    return Status(
        readiness.everywhere.code(),
        "--device " + device.name + ": " + readiness.everywhere.message() + FallbackHint(&device));
  }
  use.shared = readiness.shared;
  return Chosen(device, use, out);
}

StatusOr<ChosenDevice> ChooseAuto(int local_rank, comm::Communicator& comm, std::ostream* out) {
  DeviceUse use;
  use.world_size = comm.world_size();
  // The devices this rank has that the job passed over, and why, said once its device is known.
  std::vector<std::pair<const AcceleratorDevice*, Status>> passed_over;
  for (const AcceleratorDevice* device : ByPreference()) {
    if (device->probe || device->identity) {
      HOIST_ASSIGN_OR_RETURN(const Readiness readiness, Probe(*device, local_rank, comm));
      Status why_not = readiness.everywhere;
      if (why_not.ok() && readiness.shared) {
        why_not = UnavailableError("ranks would share a " + device->noun +
                                   "; start at most as many ranks per node as it has " +
                                   device->noun + "s, or ask for --device " + device->name);
      }
      if (!why_not.ok()) {
        if (readiness.local.ok()) passed_over.emplace_back(device, why_not);
        continue;
      }
    }
    ChosenDevice chosen = Chosen(*device, use, out);
    if (out != nullptr) {
      for (const auto& [skipped, why] : passed_over) {
        *out << "hoist: a " << skipped->noun << " is visible, but this job trains on the "
             << device->noun << ": " << why.message() << "\n";
      }
    }
    return chosen;
  }
  return FailedPreconditionError("--device auto: no device of this build of hoist (" +
                                 Join(AcceleratorDeviceNames()) + ") can take the job");
}

}  // namespace

const AcceleratorDevice* FindAcceleratorDevice(const std::string& name) {
  return Registry<AcceleratorDevice>::Global().Find(name);
}

std::vector<std::string> AcceleratorDeviceNames() {
  std::vector<std::string> names;
  for (const AcceleratorDevice* device : Registry<AcceleratorDevice>::Global().Entries()) {
    names.push_back(device->name);
  }
  std::sort(names.begin(), names.end());
  return names;
}

std::vector<std::string> DeviceChoices() {
  std::vector<std::string> names = kernels::DeviceFactNames();
  for (const std::string& name : AcceleratorDeviceNames()) {
    if (std::find(names.begin(), names.end(), name) == names.end()) names.push_back(name);
  }
  names.push_back("auto");
  std::sort(names.begin(), names.end());
  return names;
}

StatusOr<ChosenDevice> ChooseDevice(const std::string& name, int local_rank,
                                    comm::Communicator& comm, std::ostream* out) {
  if (name == "auto") return ChooseAuto(local_rank, comm, out);
  if (const AcceleratorDevice* device = FindAcceleratorDevice(name)) {
    return ChooseNamed(*device, local_rank, comm, out);
  }
  // Every rank runs the same binary: each refuses alike, without a word to the others.
  const std::string trains_on = Join(AcceleratorDeviceNames());
  if (const kernels::DeviceFacts* facts = kernels::FindDeviceFacts(name)) {
    return UnimplementedError("--device " + name + ": " + facts->build_requirement +
                              FallbackHint(nullptr) + " (this build trains on: " + trains_on + ")");
  }
  return InvalidArgumentError("--device " + name +
                              ": no such device; this build of hoist trains on: " + trains_on +
                              ", and --device auto picks one of them");
}

}  // namespace hoist::runtime
