// The devices ranks can train on, as their libraries register them: the CPU
// (runtime/train/cpu_accelerator.cc) in every hoist, and the GPU
// (runtime/cuda/cuda_device_registration.cc) where the build has CUDA. Each registers from a static
// initializer in a library linked whole (hoist_plugin in CMakeLists.txt), so a binary trains on
// what it links and nothing above the device libraries names one. What the runtime knows of a
// device without training on it (its backend's workspace sizes, how its memory stands to the
// host's) is its facts, registered under the same name (kernels/device_facts.h), for every device
// the kernels have, built or not.
//
// `hoist train --device NAME` asks ChooseDevice for the device by name, or for "auto": the most
// preferred device every rank can use alone, at last the CPU.
//
// Registration ends before main; the functions below are thread-safe.
#pragma once

#include <functional>
#include <iosfwd>
#include <string>
#include <utility>
#include <vector>

#include "comm/communicator.h"
#include "core/registry.h"
#include "core/status.h"
#include "kernels/device_facts.h"
#include "runtime/train/accelerator.h"

namespace hoist::runtime {

// How the job's ranks use the device they were given.
struct DeviceUse {
  int world_size = 1;
  // Whether two ranks open the same device (more ranks on a node than it has): a communicator
  // between the devices may then be impossible.
  bool shared = false;
};

struct AcceleratorDevice {
  // What --device names; its facts (kernels/device_facts.h) are registered under the same name
  // and kind.
  std::string name;
  DeviceKind kind = DeviceKind::kCpu;
  // For messages: "GPU", "CPU".
  std::string noun;
  // --device auto tries the devices in decreasing preference; the CPU, at 0, takes any job.
  int preference = 0;
  // Local and cheap: why the rank of `local_rank` cannot open its device (no GPU visible), Ok
  // when it can. Empty: every rank always can, and choosing it takes no agreement between ranks.
  std::function<Status(int local_rank)> probe;
  // Local, asked where the probe passed: what tells the device this rank would open from
  // another's (its PCI bus id and host name); ranks with the same one share it. Empty, or an
  // empty string: not compared.
  std::function<std::string(int local_rank)> identity;
  // The factory of the ranks' accelerators for `use`. It may say on `out` (rank 0's; null on the
  // others) that a slower path was taken.
  std::function<AcceleratorFactory(const DeviceUse& use, std::ostream* out)> factory;
  // For `hoist report`: what this process sees of the device, as (key, value) rows (a GPU: how
  // many are visible and their names, the driver's and the runtime's versions). Empty: nothing
  // beyond its name.
  std::function<std::vector<std::pair<std::string, std::string>>()> report;
};

// Adds `device` to the process's list (a static initializer's call): false, and nothing added,
// when a device of its name is there. Inline, so that a device library registers without linking
// the runtime that reads the list.
inline bool RegisterAcceleratorDevice(AcceleratorDevice device) {
  return Registry<AcceleratorDevice>::Global().Add(std::move(device));
}

// The device this binary trains on by `name`, nullptr when it has none of that name.
const AcceleratorDevice* FindAcceleratorDevice(const std::string& name);
// The names of the devices this binary trains on, sorted.
std::vector<std::string> AcceleratorDeviceNames();
// What --device takes: "auto" and the name of every device there are facts for (those the
// binary trains on, and those another build of it would), sorted.
std::vector<std::string> DeviceChoices();

// The device a job's ranks train on, as ChooseDevice agreed it.
struct ChosenDevice {
  std::string name;
  DeviceKind kind = DeviceKind::kCpu;  // what the estimate and the planner count it as
  AcceleratorFactory factory;
};

// Collective over `comm` where the device needs it (a probe or an identity): every rank calls it
// with the same `name`, and all take the same device or all fail.
//   A device by name: every rank's, or on every rank the error of the ranks that cannot open it
//   (each rank's own reason), with how to train on the CPU instead. A name the binary has no
//   device for is kUnimplemented saying what the build lacks (a device there are facts for) or
//   kInvalidArgument, and names the devices it trains on.
//   "auto": the first device, by preference, that every rank can open without sharing it; rank 0
//   says on `out` why a device visible to it was passed over.
StatusOr<ChosenDevice> ChooseDevice(const std::string& name, int local_rank,
                                    comm::Communicator& comm, std::ostream* out);

}  // namespace hoist::runtime
