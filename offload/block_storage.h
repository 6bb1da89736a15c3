// BlockStorage: one file's worth of scratch storage for offloaded tensors (optimizer states and
// parameters swapped to NVMe). The optimizer swapper reads the next sub-group, computes the
// current one and writes the previous one; a batch of requests handed to Submit and completed by
// Wait is how it overlaps them.
//
// Implementations: UringStorage (io_uring queues), PosixStorage (pread/pwrite, O_DIRECT where
// allowed), MemoryStorage (tests), FaultInjectingStorage (wraps any other and makes chosen
// requests fail). OpenBlockStorage (offload/open_storage.h) picks one.
//
// Every I/O error is a Status whose message names the file, the offset, the size and errno, e.g.
//   offload: reading 1048576 bytes at offset 4194304 of /nvme/hoist/rank0.swp failed:
//   Input/output error (EIO)
// ENOSPC and EDQUOT are ResourceExhausted, a request outside the file or misaligned is
// InvalidArgument, a file that ends early is DataLoss, the rest IoError.
//
// Thread-safety: Read and Write may be called from several threads at once on disjoint byte
// ranges. Submit and Wait belong to one thread at a time. Every call may block on the device.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>

#include "core/status.h"

namespace hoist::offload {

enum class IoOp { kRead, kWrite };

// "reading" / "writing", as the error messages say it.
const char* IoOpVerb(IoOp op);

// One transfer of a batch. The caller owns `data` and keeps it alive and untouched until Wait
// returns; for a write the storage only reads it.
struct IoRequest {
  IoOp op = IoOp::kRead;
  int64_t offset = 0;
  void* data = nullptr;
  int64_t bytes = 0;
};

class BlockStorage {
 public:
  virtual ~BlockStorage() = default;

  // Transfers all `bytes` or returns an error; on error part of the range may have been
  // transferred. `offset`, `bytes` and `data` must be multiples of alignment().
  virtual Status Write(int64_t offset, const void* data, int64_t bytes) = 0;
  virtual Status Read(int64_t offset, void* data, int64_t bytes) = 0;

  // Starts every request of the batch; Wait blocks until all submitted requests are done and
  // returns the first error among them (every request still runs to its end or its error). A
  // Submit's own error means none of that batch was started. The base implementation runs the
  // requests through Read and Write before Submit returns; a queue-based storage overrides both.
  virtual Status Submit(std::span<const IoRequest> requests);
  virtual Status Wait();

  // What offsets, sizes and buffer addresses must be multiples of: 4096 under O_DIRECT, 1 for
  // buffered or in-memory storage.
  virtual int64_t alignment() const = 0;
  // The file's size, fixed when it was opened.
  virtual int64_t size_bytes() const = 0;
  virtual const std::string& path() const = 0;

 protected:
  // InvalidArgument when the request is outside [0, size_bytes()) or not aligned.
  Status CheckRequest(IoOp op, int64_t offset, const void* data, int64_t bytes) const;

 private:
  Status pending_;  // the first error of the batches submitted since the last Wait
};

// Opens the storage behind a swapper: (path, bytes) -> storage. Tests pass one that wraps the
// real storage in a FaultInjectingStorage (FaultyStorageFactory).
using StorageFactory = std::function<StatusOr<std::unique_ptr<BlockStorage>>(
    const std::string& path, int64_t size_bytes)>;

// The Status for a transfer that failed with `errno_value`, in the form the header shows.
// `done_bytes` > 0 adds how far it got ("... failed after 4096 bytes: ...").
Status IoFailure(IoOp op, const std::string& path, int64_t offset, int64_t bytes, int errno_value,
                 int64_t done_bytes = 0);
// The DataLoss Status for a read that met the end of the file after `done_bytes`.
Status UnexpectedEof(const std::string& path, int64_t offset, int64_t bytes, int64_t done_bytes);

// "Input/output error (EIO)": strerror with the errno's symbolic name.
std::string ErrnoText(int errno_value);

// One pread or pwrite of at most `bytes` at `offset`: returns what the system call returns
// (bytes moved, 0 at end of file, -1 with errno set).
using TransferFn = std::function<ssize_t(int64_t offset, void* data, int64_t bytes)>;

// Calls `transfer` until all `bytes` have moved: resumes after a short transfer, retries on
// EINTR, reports end of file (a read returning 0) as UnexpectedEof and a write making no
// progress as ENOSPC, each through IoFailure naming `path`.
Status TransferFully(IoOp op, const std::string& path, int64_t offset, void* data, int64_t bytes,
                     const TransferFn& transfer);

}  // namespace hoist::offload
