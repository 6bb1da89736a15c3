// FaultInjectingStorage: wraps a BlockStorage and makes chosen requests fail, deterministically,
// so that tests can check what the swapper does with a failing disk (LevelDB's fault-injecting
// Env). Faults: an errno (EIO, ENOSPC, ...), a short transfer (part of the request moves, then
// the file "ends" for a read or the disk "fills" for a write), or a delay before forwarding.
// Each fires at the Nth read or write (counted from when it was injected) or on the first request
// covering a given offset.
//
// Thread-safe (one lock guards the faults and counters). A `base` passed by reference must
// outlive the wrapper.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "offload/block_storage.h"

namespace hoist::offload {

// One fault, e.g.
//   storage.Inject(StorageFault::Error(IoOp::kRead, EIO).Nth(3));
//   storage.Inject(StorageFault::ShortTransfer(IoOp::kWrite, 4096).AtOffset(1 << 20));
struct StorageFault {
  enum class Kind { kError, kShortTransfer, kDelay };

  // The request fails with `errno_value` without touching the base storage.
  static StorageFault Error(IoOp op, int errno_value);
  // The first `done_bytes` of the request move; then a read reports the end of the file
  // (DataLoss) and a write ENOSPC.
  static StorageFault ShortTransfer(IoOp op, int64_t done_bytes);
  // The request waits `delay` and then proceeds normally.
  static StorageFault Delay(IoOp op, std::chrono::microseconds delay);

  // Fires on the nth matching request (1 = the next); the default.
  StorageFault& Nth(int64_t n) {
    nth = n;
    return *this;
  }
  // Fires on requests whose byte range contains `byte_offset` (instead of counting).
  StorageFault& AtOffset(int64_t byte_offset) {
    at_offset = byte_offset;
    return *this;
  }
  // Keeps firing on every later match, as a dead disk would.
  StorageFault& Sticky() {
    sticky = true;
    return *this;
  }

  Kind kind = Kind::kError;
  IoOp op = IoOp::kRead;
  int errno_value = 0;
  int64_t done_bytes = 0;
  std::chrono::microseconds delay{0};
  int64_t nth = 1;
  int64_t at_offset = -1;
  bool sticky = false;
};

class FaultInjectingStorage final : public BlockStorage {
 public:
  explicit FaultInjectingStorage(BlockStorage& base) : base_(base) {}
  // Wraps `base` and owns it (what a StorageFactory returns).
  explicit FaultInjectingStorage(std::unique_ptr<BlockStorage> base)
      : owned_(std::move(base)), base_(*owned_) {}

  void Inject(StorageFault fault);
  // Removes every fault.
  void Clear();
  // How many injected faults have fired.
  int64_t faults_fired() const;

  Status Write(int64_t offset, const void* data, int64_t bytes) override;
  Status Read(int64_t offset, void* data, int64_t bytes) override;
  int64_t alignment() const override { return base_.alignment(); }
  int64_t size_bytes() const override { return base_.size_bytes(); }
  const std::string& path() const override { return base_.path(); }

 private:
  struct ArmedFault {
    StorageFault fault;
    int64_t matched = 0;
    bool fired = false;
  };

  // The fault that fires for this request, if any; counts the request.
  bool Match(IoOp op, int64_t offset, int64_t bytes, StorageFault* fired);
  Status Transfer(IoOp op, int64_t offset, void* data, int64_t bytes);

  std::unique_ptr<BlockStorage> owned_;  // set when the wrapper owns its base
  BlockStorage& base_;
  mutable std::mutex mu_;
  std::vector<ArmedFault> faults_;  // guarded by mu_
  int64_t faults_fired_ = 0;        // guarded by mu_
};

// A StorageFactory for tests: opens the storage OpenBlockStorage chooses and, for paths that
// contain `path_part` (every path when empty), wraps it in a FaultInjectingStorage with `fault`
// injected.
StorageFactory FaultyStorageFactory(StorageFault fault, std::string path_part = "");

}  // namespace hoist::offload
