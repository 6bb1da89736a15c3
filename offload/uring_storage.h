// UringStorage: a BlockStorage on one preallocated scratch file through io_uring, so that a
// batch of swaps runs as queued asynchronous requests on the device instead of one blocking
// system call after another. Each request is cut into pieces of block_size_bytes and at most
// queue_depth pieces are in flight at once (DeepSpeed's aio.block_size and aio.queue_depth).
// The file is opened as PosixStorage opens it (ScratchFile: O_DIRECT with a buffered fallback,
// preallocation, removal of a file Open created).
//
// Submit starts a batch and returns; Wait blocks until every submitted request is done. Read
// and Write submit one request and wait for it alone. One lock guards the ring, so every call
// is thread-safe, but calls from several threads take turns (a Read waits behind a Wait), and a
// batch's requests keep running while a Read or Write on another range is being driven.
#pragma once

#include <liburing.h>

#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "offload/block_storage.h"
#include "offload/scratch_file.h"

namespace hoist::offload {

struct UringStorageOptions {
  ScratchFileOptions file;
  // The size of one queued piece and how many pieces may be in flight.
  int64_t block_size_bytes = 1048576;
  int queue_depth = 8;
};

class UringStorage final : public BlockStorage {
 public:
  // Opens or creates `path` with `size_bytes` usable bytes and sets up a ring of queue_depth
  // entries. InvalidArgument for a non-positive block size or queue depth; the errno of
  // io_uring_queue_init where the kernel refuses the ring.
  static StatusOr<std::unique_ptr<UringStorage>> Open(const std::string& path, int64_t size_bytes,
                                                      const UringStorageOptions& options = {});
  // Waits for whatever is still in flight, so that no request outlives its buffer's owner.
  ~UringStorage() override;
  UringStorage(const UringStorage&) = delete;
  UringStorage& operator=(const UringStorage&) = delete;

  Status Write(int64_t offset, const void* data, int64_t bytes) override;
  Status Read(int64_t offset, void* data, int64_t bytes) override;
  Status Submit(std::span<const IoRequest> requests) override;
  Status Wait() override;

  int64_t alignment() const override { return file_.alignment(); }
  int64_t size_bytes() const override { return file_.size_bytes(); }
  const std::string& path() const override { return file_.path(); }

  bool direct_io() const { return file_.direct_io(); }
  int64_t block_size_bytes() const { return block_size_bytes_; }
  int queue_depth() const { return queue_depth_; }

 private:
  // One request of a batch, or of a Read or Write, while its pieces are outstanding.
  struct Transfer {
    IoRequest request;
    int64_t pieces_left = 0;         // queued or in flight
    Status status;                   // the error of the failing piece nearest the start
    int64_t failed_after_bytes = 0;  // where in the request that piece stopped
    bool in_batch = false;           // owned by batch_; else it lives on a Read's or Write's stack
  };
  // A block_size_bytes slice of a Transfer; `done_bytes` grows with short completions.
  struct Piece {
    Transfer* transfer = nullptr;
    int64_t offset = 0;
    char* data = nullptr;
    int64_t bytes = 0;
    int64_t done_bytes = 0;
  };

  UringStorage(ScratchFile file, int64_t block_size_bytes, int queue_depth);

  // Cuts `transfer` into pieces at the back of the queue.
  void Enqueue(Transfer* transfer);
  // Moves queued pieces into free slots and prepares their SQEs, then hands what was prepared
  // to the kernel.
  void Pump();
  // Drives the ring until `transfer` (or, for nullptr, every batch transfer) has no pieces left,
  // or the ring itself fails.
  Status Drive(const Transfer* transfer);
  // Applies one completion to its piece: finished, resubmitted for the remainder, or failed.
  void Complete(int slot, int res);
  void FinishPiece(Piece& piece);
  bool BatchDone() const { return batch_pieces_left_ == 0; }

  ScratchFile file_;
  const int64_t block_size_bytes_;
  const int queue_depth_;

  std::mutex mu_;
  bool ring_ready_ = false;      // io_uring_queue_init succeeded, so the destructor tears it down
  io_uring ring_{};              // GUARDED_BY(mu_)
  std::deque<Piece> queued_;     // GUARDED_BY(mu_)
  std::vector<Piece> slots_;     // GUARDED_BY(mu_), queue_depth entries
  std::vector<int> free_slots_;  // GUARDED_BY(mu_)
  int prepared_ = 0;             // SQEs not yet taken by the kernel; GUARDED_BY(mu_)
  int in_kernel_ = 0;            // taken by the kernel, completion not yet seen; GUARDED_BY(mu_)
  std::vector<std::unique_ptr<Transfer>> batch_;  // GUARDED_BY(mu_), in submission order
  int64_t batch_pieces_left_ = 0;                 // GUARDED_BY(mu_)
  Status broken_;  // a failure of the ring itself; every later call returns it; GUARDED_BY(mu_)
};

}  // namespace hoist::offload
