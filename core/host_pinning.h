// HostPinner: the hook through which a device library pins host memory with its driver, for the
// buffers that the device's copies and kernels reach asynchronously. offload's PinnedHostPool
// (offload/pinned_pool.h) asks the installed pinner first and falls back to mlock where there is
// none, or where it is not available on this machine or refuses. The CUDA library installs the
// CUDA driver's (core/cuda/cuda_host_pinning.cc) when it is linked into the binary; nothing else
// in hoist names a driver.
//
// A pinner is installed before the threads that allocate start (a static initializer, a test's
// set-up) and is never destroyed: memory it handed out is given back to it, whichever pinner is
// installed by then. The functions below are thread-safe; a pinner's methods must be too.
#pragma once

#include <cstdint>
#include <string>

namespace hoist {

class HostPinner {
 public:
  virtual ~HostPinner() = default;

  // Who pins, for messages: "the CUDA driver".
  virtual std::string name() const = 0;
  // Whether it can pin on this machine (its driver and a device are there). Cheap after the
  // first call.
  virtual bool Available() const = 0;
  // `bytes` (a multiple of 4096) of host memory, page-aligned and pinned, or nullptr where the
  // driver refuses (the caller falls back to pages of its own).
  virtual void* Allocate(int64_t bytes) = 0;
  // Gives back memory that Allocate returned.
  virtual void Free(void* data) = 0;
};

// Installs `pinner` (nullptr: none) and returns the one it replaces. Not owned.
HostPinner* SetHostPinner(HostPinner* pinner);
// The installed pinner, nullptr when there is none.
HostPinner* InstalledHostPinner();
// The installed pinner if it is available on this machine, else nullptr.
HostPinner* AvailableHostPinner();

// Installs a pinner for a scope (a test), and puts the previous one back after.
class ScopedHostPinner {
 public:
  explicit ScopedHostPinner(HostPinner* pinner) : previous_(SetHostPinner(pinner)) {}
  ~ScopedHostPinner() { SetHostPinner(previous_); }
  ScopedHostPinner(const ScopedHostPinner&) = delete;
  ScopedHostPinner& operator=(const ScopedHostPinner&) = delete;

 private:
  HostPinner* previous_;
};

}  // namespace hoist
