#include "offload/fault_injecting_storage.h"

#include <algorithm>
#include <cerrno>
#include <thread>

#include "offload/open_storage.h"

namespace hoist::offload {

StorageFault StorageFault::Error(IoOp op, int errno_value) {
  StorageFault f;
  f.kind = Kind::kError;
  f.op = op;
  f.errno_value = errno_value;
  return f;
}

StorageFault StorageFault::ShortTransfer(IoOp op, int64_t done_bytes) {
  StorageFault f;
  f.kind = Kind::kShortTransfer;
  f.op = op;
  f.done_bytes = done_bytes;
  return f;
}

StorageFault StorageFault::Delay(IoOp op, std::chrono::microseconds delay) {
  StorageFault f;
  f.kind = Kind::kDelay;
  f.op = op;
  f.delay = delay;
  return f;
}

void FaultInjectingStorage::Inject(StorageFault fault) {
  std::lock_guard<std::mutex> lock(mu_);
  faults_.push_back({std::move(fault)});
}

void FaultInjectingStorage::Clear() {
  std::lock_guard<std::mutex> lock(mu_);
  faults_.clear();
}

int64_t FaultInjectingStorage::faults_fired() const {
  std::lock_guard<std::mutex> lock(mu_);
  return faults_fired_;
}

bool FaultInjectingStorage::Match(IoOp op, int64_t offset, int64_t bytes, StorageFault* fired) {
  std::lock_guard<std::mutex> lock(mu_);
  bool any = false;
  for (ArmedFault& armed : faults_) {
    const StorageFault& f = armed.fault;
    if (f.op != op || (armed.fired && !f.sticky)) continue;
    bool hit;
    if (f.at_offset >= 0) {
      hit = f.at_offset >= offset && f.at_offset < offset + bytes;
    } else {
      hit = ++armed.matched >= f.nth;
    }
    // The first fault that fires decides the request; the others still count it.
    if (hit && !any) {
      armed.fired = true;
      ++faults_fired_;
      *fired = f;
      any = true;
    }
  }
  return any;
}

Status FaultInjectingStorage::Transfer(IoOp op, int64_t offset, void* data, int64_t bytes) {
  HOIST_RETURN_IF_ERROR(CheckRequest(op, offset, data, bytes));
  auto forward = [&](int64_t off, void* p, int64_t n) {
    return op == IoOp::kRead ? base_.Read(off, p, n) : base_.Write(off, p, n);
  };
  StorageFault fault;
  if (!Match(op, offset, bytes, &fault)) return forward(offset, data, bytes);
  switch (fault.kind) {
    case StorageFault::Kind::kError: return IoFailure(op, path(), offset, bytes, fault.errno_value);
    case StorageFault::Kind::kShortTransfer: {
      // Rounded down to the alignment, as a device reports partial progress in whole blocks.
      int64_t done = std::min(fault.done_bytes, bytes);
      done -= done % alignment();
      if (done > 0) HOIST_RETURN_IF_ERROR(forward(offset, data, done));
      if (op == IoOp::kRead) return UnexpectedEof(path(), offset, bytes, done);
      return IoFailure(op, path(), offset, bytes, ENOSPC, done);
    }
    case StorageFault::Kind::kDelay:
      std::this_thread::sleep_for(fault.delay);
      return forward(offset, data, bytes);
  }
  return forward(offset, data, bytes);
}

Status FaultInjectingStorage::Write(int64_t offset, const void* data, int64_t bytes) {
  return Transfer(IoOp::kWrite, offset, const_cast<void*>(data), bytes);
}

Status FaultInjectingStorage::Read(int64_t offset, void* data, int64_t bytes) {
  return Transfer(IoOp::kRead, offset, data, bytes);
}

StorageFactory FaultyStorageFactory(StorageFault fault, std::string path_part) {
  return [fault, path_part](const std::string& path,
                            int64_t bytes) -> StatusOr<std::unique_ptr<BlockStorage>> {
    HOIST_ASSIGN_OR_RETURN(std::unique_ptr<BlockStorage> base, OpenBlockStorage(path, bytes));
    if (path.find(path_part) == std::string::npos) return base;
    auto faulty = std::make_unique<FaultInjectingStorage>(std::move(base));
    faulty->Inject(fault);
    return std::unique_ptr<BlockStorage>(std::move(faulty));
  };
}

}  // namespace hoist::offload
